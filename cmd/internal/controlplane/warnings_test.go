package controlplane_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/filestore"
)

// A repository with a WasmPlugin object (an Istio kind vmesh does not
// implement) and a valid VirtualService: the commit is applied, and its
// warnings (the file's VM1001, the analysis' IST0101 for a missing subset)
// are in /debug/config, vmesh_config_warnings and the console's overview.
func TestServeGitCommitWithUnimplementedKind(t *testing.T) {
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
	for _, name := range []string{"wasmplugin.yaml", "mesh.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../vmesh/testdata/warnings", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("add", "-A")
	git("commit", "--quiet", "-m", "wasm")
	commit := git("rev-parse", "HEAD")

	cfg := controlplane.DefaultConfig()
	cfg.Git.Repo, cfg.Git.Ref = repo, "main"
	cp := start(t, cfg)
	waitReady(t, cp)

	_, body := get(t, "http://"+cp.HTTPAddr()+"/debug/config")
	var dbg filestore.DebugConfig
	if err := json.Unmarshal([]byte(body), &dbg); err != nil {
		t.Fatal(err)
	}
	if dbg.Commit != commit || len(dbg.Objects) != 4 {
		t.Fatalf("commit %s not applied: serving %q with %d objects; sources %+v", commit, dbg.Commit, len(dbg.Objects), dbg.Sources)
	}
	source := "git:" + repo
	var got []string
	for _, w := range dbg.Warnings {
		if w.Source != source || w.Commit != commit {
			t.Errorf("warning %+v: want source %s, commit %s", w, source, commit)
		}
		got = append(got, w.Error())
	}
	for _, prefix := range []string{
		commit[:12] + ":wasmplugin.yaml:3: WasmPlugin/istio-system/mesh-default: kind: warning VM1001: ",
		commit[:12] + ":mesh.yaml:40: VirtualService/shop/ratings: http[0].route[1].destination.subset: warning IST0101: ",
	} {
		if !slices.ContainsFunc(got, func(w string) bool { return strings.HasPrefix(w, prefix) }) {
			t.Errorf("/debug/config warnings lack %q...:\n%s", prefix, strings.Join(got, "\n"))
		}
	}
	if len(dbg.Warnings) != 3 { // IST0101 for payments.shop.internal too: no source defines it
		t.Errorf("/debug/config warnings: %+v", dbg.Warnings)
	}

	_, metrics := get(t, "http://"+cp.HTTPAddr()+"/metrics")
	for _, line := range []string{
		`vmesh_config_warnings{code="VM1001",source="` + source + `"} 1`,
		`vmesh_config_warnings{code="IST0101",source="` + source + `"} 2`,
		`vmesh_config_warnings{code="VM1004",source="` + source + `"} 0`,
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}

	_, page := get(t, "http://"+cp.HTTPAddr()+"/ui/")
	for _, text := range []string{`id="warnings"`, commit[:12] + ":wasmplugin.yaml:3", "VM1001", "IST0101", "http[0].route[1].destination.subset"} {
		if !strings.Contains(page, text) {
			t.Errorf("the console's overview lacks %q", text)
		}
	}
}
