package translate_test

import (
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/xds/translate"
)

// Istio 1.31's retry conversion (pilot/pkg/networking/core/route/retry):
// the default, turning retries off, status codes and the previous-hosts
// predicate.
func TestRetryPolicyAsIstio(t *testing.T) {
	def := translate.RetryPolicy(nil, false)
	if def.GetNumRetries().GetValue() != 2 || def.GetRetryOn() != translate.DefaultRetryOn || def.GetHostSelectionRetryMaxAttempts() != 5 ||
		len(def.GetRetryHostPredicate()) != 1 || len(def.GetRetriableStatusCodes()) != 0 {
		t.Errorf("default policy = %v", def)
	}
	if p := translate.RetryPolicy(nil, true); len(p.GetRetryHostPredicate()) != 0 {
		t.Errorf("with a consistent hash the default keeps the endpoint: %v", p)
	}
	if p := translate.RetryPolicy(&networking.HTTPRetry{Attempts: 0}, false); p != nil {
		t.Errorf("attempts 0 = %v, want no retries", p)
	}
	p := translate.RetryPolicy(&networking.HTTPRetry{Attempts: 4, RetryOn: "5xx, 503,gateway-error,999", PerTryTimeout: durationpb.New(2e9), Backoff: durationpb.New(1e8)}, false)
	if p.GetNumRetries().GetValue() != 4 || p.GetRetryOn() != "5xx,gateway-error,999,retriable-status-codes" ||
		len(p.GetRetriableStatusCodes()) != 1 || p.GetRetriableStatusCodes()[0] != 503 ||
		p.GetPerTryTimeout().AsDuration() != 2e9 || p.GetRetryBackOff().GetBaseInterval().AsDuration() != 1e8 {
		t.Errorf("explicit policy = %v", p)
	}
	if p := translate.RetryPolicy(&networking.HTTPRetry{Attempts: 1, RetryIgnorePreviousHosts: wrapperspb.Bool(true)}, true); len(p.GetRetryHostPredicate()) != 1 {
		t.Errorf("retryIgnorePreviousHosts: true under a consistent hash: %v", p)
	}
	if p := translate.RetryPolicy(&networking.HTTPRetry{Attempts: 1, RetryIgnorePreviousHosts: wrapperspb.Bool(false)}, false); len(p.GetRetryHostPredicate()) != 0 {
		t.Errorf("retryIgnorePreviousHosts: false: %v", p)
	}
}
