// Package gitops holds the GitOps example; its test runs the example's
// script, which checks its own output.
package gitops

import (
	"os/exec"
	"testing"
)

func TestGitOpsExample(t *testing.T) {
	out, err := exec.Command("bash", "run.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
