// Package dubbomigration holds the Dubbo migration example; its test runs
// the example's script, which checks its own output.
package dubbomigration

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/vmesh/vmesh/internal/testenv"
)

// TestDubboMigrationExample runs run.sh: Dubbo providers registered in a
// real ZooKeeper reached through vmesh, a VirtualService moving their
// consumers 90/10 then wholly to 2.0.0, and the 1.0.0 providers leaving.
func TestDubboMigrationExample(t *testing.T) {
	out, err := exec.Command("bash", "run.sh").CombinedOutput()
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) && exit.ExitCode() == 77 {
		testenv.Missing(t, "run.sh: %s", lastLine(out))
	}
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// lastLine is the last non-empty line of out.
func lastLine(out []byte) string {
	end := len(out)
	for end > 0 && (out[end-1] == '\n' || out[end-1] == '\r') {
		end--
	}
	start := end
	for start > 0 && out[start-1] != '\n' {
		start--
	}
	return string(out[start:end])
}
