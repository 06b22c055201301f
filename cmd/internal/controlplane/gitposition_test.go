package controlplane_test

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

// On a first start whose HEAD is rejected, /ready says why, naming the
// commit and the file by its path in the repository (issue 45).
func TestReadyNamesRejectedCommit(t *testing.T) {
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.email=t@vmesh.io", "-c", "user.name=t"}, args...)...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.MkdirAll(filepath.Join(repo, "mesh"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: demo}\nspec:\n  hosts: [a.demo.internal]\n  http:\n  - route:\n    - destination: {host: a.demo.internal}\n    timeout: forever\n"
	if err := os.WriteFile(filepath.Join(repo, "mesh", "route.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	git("init", "--quiet", "--initial-branch=main")
	git("add", "-A")
	git("commit", "--quiet", "-m", "bad")
	sha := git("rev-parse", "--short=12", "HEAD")

	cfg := controlplane.DefaultConfig()
	cfg.Git.Repo, cfg.Git.Ref, cfg.Git.Path, cfg.Git.Interval = repo, "main", "mesh", time.Hour
	cp := start(t, cfg)
	var body string
	waitUntil(t, 20*time.Second, "/ready to name the rejected commit", func() bool {
		var code int
		code, body = get(t, "http://"+cp.HTTPAddr()+"/ready")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "rejected")
	})
	for _, want := range []string{"config not loaded yet", "commit " + sha + " rejected; still serving nothing", "(1 error(s), first: " + sha + ":mesh/route.yaml:9: "} {
		if !strings.Contains(body, want) {
			t.Errorf("/ready: %q lacks %q", body, want)
		}
	}
}
