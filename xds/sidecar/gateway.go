package sidecar

import (
	"slices"

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
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// GatewayRoutes translates the HTTP routes of vs for a router (Istio's
// gateway) serving host on port for gateway ("namespace/name"), by the
// sidecar's translation: the matches that apply to that gateway (their
// gateways, else their sourceLabels and sourceNamespace), destinations
// resolved in v as a sidecar's are. It returns no routes when none
// applies.
func GatewayRoutes(v *model.View, vs *model.VirtualService, host string, port uint32, gateway string) ([]*routev3.Route, error) {
	sc := baseScope(v)
	sc.gateway, sc.gatewayVSNamespace = gateway, vs.Namespace
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
// (security.Envoy.HTTPFilters), first, as Istio's gateways order them.
func GatewayHCM(statPrefix, routeName string, security []*hcmv3.HttpFilter) *hcmv3.HttpConnectionManager {
	filters := append(slices.Clone(security),
		httpFilter(faultFilter, &faultv3.HTTPFault{}),
		httpFilter(corsFilter, &corsv3.Cors{}),
		httpFilter(routerFilter, &routerv3.Router{}),
	)
	h := istioHCM(&hcmv3.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    waitingADS(),
			RouteConfigName: routeName,
		}},
		HttpFilters: filters,
	}, false)
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
