// Package consulfleet holds the Consul fleet example; its test runs
// the example's script, which checks its own output.
package consulfleet

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/testenv"
)

// TestConsulFleetExample runs run.sh: instances registered in a real Consul
// dev agent with gRPC health checks, reached through vmesh with no YAML; a
// failing check takes one out of the split, a passing one brings it back, a
// deregistration removes one.
func TestConsulFleetExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "run.sh")
	// The script cleans up after itself; a hung one is killed with
	// everything it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) && exit.ExitCode() == 77 {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		testenv.Missing(t, "run.sh: %s", strings.TrimSuffix(lines[len(lines)-1], " (install with: make test-deps)"))
	}
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
