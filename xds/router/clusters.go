package router

import (
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/sidecar"
	networking "istio.io/api/networking/v1alpha3"
)

// Clusters returns BlackHoleCluster and the outbound clusters (each port
// and DestinationRule subset, by the sidecar's cluster generation) of the
// services the VirtualServices bound to the router's Gateways route to,
// as Istio's gateways have them with PILOT_FILTER_GATEWAY_CLUSTER_CONFIG.
//
// A router with an AUTO_PASSTHROUGH server also has the SNI-DNAT clusters
// of every service it sees (sidecar.SNIDNATClusters), after them, as
// Istio's gateways have.
func Clusters(v *model.View) ([]*clusterv3.Cluster, error) {
	cds, _ := clustersAndEndpoints(v, destinationHosts(v), autoPassthrough(v))
	return cds, nil
}

// Endpoints returns the ClusterLoadAssignments of the EDS clusters among
// Clusters.
func Endpoints(v *model.View) ([]*endpointv3.ClusterLoadAssignment, error) {
	_, eds := clustersAndEndpoints(v, destinationHosts(v), autoPassthrough(v))
	return eds, nil
}

// clustersAndEndpoints returns Clusters and Endpoints, generated once, for
// the router's destination hosts (destinationHosts) and whether it has an
// AUTO_PASSTHROUGH server (autoPassthrough).
func clustersAndEndpoints(v *model.View, hosts []string, autoPass bool) ([]*clusterv3.Cluster, []*endpointv3.ClusterLoadAssignment) {
	cds, eds := sidecar.GatewayClusters(v, v.ClustersOf(v.ServicesOf(hosts)))
	if autoPass {
		dnatC, dnatE := sidecar.SNIDNATClusters(v, v.Clusters())
		cds = append(cds, dnatC...)
		eds = append(eds, dnatE...)
	}
	return cds, eds
}

// refs are the clusters of the services the router routes to.
func refs(v *model.View) []model.Cluster {
	return v.ClustersOf(v.ServicesOf(destinationHosts(v)))
}

// destinationHosts are the hosts the http, tls and tcp routes (and
// mirrors) of the VirtualServices bound to the router's Gateways name,
// qualified in their VirtualService's namespace, and the service of the
// router's tracing provider (its tracer sends spans to that cluster, which
// Istio's gateways have too).
func destinationHosts(v *model.View) []string {
	var out []string
	add := func(vs *model.VirtualService, d *networking.Destination) {
		if d == nil {
			return
		}
		if h := model.DestinationHost(d.GetHost(), vs.Namespace); !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	seen := map[*model.VirtualService]bool{}
	for _, gw := range v.Gateways() {
		for _, vs := range v.VirtualServicesForGateway(gw) {
			if seen[vs] {
				continue
			}
			seen[vs] = true
			for _, r := range vs.Spec.GetHttp() {
				for _, d := range r.GetRoute() {
					add(vs, d.GetDestination())
				}
				add(vs, r.GetMirror())
				for _, m := range r.GetMirrors() {
					add(vs, m.GetDestination())
				}
			}
			for _, r := range vs.Spec.GetTls() {
				for _, d := range r.GetRoute() {
					add(vs, d.GetDestination())
				}
			}
			for _, r := range vs.Spec.GetTcp() {
				for _, d := range r.GetRoute() {
					add(vs, d.GetDestination())
				}
			}
		}
	}
	for _, h := range append([]string{sidecar.TracingCollector(v)}, sidecar.AccessLogCollectors(v)...) {
		if h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}
