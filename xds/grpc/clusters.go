package grpc

//lint:file-ignore SA1019 Istio's deprecated fields (minimumRingSize, consecutiveErrors) are read because Istio still honours them

import (
	"github.com/vmesh/vmesh/xds/translate"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/security"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Clusters maps each cluster's traffic policy to what grpc-go supports:
// ROUND_ROBIN, LEAST_REQUEST and RING_HASH (RANDOM, PASSTHROUGH and
// LEAST_CONN fall back to ROUND_ROBIN, since grpc-go NACKs a whole CDS
// response with an unknown policy), max_requests circuit breaking and outlier
// detection; and TLS: automatic mTLS only toward STRICT endpoints, since
// proxyless servers serve PERMISSIVE ports as plaintext.
func Clusters(v *model.View) ([]*clusterv3.Cluster, error) {
	return ClustersOf(v, v.Clusters()), nil
}

// ClustersOf returns the given clusters of the proxy.
func ClustersOf(v *model.View, refs []model.Cluster) []*clusterv3.Cluster {
	var out []*clusterv3.Cluster
	for _, ref := range refs {
		c := &clusterv3.Cluster{Name: ref.Name()}
		if UsesEDS(ref.Service) {
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}
			c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: translate.ADSConfigSource(), ServiceName: c.Name}
		} else {
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS}
			c.LoadAssignment = logicalDNSAssignment(c.Name, ref)
		}
		applyPolicy(c, ref.DestinationRule.TrafficPolicy(ref.Port.Number, ref.Subset))
		c.TransportSocket = security.GRPCUpstreamTLS(v.UpstreamTLS(ref, model.AutoMTLSStrictOnly))
		out = append(out, c)
	}
	return out
}

// logicalDNSAssignment returns the one host:port a LOGICAL_DNS cluster
// resolves (gRPC supports exactly one).
func logicalDNSAssignment(name string, ref model.Cluster) *endpointv3.ClusterLoadAssignment {
	eps := ref.Service.SubsetEndpoints(ref.SubsetLabels)
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	if len(eps) == 0 {
		return cla
	}
	e := eps[0]
	cla.Endpoints = []*endpointv3.LocalityLbEndpoints{{
		Locality: &corev3.Locality{},
		LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: translate.SocketAddress(e.Address, e.PortFor(ref.Port)),
		}}}},
	}}
	return cla
}

func applyPolicy(c *clusterv3.Cluster, tp *networking.TrafficPolicy) {
	c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
	lb := tp.GetLoadBalancer()
	switch {
	case lb.GetConsistentHash() != nil:
		c.LbPolicy = clusterv3.Cluster_RING_HASH
		rh := &clusterv3.Cluster_RingHashLbConfig{HashFunction: clusterv3.Cluster_RingHashLbConfig_XX_HASH}
		if n := lb.GetConsistentHash().GetMinimumRingSize(); n > 0 {
			rh.MinimumRingSize = wrapperspb.UInt64(n)
		}
		c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: rh}
	case lb.GetSimple() == networking.LoadBalancerSettings_LEAST_REQUEST:
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
		c.LoadBalancingPolicy = leastRequestOrRoundRobin()
	}
	if n := tp.GetConnectionPool().GetHttp().GetHttp2MaxRequests(); n > 0 {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority:    corev3.RoutingPriority_DEFAULT,
			MaxRequests: wrapperspb.UInt32(uint32(n)),
		}}}
	}
	if od := tp.GetOutlierDetection(); od != nil {
		c.OutlierDetection = outlierDetection(od)
	}
}

// outlierDetection maps Istio's settings field by field. grpc-go implements
// success-rate and failure-percentage ejection (not consecutive errors): it
// uses interval, base_ejection_time and max_ejection_percent from here, and
// Envoy's success-rate defaults, written out (explicitSuccessRate).
func outlierDetection(od *networking.OutlierDetection) *clusterv3.OutlierDetection {
	out := &clusterv3.OutlierDetection{
		Interval:         od.GetInterval(),
		BaseEjectionTime: od.GetBaseEjectionTime(),
	}
	explicitSuccessRate(out)
	if v := od.GetConsecutive_5XxErrors(); v != nil {
		out.Consecutive_5Xx = wrapperspb.UInt32(v.GetValue())
	} else if n := od.GetConsecutiveErrors(); n > 0 {
		out.Consecutive_5Xx = wrapperspb.UInt32(uint32(n))
	}
	if v := od.GetConsecutiveGatewayErrors(); v != nil {
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(v.GetValue())
	}
	if n := od.GetMaxEjectionPercent(); n > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(min(n, 100)))
	}
	return out
}
