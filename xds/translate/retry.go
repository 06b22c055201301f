package translate

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// previousHostsPredicate is the retry host predicate that makes a retry
// pick another endpoint.
const previousHostsPredicate = "envoy.retry_host_predicates.previous_hosts"

// RetryPolicy is the route retry policy Istio generates, for Envoy and
// proxyless gRPC alike (grpc-go acts on the attempts, the gRPC status names
// in retry_on and the backoff, and ignores the rest):
//   - r is the route's retries, or, when the VirtualService sets none, the
//     mesh's defaultHttpRetryPolicy (model.Mesh.DefaultHTTPRetry);
//   - nil r is Istio's built-in default: 2 attempts on DefaultRetryOn,
//     another endpoint for each retry;
//   - attempts 0 (or less) turns retries off;
//   - HTTP status codes in retryOn become retriable status codes;
//   - consistentHash (a hash-based load balancer) keeps a retry on the same
//     endpoint: no previous-hosts predicate unless retryIgnorePreviousHosts
//     asks for it.
func RetryPolicy(r *networking.HTTPRetry, consistentHash bool) *routev3.RetryPolicy {
	if r != nil && r.GetAttempts() <= 0 {
		return nil
	}
	rp := &routev3.RetryPolicy{
		RetryOn:                       DefaultRetryOn,
		NumRetries:                    wrapperspb.UInt32(2),
		HostSelectionRetryMaxAttempts: 5,
	}
	ignorePrevious := !consistentHash
	if r != nil {
		rp.NumRetries = wrapperspb.UInt32(uint32(r.GetAttempts()))
		rp.PerTryTimeout = r.GetPerTryTimeout()
		if r.GetRetryOn() != "" {
			rp.RetryOn, rp.RetriableStatusCodes = splitRetryOn(r.GetRetryOn())
		}
		if b := r.GetBackoff(); b != nil && b.AsDuration() > 0 {
			rp.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: b}
		}
		if p := r.GetRetryIgnorePreviousHosts(); p != nil {
			ignorePrevious = p.GetValue()
		}
	}
	if ignorePrevious {
		rp.RetryHostPredicate = []*routev3.RetryPolicy_RetryHostPredicate{{
			Name:       previousHostsPredicate,
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: MustAny(&previoushostsv3.PreviousHostsPredicate{})},
		}}
	}
	return rp
}

// splitRetryOn splits Istio's retryOn into Envoy's retry_on conditions and
// the HTTP status codes in it, adding retriable-status-codes when codes
// are named without it.
func splitRetryOn(retryOn string) (string, []uint32) {
	var on []string
	var codes []uint32
	for part := range strings.SplitSeq(retryOn, ",") {
		part = strings.TrimSpace(part)
		if n, err := strconv.Atoi(part); err == nil && http.StatusText(n) != "" {
			codes = append(codes, uint32(n))
		} else if part != "" {
			on = append(on, part)
		}
	}
	if len(codes) > 0 && !slices.Contains(on, "retriable-status-codes") {
		on = append(on, "retriable-status-codes")
	}
	return strings.Join(on, ","), codes
}
