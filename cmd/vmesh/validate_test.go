package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runVMesh runs the vmesh command in-process and returns its stdout and exit code.
func runVMesh(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, _, err := execVMesh(args...)
	var exit exitError
	switch {
	case err == nil:
		return out, 0
	case errors.As(err, &exit):
		return out, exit.code
	default:
		t.Fatalf("vmesh %v: %v", args, err)
		return "", -1
	}
}

func TestValidateFixturesOfEveryKind(t *testing.T) {
	for _, dir := range []string{"../../filestore/testdata/valid", "../../examples/quickstart"} {
		out, code := runVMesh(t, "validate", dir)
		if code != 0 || out != "" {
			t.Errorf("validate %s: exit %d\n%s", dir, code, out)
		}
	}
}

func TestValidateInvalidCases(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) < 9 {
		t.Fatalf("want an invalid fixture per kind, have %d", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, line := range strings.Split(string(data), "\n") {
				if w, ok := strings.CutPrefix(line, "# want: "); ok {
					want = append(want, "testdata/invalid/"+w)
				}
			}
			out, code := runVMesh(t, "validate", f)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			got := strings.Split(strings.TrimSpace(out), "\n")
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("output:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestValidateGitRef(t *testing.T) {
	repo := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "--quiet", "--initial-branch=main")
	git("config", "user.email", "t@vmesh.io")
	git("config", "user.name", "t")
	good, _ := os.ReadFile("../../examples/quickstart/config/greeter.yaml")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(repo, "mesh"), 0o755))
	must(os.WriteFile(filepath.Join(repo, "mesh", "greeter.yaml"), good, 0o644))
	git("add", "-A")
	git("commit", "--quiet", "-m", "good")
	git("tag", "good")
	bad, _ := os.ReadFile("testdata/invalid/virtualservice.yaml")
	must(os.WriteFile(filepath.Join(repo, "mesh", "vs.yaml"), bad, 0o644))
	git("add", "-A")
	git("commit", "--quiet", "-m", "bad")

	if out, code := runVMesh(t, "validate", "--git-repo", repo, "--git-ref", "good", "mesh"); code != 0 {
		t.Errorf("good ref: exit %d\n%s", code, out)
	}
	out, code := runVMesh(t, "validate", "--git-repo", repo, "--git-ref", "main", "mesh")
	if code != 1 || !strings.Contains(out, ":vs.yaml:14: VirtualService/shop/reviews: http[1].route[0].weight") {
		t.Errorf("bad ref: exit %d\n%s", code, out)
	}
	// Any revision git knows locally: HEAD~1 and a short SHA are the good commit.
	shortOut, err := exec.Command("git", "-C", repo, "rev-parse", "--short", "HEAD~1").Output()
	if err != nil {
		t.Fatal(err)
	}
	short := strings.TrimSpace(string(shortOut))
	for _, rev := range []string{"HEAD~1", short} {
		if out, code := runVMesh(t, "validate", "--git-repo", repo, "--git-ref", rev, "mesh"); code != 0 {
			t.Errorf("--git-ref %s: exit %d\n%s", rev, code, out)
		}
	}
	if _, _, err := execVMesh("validate", "--git-repo", repo, "--git-ref", "HEAD~9", "mesh"); err == nil || err.Error() != `git revision "HEAD~9": no such commit in `+repo {
		t.Errorf("--git-ref HEAD~9: %v", err)
	}
}
