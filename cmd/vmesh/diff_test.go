package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
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
	// Default proxies: one representative per group; only demo's see greeter.
	if !strings.Contains(out, "proxy demo/client (grpc)") || strings.Contains(out, "other/") {
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

// quickstartDirs writes the quickstart's config into a "before" folder and,
// edited by edit, into an "after" one.
func quickstartDirs(t *testing.T, edit func(greeter string) string, extra string) (before, after string) {
	t.Helper()
	before, after = t.TempDir(), t.TempDir()
	for _, f := range []string{"greeter.yaml", "workloads.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../examples/quickstart/config", f))
		if err != nil {
			t.Fatal(err)
		}
		changed := string(data)
		if f == "greeter.yaml" {
			changed = edit(changed)
		}
		if err := os.WriteFile(filepath.Join(before, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(after, f), []byte(changed), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if extra != "" {
		if err := os.WriteFile(filepath.Join(after, "extra.yaml"), []byte(extra), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return before, after
}

// startIdleServer runs a control plane on dir that no proxy connects to and
// returns its HTTP address.
func startIdleServer(t *testing.T, dir string) string {
	t.Helper()
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	cp, err := controlplane.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return cp.HTTPAddr()
}

// The gate cannot be fooled by an empty proxy set: a commit that breaks a
// route (subset v2 -> v9) against a control plane no proxy is connected to
// exits 1, names the route change, says the proxies are representatives
// and marks the IST0101 the change brings (issue 45).
func TestDiffEmptyProxySetStillGates(t *testing.T) {
	before, after := quickstartDirs(t, func(s string) string {
		return strings.Replace(s, "subset: v2\n      weight: 20", "subset: v9\n      weight: 20", 1)
	}, "")
	server := startIdleServer(t, before)
	stdout, stderr, err := execVMesh("diff", "--exit-code", "--dir", before, "--dir", after, "--server", server)
	if code := exitCodeOf(t, err); code != 1 {
		t.Fatalf("diff --exit-code against no connected proxy: exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"note: no proxies connected to " + server + ": computed against one representative proxy",
		"changed route greeter.demo.vmesh.internal:50051",
		"representative (no proxy told about is in its group): a client in namespace demo",
		"|v2|greeter.demo.vmesh.internal\" -> \"outbound|50051|v9|", // the field diff names the cluster of v9
		"+ ", "IST0101",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("diff output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "no proxy's config changes") {
		t.Errorf("diff says nothing changes:\n%s", stdout)
	}
	// The JSON lists the representatives as such; the note goes to stderr.
	js, errOut, err := execVMesh("diff", "--dir", before, "--dir", after, "--server", server, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var diffs []struct {
		Proxy          string
		Representative bool
	}
	if err := json.Unmarshal([]byte(js), &diffs); err != nil || len(diffs) == 0 {
		t.Fatalf("diff -o json: %v\n%s", err, js)
	}
	for _, d := range diffs {
		if !d.Representative {
			t.Errorf("%s is not marked a representative", d.Proxy)
		}
	}
	if !strings.Contains(errOut, "note: no proxies connected to") {
		t.Errorf("stderr lacks the note: %s", errOut)
	}
}

// A warning the change brings, and no proxy's config changing, passes
// --exit-code and fails --strict; a config error the change brings fails
// --exit-code with 1 (vmesh would reject the commit), not 2.
func TestDiffStrictNewWarningAndNewError(t *testing.T) {
	const orphan = `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: orphan, namespace: demo}
spec:
  address: 127.0.0.9
  labels: {app: orphan}
`
	before, after := quickstartDirs(t, func(s string) string { return s }, orphan)
	stdout, stderr, err := execVMesh("diff", "--exit-code", "--dir", before, "--dir", after)
	if code := exitCodeOf(t, err); code != 0 {
		t.Fatalf("diff --exit-code with only a new warning: exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "no proxy's config changes") || !strings.Contains(stdout, "+ ") || !strings.Contains(stdout, "VM2003") {
		t.Errorf("diff output:\n%s", stdout)
	}
	stdout, stderr, err = execVMesh("diff", "--strict", "--dir", before, "--dir", after)
	if code := exitCodeOf(t, err); code != 1 {
		t.Fatalf("diff --strict with a new warning: exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "--strict: the change brings 1 new warning(s)") {
		t.Errorf("diff --strict output:\n%s", stdout)
	}
	// The same warning before and after is not new.
	stdout, _, err = execVMesh("diff", "--strict", "--dir", after, "--dir", after)
	if code := exitCodeOf(t, err); code != 0 {
		t.Errorf("diff --strict of an old warning: exit %d, want 0\n%s", code, stdout)
	}

	_, broken := quickstartDirs(t, func(s string) string { return strings.Replace(s, "weight: 80", "weight: eighty", 1) }, "")
	stdout, stderr, err = execVMesh("diff", "--exit-code", "--dir", before, "--dir", broken)
	if code := exitCodeOf(t, err); code != 1 {
		t.Fatalf("diff --exit-code to a config error: exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "would be rejected: 1 config error(s) the change brings") || !strings.Contains(stdout, "greeter.yaml:") {
		t.Errorf("diff to a config error:\n%s", stdout)
	}
	// A config error before the change: the versions cannot be compared.
	if _, _, err := execVMesh("diff", "--exit-code", "--dir", broken, "--dir", before); exitCodeOf(t, err) != 2 {
		t.Errorf("diff --exit-code from a config error: %v, want exit 2", err)
	}
}

// exitCodeOf is the exit status a vmesh command's error stands for.
func exitCodeOf(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var exit exitError
	if !errors.As(err, &exit) {
		t.Fatalf("%v, want an exit status", err)
	}
	return exit.code
}
