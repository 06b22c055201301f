package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/xdstest"
)

const opsServices = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: greeter, namespace: demo}
spec:
  hosts: [greeter.demo.internal]
  ports: [{number: 50051, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: greeter}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: billing, namespace: other}
spec:
  hosts: [billing.other.internal]
  ports: [{number: 9000, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: billing}}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: other}
spec:
  egress:
  - hosts: ["./*"]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: greeter, namespace: demo}
spec:
  host: greeter.demo.internal
  subsets: [{name: v1, labels: {version: v1}}]
`

const opsRoute = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: greeter, namespace: demo}
spec:
  hosts: [greeter.demo.internal]
  http:
  - route:
    - destination: {host: greeter.demo.internal, subset: v1}
    timeout: %s
`

func opsWorkload(name, ns, app string, port int) string {
	return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: %s, namespace: %s}\nspec:\n  address: 127.0.0.1\n  ports: {grpc: %d}\n  labels: {app: %s, version: v1}\n", name, ns, port, app)
}

// TestOperatorCommands runs status, config-dump and diff against a running
// control plane with real grpc-go xDS clients and servers connected.
func TestOperatorCommands(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("services.yaml", opsServices)
	write("route.yaml", fmt.Sprintf(opsRoute, "5s"))

	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	cfg.DebounceQuiet, cfg.DebounceMax = 20*time.Millisecond, 200*time.Millisecond
	cp, err := controlplane.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	defer func() { cancel(); <-done }()

	greeter := xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: "greeter-v1", Namespace: "demo", Labels: map[string]string{"app": "greeter", "version": "v1"}})
	billing := xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: "billing-1", Namespace: "other", Labels: map[string]string{"app": "billing", "version": "v1"}})
	write("workloads.yaml", opsWorkload("greeter-v1", "demo", "greeter", greeter.Port)+"---\n"+opsWorkload("billing-1", "other", "billing", billing.Port))

	client := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "client-demo", Namespace: "demo"}, "greeter.demo.internal:50051")
	if got := xdstest.CallUntil(t, client, 20*time.Second); got != "greeter-v1" {
		t.Fatalf("call reached %q", got)
	}
	other := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "client-other", Namespace: "other"}, "billing.other.internal:9000")
	if got := xdstest.CallUntil(t, other, 20*time.Second); got != "billing-1" {
		t.Fatalf("call reached %q", got)
	}
	server := cp.HTTPAddr()

	// status: every proxy, SYNCED on every type it watches.
	var rows []proxyStatus
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, code := runVMesh(t, "status", "--server", server, "--json")
		if code != 0 {
			t.Fatalf("status exit %d", code)
		}
		var report statusReport
		if err := json.Unmarshal([]byte(out), &report); err != nil {
			t.Fatal(err)
		}
		rows = report.Proxies
		if allSynced(rows) && len(rows) == 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	ids := map[string]proxyStatus{}
	for _, r := range rows {
		ids[r.Proxy] = r
	}
	for _, id := range []string{"client-demo", "client-other", "greeter-v1", "billing-1"} {
		r, ok := ids[id]
		if !ok {
			t.Fatalf("status lacks %s: %+v", id, rows)
		}
		if r.Kind != "grpc" || !strings.HasPrefix(r.Types["LDS"], "SYNCED r") {
			t.Errorf("%s: %+v", id, r)
		}
	}
	if !strings.HasPrefix(ids["client-demo"].Types["RDS"], "SYNCED") || !strings.HasPrefix(ids["client-demo"].Types["EDS"], "SYNCED") {
		t.Errorf("client-demo not synced on RDS/EDS: %+v", ids["client-demo"].Types)
	}
	table, _ := runVMesh(t, "status", "--server", server)
	if !strings.Contains(table, "PROXY") || !strings.Contains(table, "client-demo") {
		t.Errorf("status table:\n%s", table)
	}

	// config-dump: the client's listener for greeter and its route with the 5s timeout.
	dump, code := runVMesh(t, "config-dump", "client-demo", "--server", server)
	if code != 0 || !strings.Contains(dump, "greeter.demo.internal:50051") || !strings.Contains(dump, `"5s"`) {
		t.Errorf("config-dump (exit %d):\n%.2000s", code, dump)
	}

	// diff: a changed VirtualService lists exactly the proxies that can route to greeter.
	after := t.TempDir()
	for _, f := range []string{"services.yaml", "workloads.yaml"} {
		data, _ := os.ReadFile(filepath.Join(dir, f))
		if err := os.WriteFile(filepath.Join(after, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(after, "route.yaml"), []byte(fmt.Sprintf(opsRoute, "9s")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runVMesh(t, "diff", "--dir", dir, "--dir", after, "--server", server, "--json")
	if code != 0 {
		t.Fatalf("diff exit %d", code)
	}
	var diffs []struct {
		Proxy          string
		Representative bool
		Changes        []struct{ Type, Name, Op, Diff string }
	}
	if err := json.Unmarshal([]byte(out), &diffs); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range diffs {
		if d.Representative {
			t.Errorf("%s: a representative, while a connected client is in its group", d.Proxy)
		}
		got = append(got, d.Proxy)
		if len(d.Changes) != 1 || d.Changes[0].Type != "route" || !strings.Contains(d.Changes[0].Diff, "9") {
			t.Errorf("%s: %+v", d.Proxy, d.Changes)
		}
	}
	// greeter-v1 is a proxyless server holding only its listener (LDS): a
	// route it does not hold is not its change (issue 45).
	if strings.Join(got, ",") != "client-demo" {
		t.Errorf("diff proxies = %v, want the one client in demo (greeter-v1 holds no route; client-other and billing-1 are scoped away by their Sidecar)", got)
	}
}

func allSynced(rows []proxyStatus) bool {
	for _, r := range rows {
		for _, v := range r.Types {
			if !strings.HasPrefix(v, "SYNCED") {
				return false
			}
		}
	}
	return true
}
