package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

// status lists every replica, one line each: the config it serves and its
// config errors (the first one with its file:line), or why it could not be
// read; a dead replica does not stop the listing, and makes status exit 1.
// With no proxy connected the JSON lists none, not null.
func TestStatusReplicas(t *testing.T) {
	cp, _ := servePlane(t, onboardingConfig, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()

	out, code := runVMesh(t, "status", "--server", cp.HTTPAddr(), "-o", "json")
	if code != 0 {
		t.Fatalf("status exit %d", code)
	}
	if !strings.Contains(out, `"proxies": []`) {
		t.Errorf("no proxy connected: %s", out)
	}

	out, code = runVMesh(t, "status", "--server", cp.HTTPAddr(), "--server", dead)
	if code != 1 {
		t.Errorf("a dead replica: exit %d, want 1", code)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[1], cp.HTTPAddr()) || !strings.Contains(lines[1], "r") ||
		!strings.HasPrefix(lines[2], dead) || !strings.Contains(lines[2], "unreachable: ") || !strings.Contains(out, "PROXY") {
		t.Errorf("status with a dead replica:\n%s", out)
	}

	// A broken file in the served directory shows with its file:line.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: demo}\nspec:\n  hosts: [a.demo.internal]\n  http:\n  - route:\n    - destination: {host: a.demo.internal}\n      weight: -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// And a warning: an Istio kind vmesh does not implement.
	if err := os.WriteFile(filepath.Join(dir, "wasm.yaml"), []byte("apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: mesh-default, namespace: istio-system}\nspec:\n  url: oci://example.internal/filters/auth:1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad, _ := servePlane(t, onboardingConfig, func(c *controlplane.Config) { c.ConfigDir = dir })
	out, _ = runVMesh(t, "status", "--server", bad.HTTPAddr(), "-o", "yaml")
	var report statusReport
	if err := yaml.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("-o yaml: %v\n%s", err, out)
	}
	if len(report.Replicas) != 1 || report.Replicas[0].Errors != 1 || !strings.Contains(report.Replicas[0].FirstError, "bad.yaml:9") {
		t.Errorf("replica errors: %+v", report.Replicas)
	}
	if r := report.Replicas[0]; r.Warnings != 1 || !strings.Contains(r.FirstWarning, "wasm.yaml:2") || !strings.Contains(r.FirstWarning, "VM1001") {
		t.Errorf("replica warnings: %+v", r)
	}
	if table, _ := runVMesh(t, "status", "--server", bad.HTTPAddr()); !strings.Contains(table, "WARNINGS") || !strings.Contains(table, "1, first: ") {
		t.Errorf("status table lacks the warning:\n%s", table)
	}
	if _, _, err := execVMesh("status", "--server", bad.HTTPAddr(), "-o", "xml"); err == nil {
		t.Error("-o xml accepted")
	}
	var again statusReport
	js, _ := runVMesh(t, "status", "--server", bad.HTTPAddr(), "--json")
	if err := json.Unmarshal([]byte(js), &again); err != nil || len(again.Replicas) != 1 {
		t.Errorf("--json: %v %s", err, js)
	}
}

// TestStatusShowsGitStall: while the git remote stalls (it accepts and
// never answers), the replica's line says the fetch stalled, from where
// and for how long, ahead of any other error; it clears once the remote
// answers again.
func TestStatusShowsGitStall(t *testing.T) {
	t.Setenv("http_proxy", "")
	t.Setenv("HTTP_PROXY", "")
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
	if err := os.WriteFile(filepath.Join(repo, "a.yaml"), []byte("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: a}\nspec: {address: 1.1.1.1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "-A")
	git("-c", "user.email=t@vmesh.io", "-c", "user.name=t", "commit", "--quiet", "-m", "a")
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(repo), "GIT_HTTP_EXPORT_ALL=1"},
	}
	var stalled atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stalled.Load() {
			<-r.Context().Done() // accepts, never answers
			return
		}
		backend.ServeHTTP(w, r)
	}))
	defer srv.Close()
	remote := srv.URL + "/" + filepath.Base(repo)
	cp, _ := servePlane(t, "", func(c *controlplane.Config) {
		c.ConfigDir, c.Git.Repo, c.Git.Ref, c.Git.Interval, c.Git.StallTimeout = "", remote, "main", time.Hour, time.Second
	})
	webhook := func() {
		resp, err := http.Post("http://"+cp.HTTPAddr()+"/webhook/git", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	stalled.Store(true)
	webhook()
	want := "1, first: git:" + remote + ": fetch stalled: no data from " + remote + " for 1s, retrying in "
	var out string
	waitUntil(t, 15*time.Second, "status to show the stall", func() bool {
		out, _ = runVMesh(t, "status", "--server", cp.HTTPAddr())
		return strings.Contains(out, want)
	})
	stalled.Store(false)
	waitUntil(t, 15*time.Second, "status to clear once the remote answers", func() bool {
		webhook()
		out, _ = runVMesh(t, "status", "--server", cp.HTTPAddr(), "-o", "json")
		return strings.Contains(out, `"errors": 0`)
	})
}

// One mistake counts once: a broken file (the directory keeps its last
// good version) or a rejected commit (the last good commit keeps serving)
// reads 1 in vmesh_config_errors and in status's ERRORS, and what the
// source keeps serving is said beside it, not counted (issue 45).
func TestOneMistakeCountsOnce(t *testing.T) {
	const good = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: demo}\nspec:\n  hosts: [a.demo.internal]\n  http:\n  - route:\n    - destination: {host: a.demo.internal}\n    timeout: 5s\n"
	bad := strings.Replace(good, "timeout: 5s", "timeout: forever", 1)
	for _, kind := range []string{"dir", "git"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			write := func(content string) {
				t.Helper()
				if err := os.WriteFile(filepath.Join(dir, "route.yaml"), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			git := func(args ...string) string {
				t.Helper()
				cmd := exec.Command("git", append([]string{"-c", "user.email=t@vmesh.io", "-c", "user.name=t"}, args...)...)
				cmd.Dir = dir
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("git %v: %v\n%s", args, err, out)
				}
				return strings.TrimSpace(string(out))
			}
			write(good)
			edit := func(cfg *controlplane.Config) {}
			if kind == "git" {
				git("init", "--quiet", "--initial-branch=main")
				git("add", "-A")
				git("commit", "--quiet", "-m", "good")
				edit = func(cfg *controlplane.Config) {
					cfg.ConfigDir = ""
					cfg.Git.Repo, cfg.Git.Ref, cfg.Git.Interval = dir, "main", time.Hour
				}
			}
			cp, _ := servePlane(t, "", func(cfg *controlplane.Config) {
				if kind == "dir" {
					cfg.ConfigDir = dir
				}
				edit(cfg)
			})
			server := cp.HTTPAddr()
			write(bad)
			wantHeld := "keeping the last good version of route.yaml until fixed"
			if kind == "git" {
				goodSHA := git("rev-parse", "HEAD")
				git("commit", "--quiet", "-am", "bad")
				wantHeld = "commit " + git("rev-parse", "--short=12", "HEAD") + " rejected; still serving " + goodSHA[:12]
				resp, err := http.Post("http://"+server+"/webhook/git", "application/json", strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			var report statusReport
			for deadline := time.Now().Add(20 * time.Second); ; {
				out, _ := runVMesh(t, "status", "--server", server, "-o", "json")
				if err := json.Unmarshal([]byte(out), &report); err != nil {
					t.Fatal(err)
				}
				if report.Replicas[0].Errors > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			r := report.Replicas[0]
			if r.Errors != 1 || !strings.Contains(r.FirstError, "route.yaml:9") || len(r.Held) != 1 || r.Held[0] != wantHeld {
				t.Errorf("status: errors %d (first %q), held %q; want 1 error and held %q", r.Errors, r.FirstError, r.Held, wantHeld)
			}
			table, _ := runVMesh(t, "status", "--server", server)
			if !strings.Contains(table, "1 ("+wantHeld+"), first: ") {
				t.Errorf("status table:\n%s", table)
			}
			resp, err := http.Get("http://" + server + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var lines []string
			for _, l := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(l, "vmesh_config_errors{") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.HasSuffix(lines[0], "} 1") {
				t.Errorf("vmesh_config_errors: %q, want one source at 1", lines)
			}
		})
	}
}
