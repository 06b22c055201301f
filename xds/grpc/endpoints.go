package grpc

import (
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
// weighted-locality balancing; a locality setting gives priorities or
// weights relative to the client's locality, as for sidecars. Endpoints are kept as configured: two
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

// LoadAssignment is the assignment of one EDS cluster: its endpoints
// (but unix sockets) by locality, with the client's locality load
// balancing (priorities and distribute weights, ref.LocalityLB) applied by
// the function the sidecar's EDS uses too.
func LoadAssignment(ref model.Cluster) *endpointv3.ClusterLoadAssignment {
	return translate.LoadAssignment(ref, func(e *model.Endpoint) *endpointv3.LbEndpoint {
		if strings.HasPrefix(e.Address, "unix://") {
			return nil
		}
		return &endpointv3.LbEndpoint{
			HostIdentifier:      &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: translate.SocketAddress(e.Address, e.PortFor(ref.Port))}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(e.EffectiveWeight()),
		}
	})
}
