package sidecar

import (
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/translate"
)

// Endpoints returns the ClusterLoadAssignment of every EDS cluster
// Clusters returns, endpoints grouped by locality. With a proxy locality and
// a locality setting that applies (model.LocalityLB), localities get
// priorities (failover, when outlier detection is on, as Istio requires)
// or weights (distribute), by the function proxyless EDS uses too.
func Endpoints(v *model.View) ([]*endpointv3.ClusterLoadAssignment, error) {
	return EndpointsOf(v, v.Clusters()), nil
}

// EndpointsOf returns the ClusterLoadAssignments of the EDS clusters among
// refs, for an update that regenerates the hosts a change touches.
// Endpoints depend only on the proxy's scope (model.View.OutboundKey).
func EndpointsOf(v *model.View, refs []model.Cluster) []*endpointv3.ClusterLoadAssignment {
	var out []*endpointv3.ClusterLoadAssignment
	for _, ref := range refs {
		tp := ref.DestinationRule.TrafficPolicy(ref.Port.Number, ref.Subset)
		if isPassthrough(ref, tp) || !usesEDS(ref.Service) {
			continue
		}
		out = append(out, loadAssignment(ref))
	}
	return out
}

// loadAssignment is ref's assignment: its endpoints by locality with the
// proxy's locality load balancing (translate.LoadAssignment).
func loadAssignment(ref model.Cluster) *endpointv3.ClusterLoadAssignment {
	return translate.LoadAssignment(ref, func(e *model.Endpoint) *endpointv3.LbEndpoint { return lbEndpoint(e, e.PortFor(ref.Port)) })
}
