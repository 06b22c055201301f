package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiffGitRevisions(t *testing.T) {
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
	commit := func(route string) string {
		t.Helper()
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.MkdirAll(filepath.Join(repo, "mesh"), 0o755))
		must(os.WriteFile(filepath.Join(repo, "mesh", "services.yaml"), []byte(opsServices), 0o644))
		must(os.WriteFile(filepath.Join(repo, "mesh", "route.yaml"), []byte(route), 0o644))
		git("add", "-A")
		git("commit", "--quiet", "-m", "change")
		return git("rev-parse", "HEAD")
	}
	git("init", "--quiet", "--initial-branch=main")
	git("config", "user.email", "t@vmesh.io")
	git("config", "user.name", "t")
	c1 := commit(fmt.Sprintf(opsRoute, "5s"))
	c2 := commit(fmt.Sprintf(opsRoute, "7s"))

	out, code := runVMesh(t, "diff", "--git-repo", repo, "--git-path", "mesh", "--from", c1, "--to", c2)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	// Default proxies: one gRPC client per namespace; only demo's sees greeter.
	if !strings.Contains(out, "proxy demo/grpc-client (grpc)") || strings.Contains(out, "other/grpc-client") {
		t.Errorf("diff:\n%s", out)
	}
	if !strings.Contains(out, "changed route greeter.demo.internal:50051") || !strings.Contains(out, "7") {
		t.Errorf("diff does not show the changed route and field:\n%s", out)
	}
	if out, _ := runVMesh(t, "diff", "--git-repo", repo, "--git-path", "mesh", "--from", c2, "--to", "main"); !strings.Contains(out, "no proxy's config changes") {
		t.Errorf("same commit: %s", out)
	}
}
