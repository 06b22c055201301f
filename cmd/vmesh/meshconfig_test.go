package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

// routeFor returns the route configuration a raw proxyless client gets for
// the greeter listener of a control plane started with mesh config file
// meshFile ("" for none).
func routeFor(t *testing.T, meshFile string) *routev3.RouteConfiguration {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"services.yaml": opsServices, "route.yaml": fmt.Sprintf(opsRoute, "5s")} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cp, _ := servePlane(t, "", func(c *controlplane.Config) { c.ConfigDir, c.MeshConfig = dir, meshFile })
	c := newRawClient(t, cp.XDSAddr(), "mesh-client", "demo")
	c.subscribe(resourcev3.ListenerType, "greeter.demo.internal:50051")
	lds := c.next(resourcev3.ListenerType, "")
	var l listenerv3.Listener
	if err := lds[len(lds)-1].GetResources()[0].UnmarshalTo(&l); err != nil {
		t.Fatal(err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := l.GetApiListener().GetApiListener().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	c.subscribe(resourcev3.RouteType, hcm.GetRds().GetRouteConfigName())
	rds := c.next(resourcev3.RouteType, "")
	var rc routev3.RouteConfiguration
	if err := rds[len(rds)-1].GetResources()[0].UnmarshalTo(&rc); err != nil {
		t.Fatal(err)
	}
	return &rc
}

// --mesh-config: MeshConfig's defaultHttpRetryPolicy replaces Istio's
// default retries on routes whose VirtualService sets none.
func TestServeMeshConfig(t *testing.T) {
	retries := func(rc *routev3.RouteConfiguration) *routev3.RetryPolicy {
		return rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRetryPolicy()
	}
	if rp := retries(routeFor(t, "")); rp.GetNumRetries().GetValue() != 2 {
		t.Errorf("without a mesh config: retries %v, want Istio's default 2", rp)
	}
	mesh := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(mesh, []byte("defaultHttpRetryPolicy:\n  attempts: 4\n  retryOn: unavailable\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rp := retries(routeFor(t, mesh)); rp.GetNumRetries().GetValue() != 4 || rp.GetRetryOn() != "unavailable" {
		t.Errorf("with defaultHttpRetryPolicy attempts 4: retries %v", rp)
	}

	// A field vmesh reads but does not apply is a warning with its line, in
	// /debug/config and vmesh status (source mesh-config:FILE).
	partial := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(partial, []byte("connectTimeout: 2s\nenablePrometheusMerge: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cp, _ := servePlane(t, opsServices, func(c *controlplane.Config) { c.MeshConfig = partial })
	var report statusReport
	out, _ := runVMesh(t, "status", "--server", cp.HTTPAddr(), "-o", "json")
	if err := json.Unmarshal([]byte(out), &report); err != nil || len(report.Replicas) != 1 || report.Replicas[0].Warnings != 1 ||
		!strings.Contains(report.Replicas[0].FirstWarning, "mesh.yaml:2: ") || !strings.Contains(report.Replicas[0].FirstWarning, "VM1011") {
		t.Errorf("status with a not-applied MeshConfig field (%v): %+v", err, report.Replicas)
	}

	// A bad file, and a trust domain set twice differently, stop the start.
	bad := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(bad, []byte("trustDomain: example.org\nconectTimeout: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir, cfg.MeshConfig, cfg.DataDir = t.TempDir(), bad, t.TempDir()
	if _, err := controlplane.New(cfg, nil); err == nil || !strings.Contains(err.Error(), "mesh.yaml:2: conectTimeout: unknown field") {
		t.Errorf("bad mesh config: %v", err)
	}
	if err := os.WriteFile(bad, []byte("trustDomain: example.org\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cp, err := controlplane.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if td := cp.CA().TrustDomain(); td != "example.org" {
		t.Errorf("the CA's trust domain is %q, want the mesh config's example.org", td)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = cp.Run(ctx) // releases the listeners New bound
	cfg.DataDir = t.TempDir()
	cfg.CA.TrustDomain = "other.example"
	if _, err := controlplane.New(cfg, nil); err == nil || !strings.Contains(err.Error(), `sets trustDomain "example.org" but --trust-domain (ca.trustDomain) is "other.example"`) {
		t.Errorf("two trust domains: %v", err)
	}
}
