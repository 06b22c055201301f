// Package dubbomigration holds the Dubbo migration example; its test runs
// the example's script, which checks its own output.
package dubbomigration

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

// TestDubboMigrationExample runs run.sh: Dubbo providers registered in a
// real ZooKeeper reached through vmesh, a VirtualService moving their
// consumers 90/10 then wholly to 2.0.0, and the 1.0.0 providers leaving.
func TestDubboMigrationExample(t *testing.T) {
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
