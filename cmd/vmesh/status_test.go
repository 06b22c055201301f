package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	if err := os.WriteFile(filepath.Join(dir, "telemetry.yaml"), []byte("apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: mesh-default, namespace: istio-system}\nspec:\n  accessLogging: [{providers: [{name: envoy}]}]\n"), 0o644); err != nil {
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
	if r := report.Replicas[0]; r.Warnings != 1 || !strings.Contains(r.FirstWarning, "telemetry.yaml:2") || !strings.Contains(r.FirstWarning, "VM1001") {
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
