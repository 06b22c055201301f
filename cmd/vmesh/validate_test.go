package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/registries"
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

// The fixtures of every kind are valid; they are objects of each kind, not
// one mesh, so the analysis warns (a WorkloadEntry no ServiceEntry
// selects), and so does what vmesh does not serve or apply (a Gateway, TLS
// routes): vmesh's own warnings (VM1xxx, VM2xxx), never Istio's.
func TestValidateFixturesOfEveryKind(t *testing.T) {
	out, code := runVMesh(t, "validate", "../../filestore/testdata/valid")
	if code != 0 {
		t.Errorf("validate: exit %d\n%s", code, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" && !strings.Contains(line, ": warning VM20") && !strings.Contains(line, ": warning VM10") {
			t.Errorf("not an analysis warning: %s", line)
		}
	}
}

// vmesh validate --strict on every example's config prints nothing: no
// error, no warning. A folder whose files define the same objects (steps
// applied one at a time, as dubbo-migration's) is validated file by file.
func TestValidateExamplesPrintNoWarning(t *testing.T) {
	dirs := map[string]bool{}
	err := filepath.WalkDir("../../examples", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			dirs[filepath.Dir(path)] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !dirs["../../examples/quickstart/config"] || len(dirs) < 2 {
		t.Fatalf("example config folders: %v", dirs)
	}
	for dir := range dirs {
		targets := []string{dir}
		if out, _ := runVMesh(t, "validate", dir); strings.Contains(out, "defined twice in this source") {
			targets, _ = filepath.Glob(filepath.Join(dir, "*.y*ml"))
		}
		for _, target := range targets {
			if out, code := runVMesh(t, "validate", "--strict", target); code != 0 || out != "" {
				t.Errorf("validate --strict %s: exit %d\n%s", target, code, out)
			}
		}
	}
	if out, code := runVMesh(t, "validate", "--strict", "../../examples/quickstart"); code != 0 || out != "" {
		t.Errorf("validate --strict examples/quickstart: exit %d\n%s", code, out)
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
	if code != 1 || !strings.Contains(out, ":mesh/vs.yaml:14: VirtualService/shop/reviews: http[1].route[0].weight") {
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

	// git's fetch progress is shown with -v only, on the command's stderr.
	_, quiet, err := execVMesh("validate", "--git-repo", repo, "--git-ref", "good", "mesh")
	if err != nil || strings.Contains(quiet, "git fetch progress") || !strings.Contains(quiet, "at "+short) {
		t.Errorf("validate --git-ref without -v: %v\n%s", err, quiet)
	}
	_, verbose, err := execVMesh("validate", "-v", "--git-repo", repo, "--git-ref", "good", "mesh")
	if err != nil || !strings.Contains(verbose, "git fetch progress") {
		t.Errorf("validate -v --git-ref shows no fetch progress: %v\n%s", err, verbose)
	}
}

// Warnings do not fail validate, unless --strict; analyze shows the infos
// validate only counts.
func TestValidateWarningsAndStrict(t *testing.T) {
	want := []string{
		"testdata/warnings/mesh.yaml:40: VirtualService/shop/ratings: http[0].route[1].destination.subset: warning IST0101: Referenced host+subset in destinationrule not found: \"ratings.shop.internal+v2\": DestinationRule shop/ratings has no subset \"v2\", so its share of the route fails, as in Istio (add the subset, or fix the name)",
		"testdata/warnings/wasmplugin.yaml:3: WasmPlugin/istio-system/mesh-default: kind: warning VM1001: WasmPlugin is an Istio kind vmesh does not implement: the document is accepted and ignored",
	}
	out, code := runVMesh(t, "validate", "testdata/warnings")
	if code != 0 || strings.TrimSpace(out) != strings.Join(want, "\n") {
		t.Errorf("validate: exit %d\n%s\nwant\n%s", code, out, strings.Join(want, "\n"))
	}
	if _, code := runVMesh(t, "validate", "--strict", "testdata/warnings"); code != 1 {
		t.Errorf("validate --strict: exit %d, want 1", code)
	}
	out, code = runVMesh(t, "analyze", "testdata/warnings")
	info := "testdata/warnings/mesh.yaml:43: VirtualService/shop/ratings: http[0].route[2].destination.host: info IST0101: Referenced host not found: \"payments.shop.internal\""
	if code != 1 || !strings.Contains(out, want[0]) || !strings.Contains(out, want[1]) || !strings.Contains(out, info) {
		t.Errorf("analyze: exit %d\n%s", code, out)
	}
	// The quickstart has no warning; its outlier detection is an info:
	// proxyless gRPC clients do not eject on consecutive errors.
	out, code = runVMesh(t, "analyze", "../../examples/quickstart")
	if code != 0 || !strings.Contains(out, "trafficPolicy.outlierDetection: info VM1101: ") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("analyze examples/quickstart: exit %d\n%s", code, out)
	}
}

// A git commit with a WasmPlugin object (a kind vmesh does not implement)
// and a valid VirtualService validates (the warning shown, exit 0), and
// vmesh diff of the change shows the warning it brings.
func TestGitRefWithUnimplementedKindValidatesAndDiffWarns(t *testing.T) {
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
	git("init", "--quiet", "--initial-branch=main")
	git("config", "user.email", "t@vmesh.io")
	git("config", "user.name", "t")
	copyFile := func(name string) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join("testdata/warnings", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(repo, "mesh"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, "mesh", name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "-A")
		git("commit", "--quiet", "-m", name)
	}
	copyFile("mesh.yaml")
	before := git("rev-parse", "HEAD")
	copyFile("wasmplugin.yaml")
	out, code := runVMesh(t, "validate", "--git-repo", repo, "--git-ref", "main", "mesh")
	head := git("rev-parse", "HEAD")
	if code != 0 || !strings.Contains(out, head[:12]+":mesh/wasmplugin.yaml:3: WasmPlugin/istio-system/mesh-default: kind: warning VM1001: ") {
		t.Errorf("validate --git-ref: exit %d\n%s", code, out)
	}
	out, code = runVMesh(t, "diff", "--git-repo", repo, "--git-path", "mesh", "--from", before, "--to", "main")
	if code != 0 || !strings.Contains(out, "+ "+head[:12]+":mesh/wasmplugin.yaml:3: WasmPlugin/istio-system/mesh-default: kind: warning VM1001: ") ||
		!strings.Contains(out, "\n  ") || !strings.Contains(out, "warning IST0101") {
		t.Errorf("diff: exit %d\n%s", code, out)
	}
}

// With --server, a host no file defines is checked against the running
// control plane's registries: found there, it is no longer an info; not
// found, it is a warning.
func TestAnalyzeAgainstServerRegistries(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inv, []byte("services:\n- name: billing\n  host: billing.internal\n  port: 8080\n  protocol: grpc\n  instances: [{address: 10.0.0.1}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := registries.ParseFlags([]string{"static=" + inv})
	if err != nil {
		t.Fatal(err)
	}
	cp, _ := servePlane(t, "", func(c *controlplane.Config) { c.Registries = specs })
	dir := t.TempDir()
	route := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: pay, namespace: shop}\nspec:\n  hosts: [billing.internal]\n  http:\n  - route:\n    - destination: {host: billing.internal}\n      weight: 90\n    - destination: {host: ledger.internal}\n      weight: 10\n"
	if err := os.WriteFile(filepath.Join(dir, "route.yaml"), []byte(route), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runVMesh(t, "analyze", dir)
	if code != 0 || strings.Count(out, ": info ") != 3 {
		t.Errorf("analyze without --server: exit %d\n%s", code, out)
	}
	out, code = runVMesh(t, "analyze", "--server", cp.HTTPAddr(), dir)
	want := filepath.Join(dir, "route.yaml") + ":10: VirtualService/shop/pay: http[0].route[1].destination.host: warning IST0101: Referenced host not found: \"ledger.internal\""
	if code != 1 || !strings.HasPrefix(out, want) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("analyze --server: exit %d\n%s\nwant one line %s...", code, out, want)
	}
}

// A YAML syntax error in one file does not cascade: the WorkloadEntries
// and WorkloadGroup that only its ServiceEntry selected get no VM2003 or
// VM2004; one VM2007 says the cross-object findings are held back until
// the file decodes (issue 45).
func TestValidateNoCascadeFromABrokenFile(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"greeter.yaml", "workloads.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../examples/quickstart/config", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "greeter.yaml" {
			data = []byte(strings.Replace(string(data), "hosts:", "hosts: [[[", 1))
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, code := runVMesh(t, "validate", dir)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if strings.Contains(out, "VM2003") || strings.Contains(out, "VM2004") {
		t.Errorf("cascade warnings from the broken file:\n%s", out)
	}
	if strings.Count(out, "VM2007") != 1 || !strings.Contains(out, "held back while "+filepath.Join(dir, "greeter.yaml")+" failed to decode") {
		t.Errorf("no one VM2007 naming the broken file:\n%s", out)
	}
}
