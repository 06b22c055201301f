package grpc

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/vmesh/vmesh/xds/translate"
)

// Envoy's success-rate outlier detection defaults (cluster.proto), which
// grpc-go applies to a field left unset (gRFC A50).
const (
	successRateEnforcing     = 100
	successRateMinimumHosts  = 5
	successRateRequestVolume = 100
	successRateStdevFactor   = 1900
)

// explicitSuccessRate writes out the success-rate fields that a proxyless
// client would otherwise default, with the values grpc-go and Envoy take
// for them when unset, so every gRPC language reads the same cluster:
// grpc-node (@grpc/grpc-js-xds 1.14) turns an unset field into an explicit
// undefined that overrides its own default, and its success-rate check then
// throws and kills the process ("Reduce of empty array with no initial
// value"). grpc-go's meaning is unchanged: with enforcing_success_rate
// unset or above 0 it ejects on success rate with exactly these values.
// Failure-percentage ejection stays off in both (enforcing_failure_percentage
// unset: 0 in grpc-go, no ejection in grpc-node).
func explicitSuccessRate(out *clusterv3.OutlierDetection) {
	out.EnforcingSuccessRate = wrapperspb.UInt32(successRateEnforcing)
	out.SuccessRateMinimumHosts = wrapperspb.UInt32(successRateMinimumHosts)
	out.SuccessRateRequestVolume = wrapperspb.UInt32(successRateRequestVolume)
	out.SuccessRateStdevFactor = wrapperspb.UInt32(successRateStdevFactor)
}

// leastRequestOrRoundRobin is a LEAST_REQUEST cluster's policy list (gRFC
// A52: a client takes the first policy it supports): least request (gRFC
// A48) for grpc-go, which reads it exactly as lb_policy LEAST_REQUEST
// (choice count 2), then round robin for clients without least request:
// grpc-node 1.14 rejects the whole cluster for lb_policy LEAST_REQUEST
// ("unsupported lb_policy") and supports round_robin here. Round robin is
// listed bare, not inside wrr_locality: grpc-node registers its
// wrr_locality converter under a type URL without the type.googleapis.com/
// prefix, so it never matches.
func leastRequestOrRoundRobin() *clusterv3.LoadBalancingPolicy {
	return &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{
		{TypedExtensionConfig: &corev3.TypedExtensionConfig{
			Name:        "envoy.load_balancing_policies.least_request",
			TypedConfig: translate.MustAny(&leastrequestv3.LeastRequest{}),
		}},
		{TypedExtensionConfig: &corev3.TypedExtensionConfig{
			Name:        "envoy.load_balancing_policies.round_robin",
			TypedConfig: translate.MustAny(&roundrobinv3.RoundRobin{}),
		}},
	}}
}
