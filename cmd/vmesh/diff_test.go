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

	// Revision expressions and --exit-code, as a pull request's CI uses
	// them: 1 when a proxy's config changes, 0 when none does, 2 when the
	// versions cannot be compared.
	git("tag", "v2")
	for _, c := range []struct {
		from, to string
		want     int
	}{
		{"HEAD~1", "HEAD", 1},
		{c1[:7], "v2", 1},
		{"HEAD", c2[:9], 0},
		{"HEAD~5", "HEAD", 2},
		{"no-such-branch", "HEAD", 2},
	} {
		stdout, stderr, err := execVMesh("diff", "--exit-code", "--git-repo", repo, "--git-path", "mesh", "--from", c.from, "--to", c.to)
		code := 0
		if err != nil {
			exit, ok := err.(exitError)
			if !ok {
				t.Fatalf("diff --from %s --to %s: %v, want an exit status", c.from, c.to, err)
			}
			code = exit.code
		}
		if code != c.want {
			t.Errorf("diff --exit-code --from %s --to %s: exit %d, want %d\n%s%s", c.from, c.to, code, c.want, stdout, stderr)
		}
		if c.want == 2 && !strings.Contains(stderr, "vmesh: git revision \""+c.from+"\": no such commit in "+repo) {
			t.Errorf("diff --from %s: stderr %q, want the revision named", c.from, stderr)
		}
	}
}
