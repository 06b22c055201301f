package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

// TestRolloutCommands: `vmesh rollout status|abort|promote`, `vmesh pin`
// and `vmesh unpin` against a running control plane staging a git
// repository's commits, and `vmesh status` naming a held commit by SHA.
func TestRolloutCommands(t *testing.T) {
	t.Setenv("http_proxy", "")
	t.Setenv("HTTP_PROXY", "")
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(addr string) string {
		t.Helper()
		doc := "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: a}\nspec: {address: " + addr + "}\n"
		if err := os.WriteFile(filepath.Join(repo, "a.yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "-A")
		git("-c", "user.email=t@vmesh.io", "-c", "user.name=t", "commit", "--quiet", "-m", addr)
		return git("rev-parse", "HEAD")[:12]
	}
	git("init", "--quiet", "--initial-branch=main")
	first := commit("1.1.1.1")
	cp, _ := servePlane(t, "", func(c *controlplane.Config) {
		c.ConfigDir, c.Git.Repo, c.Git.Ref, c.Git.Interval = "", repo, "main", time.Hour
		// A bake no test waits for: the commit stays baking until an
		// operator acts.
		c.Git.Rollout = &controlplane.RolloutConfig{Canary: controlplane.CanaryConfig{Percent: 10}, Bake: time.Hour}
	})
	srv := cp.HTTPAddr()
	out, _ := runVMesh(t, "rollout", "status", "--server", srv)
	if !strings.Contains(out, "IDLE") || !strings.Contains(out, "every proxy serves commit "+first) {
		t.Fatalf("rollout status at start:\n%s", out)
	}
	second := commit("2.2.2.2")
	resp, err := http.Post("http://"+srv+"/webhook/git", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitUntil(t, 15*time.Second, "the second commit baking", func() bool {
		out, _ = runVMesh(t, "rollout", "status", "--server", srv)
		return strings.Contains(out, "commit "+second+" baking")
	})
	if out, _ = runVMesh(t, "rollout", "abort", "--server", srv); !strings.Contains(out, "commit "+second+" HELD (aborted by an operator); every proxy serves "+first) {
		t.Errorf("rollout abort:\n%s", out)
	}
	if out, _ = runVMesh(t, "status", "--server", srv); !strings.Contains(out, "rollout HELD: commit "+second+" HELD") {
		t.Errorf("status does not name the held commit:\n%s", out)
	}
	if _, _, err := execVMesh("rollout", "abort", "--server", srv); err == nil || !strings.Contains(err.Error(), "no commit is baking") {
		t.Errorf("abort with nothing baking: %v", err)
	}
	if out, _ = runVMesh(t, "rollout", "promote", "--server", srv); !strings.Contains(out, "every proxy serves commit "+second) {
		t.Errorf("rollout promote:\n%s", out)
	}
	if out, _ = runVMesh(t, "pin", first, "--server", srv); !strings.Contains(out, "PINNED to commit "+first) {
		t.Errorf("pin:\n%s", out)
	}
	if _, _, err := execVMesh("pin", "no-such-rev", "--server", srv); err == nil || !strings.Contains(err.Error(), "no such commit") {
		t.Errorf("pin of an unknown revision: %v", err)
	}
	if out, _ = runVMesh(t, "unpin", "--server", srv); !strings.Contains(out, "commit "+second+" baking") {
		t.Errorf("unpin: the branch's commit goes through the rollout again:\n%s", out)
	}
}
