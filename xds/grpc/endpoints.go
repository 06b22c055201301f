package grpc

import (
	"maps"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/xds/translate"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Endpoints groups each EDS cluster's endpoints by locality
// (region/zone/subzone). Locality weight is the sum of its endpoints'
// weights, so weighted endpoints keep their share under gRPC's
// weighted-locality balancing. Endpoints are kept as configured: two
// WorkloadEntries with one address:port make grpc-go NACK the assignment,
// and the NACK shows in /debug/syncz.
func Endpoints(v *model.View) ([]*endpointv3.ClusterLoadAssignment, error) {
	return EndpointsOf(v.Clusters()), nil
}

// EndpointsOf returns the assignments of the EDS clusters among refs.
func EndpointsOf(refs []model.Cluster) []*endpointv3.ClusterLoadAssignment {
	var out []*endpointv3.ClusterLoadAssignment
	for _, ref := range refs {
		if UsesEDS(ref.Service) {
			out = append(out, LoadAssignment(ref))
		}
	}
	return out
}

// LoadAssignment is the assignment of one EDS cluster.
func LoadAssignment(ref model.Cluster) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: ref.Name()}
	byLoc := make(map[string]*endpointv3.LocalityLbEndpoints)
	for _, e := range ref.Service.SubsetEndpoints(ref.SubsetLabels) {
		if strings.HasPrefix(e.Address, "unix://") {
			continue
		}
		lle := byLoc[e.Locality]
		if lle == nil {
			lle = &endpointv3.LocalityLbEndpoints{
				Locality:            translate.Locality(e.Locality),
				LoadBalancingWeight: wrapperspb.UInt32(0),
			}
			byLoc[e.Locality] = lle
		}
		w := e.EffectiveWeight()
		lle.LoadBalancingWeight.Value += w
		lle.LbEndpoints = append(lle.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier:      &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: translate.SocketAddress(e.Address, e.PortFor(ref.Port))}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(w),
		})
	}
	for _, loc := range slices.Sorted(maps.Keys(byLoc)) {
		cla.Endpoints = append(cla.Endpoints, byLoc[loc])
	}
	return cla
}
