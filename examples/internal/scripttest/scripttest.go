// Package scripttest runs an example's run.sh from its Go test: the script
// checks its own output; exit status 77 means a test dependency is missing
// (a skip outside CI, a failure with CI=true).
package scripttest

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

// Run runs `bash script` in the test's directory, in its own process group
// so that a hung script is killed with everything it started.
func Run(t *testing.T, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) && exit.ExitCode() == 77 {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		testenv.Missing(t, "%s: %s", script, strings.TrimSuffix(lines[len(lines)-1], " (install with: make test-deps)"))
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	t.Logf("%s", out)
}
