package refusal_test

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vmesh/vmesh/internal/refusal"
)

// A refusal survives the trip through a gRPC status (what the agent gets)
// and any wrapping on the agent's side, and only a permanent one stops it.
func TestRefusalOverTheWire(t *testing.T) {
	sent := &refusal.Refusal{Code: codes.FailedPrecondition, Reason: "workload_group_not_found", Message: "no such group", Fix: "add it", Permanent: true}
	wire := status.ErrorProto(status.Convert(sent.Err()).Proto())
	wrapped := fmt.Errorf("agent: %w", fmt.Errorf("open stream: %w", wire))
	got, ok := refusal.Of(wrapped)
	if !ok || *got != *sent {
		t.Fatalf("Of(wrapped) = %+v, %v; want %+v", got, ok, sent)
	}
	perr := refusal.Permanent("registration", wrapped)
	if _, ok := errors.AsType[*refusal.PermanentError](perr); !ok {
		t.Fatalf("Permanent = %v, want a *PermanentError", perr)
	}
	if want := "registration refused for good: workload_group_not_found: no such group (fix: add it)"; perr.Error() != want {
		t.Errorf("Error() = %q, want %q", perr.Error(), want)
	}

	retry := &refusal.Refusal{Code: codes.Unauthenticated, Reason: "token_not_yet_valid", Message: "token_not_yet_valid: clock"}
	if perr := refusal.Permanent("certificate request", retry.Err()); perr != nil {
		t.Errorf("a retryable refusal was made permanent: %v", perr)
	}
	if got := retry.Error(); got != "token_not_yet_valid: clock" {
		t.Errorf("Error() = %q, the reason once", got)
	}
	for _, err := range []error{nil, errors.New("plain"), status.Error(codes.Unavailable, "down")} {
		if r, ok := refusal.Of(err); ok {
			t.Errorf("Of(%v) = %+v, want none", err, r)
		}
	}
}
