package loadgen

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestSidecarShapes: with -shape sidecar-vm every Envoy-like proxy is an
// Envoy sidecar on an IP of its own (most of them a generated endpoint's,
// so it has an inbound side); with sidecar-shared all are on one IP. A
// small run of each through vmesh gets every proxy synced and every
// change ACKed by each sidecar that sees the changed service.
func TestSidecarShapes(t *testing.T) {
	for _, shape := range []Shape{ShapeSidecarVM, ShapeSidecarShared} {
		t.Run(string(shape), func(t *testing.T) {
			o := DefaultOptions()
			o.Size = Size{Services: 20, Endpoints: 3, VirtualServices: 4, Namespaces: 2}
			o.Proxies, o.EnvoyFraction, o.Shape = 12, 1, shape
			o.Servers = []string{ServerVmesh}
			o.Changes = 2
			o.DebounceQuiet = 20 * time.Millisecond
			o.ChangeTimeout, o.ConnectTimeout = 20*time.Second, 60*time.Second
			o.Spawn = testSpawner(t)
			o.WorkDir = t.TempDir()
			specs := Specs(o)
			ips := map[string]bool{}
			for _, s := range specs {
				if !s.Sidecar || len(s.IPs) != 1 || s.WorkloadName == "" {
					t.Fatalf("spec %+v: not a sidecar with one IP and a workload name", s)
				}
				ips[s.IPs[0]] = true
			}
			if want := map[Shape]int{ShapeSidecarVM: len(specs), ShapeSidecarShared: 1}[shape]; len(ips) != want {
				t.Fatalf("%d distinct IPs over %d sidecars, want %d", len(ips), len(specs), want)
			}
			var progress bytes.Buffer
			o.Progress = &progress
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, o)
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, progress.String())
			}
			s := rep.Servers[0]
			if len(s.Errors) > 0 {
				t.Errorf("proxy errors: %v", s.Errors)
			}
			for _, c := range s.Changes {
				// Services 0 and 1 are in ns-0 and ns-1: every sidecar sees
				// them (batch ones see their namespace and ns-0).
				if c.Expected < o.Proxies*3/4 || c.Missing != 0 || c.Latency.N != c.Expected {
					t.Errorf("%s: expected %d ACKs, missing %d, got %d\n%s", c.Kind, c.Expected, c.Missing, c.Latency.N, progress.String())
				}
			}
			var table bytes.Buffer
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(table.Bytes(), []byte("shape: "+string(shape))) {
				t.Errorf("table does not name the shape:\n%s", table.String())
			}
		})
	}
	if err := Shape("envoy").validate(); err == nil {
		t.Errorf("unknown shape accepted")
	}
}

// TestRouterShape: with -shape router every Envoy-like proxy is a replica
// of one ingress gateway (a "router~" node labelled istio=ingressgateway)
// and every VirtualService is bound to the Gateway only; a small run
// through vmesh syncs every router, and each VirtualService change is
// ACKed by every router in the gateway's route configuration.
func TestRouterShape(t *testing.T) {
	o := DefaultOptions()
	o.Size = Size{Services: 20, Endpoints: 3, VirtualServices: 20, Namespaces: 2}
	o.Proxies, o.EnvoyFraction, o.Shape = 4, 1, ShapeRouter
	o.Servers = []string{ServerVmesh}
	o.Kinds = []string{ChangeRouting}
	o.Changes = 2
	o.DebounceQuiet = 20 * time.Millisecond
	o.ChangeTimeout, o.ConnectTimeout = 20*time.Second, 60*time.Second
	o.Spawn = testSpawner(t)
	o.WorkDir = t.TempDir()
	for _, s := range Specs(o) {
		if !s.Router || !strings.HasPrefix(s.NodeID(), "router~") || s.Labels["istio"] != "ingressgateway" {
			t.Fatalf("spec %+v (%s): not a gateway router", s, s.NodeID())
		}
	}
	var progress bytes.Buffer
	o.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	s := rep.Servers[0]
	if len(s.Errors) > 0 {
		t.Errorf("proxy errors: %v", s.Errors)
	}
	if len(s.Changes) != 1 {
		t.Fatalf("changes %+v, want the VirtualService changes", s.Changes)
	}
	for _, c := range s.Changes {
		if c.Expected != o.Proxies*o.Changes || c.Missing != 0 || c.Latency.N != c.Expected {
			t.Errorf("%s: expected %d ACKs (every router, every change), got expected %d, missing %d, ACKed %d\n%s",
				c.Kind, o.Proxies*o.Changes, c.Expected, c.Missing, c.Latency.N, progress.String())
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(table.Bytes(), []byte("shape: router")) {
		t.Errorf("table does not name the shape:\n%s", table.String())
	}
}
