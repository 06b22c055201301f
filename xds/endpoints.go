package xds

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/xds/sidecar"

	"github.com/vmesh/vmesh/xds/translate"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Endpoints returns the ClusterLoadAssignments for a proxy's EDS clusters.
func Endpoints(s *model.Snapshot, p *Proxy) ([]*endpointv3.ClusterLoadAssignment, error) {
	switch p.Kind {
	case KindGRPC:
		return grpcEndpoints(s, p)
	case KindSidecar:
		return sidecar.Endpoints(s, toSidecar(p))
	}
	return nil, fmt.Errorf("proxy %s: unknown kind %q", p.ID, p.Kind)
}

// grpcEndpoints groups each EDS cluster's endpoints by locality
// (region/zone/subzone). Locality weight is the sum of its endpoints'
// weights, so weighted endpoints keep their share under gRPC's
// weighted-locality balancing. Endpoints are kept as configured: two
// WorkloadEntries with one address:port make grpc-go NACK the assignment,
// and the NACK shows in /debug/syncz.
func grpcEndpoints(s *model.Snapshot, p *Proxy) ([]*endpointv3.ClusterLoadAssignment, error) {
	return grpcEndpointsOf(outboundClusters(s, p)), nil
}

// grpcEndpointsOf returns the assignments of the EDS clusters among refs.
func grpcEndpointsOf(refs []clusterRef) []*endpointv3.ClusterLoadAssignment {
	var out []*endpointv3.ClusterLoadAssignment
	for _, ref := range refs {
		if !usesEDS(ref.svc) {
			continue
		}
		out = append(out, loadAssignment(ref))
	}
	return out
}

func loadAssignment(ref clusterRef) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: ref.name()}
	byLoc := make(map[string]*endpointv3.LocalityLbEndpoints)
	for _, e := range ref.svc.SubsetEndpoints(ref.labels) {
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
			HostIdentifier:      &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: translate.SocketAddress(e.Address, e.PortFor(ref.port))}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(w),
		})
	}
	for _, loc := range slices.Sorted(maps.Keys(byLoc)) {
		cla.Endpoints = append(cla.Endpoints, byLoc[loc])
	}
	return cla
}
