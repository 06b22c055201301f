// Package gitops holds the GitOps example; its test runs the example's
// script, which checks its own output.
package gitops

import (
	"testing"

	"github.com/vmesh/vmesh/examples/internal/scripttest"
)

// TestGitOpsExample runs run.sh: a branch's diff before the merge, the
// webhook, and the client on the new commit after it.
func TestGitOpsExample(t *testing.T) { scripttest.Run(t, "run.sh") }
