package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/vmesh/vmesh/internal/refusal"
)

// The agent's exit status says whether restarting can help, and the unit
// systemd runs it under agrees on the status that means "no".
func TestAgentExitStatus(t *testing.T) {
	permanent := &refusal.PermanentError{Part: "registration", Refusal: &refusal.Refusal{Code: codes.FailedPrecondition, Reason: "workload_group_not_found", Permanent: true}}
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("agent: %w", permanent), refusal.ExitPermanent},
		{errors.Join(permanent, errors.New("sds: closed")), refusal.ExitPermanent},
		{errors.New("agent: xDS socket: address in use"), 1},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	unit, err := os.ReadFile("../../tools/package/debian/vmesh-agent/vmesh-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("\nRestartPreventExitStatus=%d\n", refusal.ExitPermanent); !strings.Contains(string(unit), want) {
		t.Errorf("vmesh-agent.service lacks %q: systemd would restart a refused agent forever", strings.TrimSpace(want))
	}
}
