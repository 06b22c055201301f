package sidecar

import (
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/translate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// GatewayRoutes translates the HTTP routes of vs for a router (Istio's
// gateway) serving host on port for gateway ("namespace/name"), by the
// sidecar's translation: the matches that apply to that gateway (their
// gateways, else their sourceLabels and sourceNamespace), destinations
// resolved in v as a sidecar's are; tls says the server has TLS settings
// (a redirect's default scheme is then https). It returns no routes when
// none applies.
func GatewayRoutes(v *model.View, vs *model.VirtualService, host string, port uint32, gateway string, tls bool) ([]*routev3.Route, error) {
	sc := baseScope(v)
	sc.gateway, sc.gatewayVSNamespace, sc.gatewayTLS = gateway, vs.Namespace, tls
	t := target{svc: &model.Service{Hostname: host, Namespace: vs.Namespace}, port: model.Port{Number: port, Protocol: "HTTP"}}
	return sc.httpRoutes(t, vs)
}

// GatewayTCPProxy returns the tcp_proxy filter of a VirtualService tcp or
// tls route's destinations for a router serving host on port for gateway,
// by the sidecar's translation (weights, names of clusters the proxy does
// not have).
func GatewayTCPProxy(v *model.View, vs *model.VirtualService, host string, port uint32, rds []*networking.RouteDestination) *listenerv3.Filter {
	sc := baseScope(v)
	t := target{svc: &model.Service{Hostname: host, Namespace: vs.Namespace}, port: model.Port{Number: port, Protocol: "TCP"}}
	stat, dests := sc.l4Destinations(t, vs, rds)
	return tcpProxy(stat, dests)
}

// GatewayHCM is a router's HttpConnectionManager for one server, as
// Istio's gateways set it: the sidecar's HTTP filters and settings
// (istioHCM), the client's address taken from the connection
// (use_remote_address, as an edge proxy), x-forwarded-client-cert
// sanitised and set from the client's certificate, server name
// istio-envoy, routes from RDS under routeName. security are the
// workload's authentication and authorization filters
// (security.Envoy.HTTPFilters), first, as Istio's gateways order them;
// tracing is the router's (Tracing).
func GatewayHCM(statPrefix, routeName string, security []*hcmv3.HttpFilter, tracing Trace) *hcmv3.HttpConnectionManager {
	filters := append(slices.Clone(security),
		httpFilter(faultFilter, &faultv3.HTTPFault{}),
		httpFilter(corsFilter, &corsv3.Cors{}),
		httpFilter(routerFilter, &routerv3.Router{}),
	)
	h := tracing.apply(istioHCM(&hcmv3.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    waitingADS(),
			RouteConfigName: routeName,
		}},
		HttpFilters: filters,
	}, false))
	h.UseRemoteAddress = wrapperspb.Bool(true)
	h.HttpProtocolOptions = &corev3.Http1ProtocolOptions{}
	h.ServerName = "istio-envoy"
	h.ForwardClientCertDetails = hcmv3.HttpConnectionManager_SANITIZE_SET
	h.SetCurrentClientCertDetails = &hcmv3.HttpConnectionManager_SetCurrentClientCertDetails{Subject: wrapperspb.Bool(true), Cert: true, Dns: true, Uri: true}
	return h
}

// NetworkFilter wraps a network filter's config under its name.
func NetworkFilter(name string, m proto.Message) *listenerv3.Filter { return networkFilter(name, m) }

// HCMFilterName is the name of the HTTP connection manager network filter.
const HCMFilterName = hcmFilter

// TLSInspector is the listener filter that reads a ClientHello's SNI and
// ALPN, as Istio configures it.
func TLSInspector() *listenerv3.ListenerFilter { return tlsInspectorFilter() }

// SDSSecret references a secret the agent serves over SDS (wait: no
// initial fetch timeout), as the sidecar's TLS contexts do.
func SDSSecret(name string, wait bool) *tlsv3.SdsSecretConfig { return sdsSecret(name, wait) }

// TLSSocket wraps a TLS context as the tls transport socket.
func TLSSocket(ctx proto.Message) *corev3.TransportSocket { return tlsSocket(ctx) }

// GatewayClusters returns the outbound clusters of refs after
// BlackHoleCluster first, and the ClusterLoadAssignments of the EDS
// ones: the sidecar's cluster generation for the services a router routes
// to.
func GatewayClusters(v *model.View, refs []model.Cluster) ([]*clusterv3.Cluster, []*endpointv3.ClusterLoadAssignment) {
	fixed := FixedClusters(v)
	return append(fixed[1:], ClustersOf(v, refs)...), EndpointsOf(v, refs)
}

// SNIDNATName is the name of an SNI-DNAT cluster (and of its EDS
// resource), as Istio's BuildDNSSrvSubsetKey: "outbound_.<port>_.<subset>_.<host>",
// the SNI a mesh client sends to reach that cluster through an
// AUTO_PASSTHROUGH gateway.
func SNIDNATName(port uint32, subset, host string) string {
	return "outbound_." + strconv.FormatUint(uint64(port), 10) + "_." + subset + "_." + host
}

// SNIDNATClusters returns a router's SNI-DNAT clusters, as Istio's
// buildOutboundSniDnatClusters for a gateway with an AUTO_PASSTHROUGH
// server: per ref of a service that is not mesh-external, on a port that
// is not UDP, the outbound cluster named SNIDNATName without any TLS (the
// client's mTLS passes through), and the ClusterLoadAssignments of the EDS
// ones.
func SNIDNATClusters(v *model.View, refs []model.Cluster) ([]*clusterv3.Cluster, []*endpointv3.ClusterLoadAssignment) {
	sc := baseScope(v)
	var cds []*clusterv3.Cluster
	var eds []*endpointv3.ClusterLoadAssignment
	for _, ref := range refs {
		if ref.Service.MeshExternal || strings.EqualFold(ref.Port.Protocol, "UDP") {
			continue
		}
		name := SNIDNATName(ref.Port.Number, ref.Subset, ref.Service.Hostname)
		c := proto.Clone(sc.outboundCluster(ref)).(*clusterv3.Cluster)
		c.Name = name
		c.TransportSocket, c.TransportSocketMatches = nil, nil
		if c.GetEdsClusterConfig() != nil {
			c.EdsClusterConfig.ServiceName = name
		}
		if la := c.GetLoadAssignment(); la != nil {
			la.ClusterName = name
		}
		cds = append(cds, c)
		if c.GetType() == clusterv3.Cluster_EDS {
			mtls := map[*endpointv3.LbEndpoint]bool{}
			la := translate.LoadAssignment(ref, func(e *model.Endpoint) *endpointv3.LbEndpoint {
				lb := lbEndpoint(e, e.PortFor(ref.Port))
				mtls[lb] = takesMeshMTLS(e)
				return lb
			})
			mtlsOnly(la, mtls)
			la.ClusterName = name
			eds = append(eds, la)
		}
	}
	return cds, eds
}

// takesMeshMTLS reports whether an endpoint takes Istio mTLS as Istio
// decides it for a WorkloadEntry (getTLSModeFromWorkloadEntry): its
// security.istio.io/tlsMode label when it has one, else whether it names
// a service account.
func takesMeshMTLS(e *model.Endpoint) bool {
	if m, ok := e.Labels[meshlabels.TLSModeLabel]; ok {
		return strings.EqualFold(m, meshlabels.TLSModeIstio)
	}
	return e.ServiceAccount != ""
}

// mtlsOnly keeps the endpoints that take Istio mTLS (mtls), as Istio's
// EndpointsWithMTLSFilter for SNI-DNAT clusters: a client's passed-through
// TLS must end at a sidecar. Each locality stays, its weight the sum of
// its remaining endpoints' (none when 0).
func mtlsOnly(la *endpointv3.ClusterLoadAssignment, mtls map[*endpointv3.LbEndpoint]bool) {
	for _, loc := range la.GetEndpoints() {
		var keep []*endpointv3.LbEndpoint
		var weight uint32
		for _, e := range loc.GetLbEndpoints() {
			if !mtls[e] {
				continue
			}
			keep = append(keep, e)
			weight += max(e.GetLoadBalancingWeight().GetValue(), 1)
		}
		loc.LbEndpoints = keep
		loc.LoadBalancingWeight = nil
		if weight > 0 {
			loc.LoadBalancingWeight = wrapperspb.UInt32(weight)
		}
	}
}

// TCPProxyTo is a tcp_proxy filter to one cluster.
func TCPProxyTo(statPrefix, cluster string) *listenerv3.Filter {
	return tcpProxy(statPrefix, []weighted{{cluster: cluster}})
}
