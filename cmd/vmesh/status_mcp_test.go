package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/mcptest"
	"github.com/vmesh/vmesh/internal/mcptypes"
	"github.com/vmesh/vmesh/internal/xdstest"
)

// TestStatusShowsMCPSource: a configSources server shows in vmesh status
// as connected with the version last applied and its objects; when it
// goes away, as disconnected, its error first and what it keeps held.
func TestStatusShowsMCPSource(t *testing.T) {
	srv := mcptest.Start(t)
	mesh := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(mesh, []byte("configSources:\n- address: xds://"+srv.Addr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cp, _ := servePlane(t, onboardingConfig, func(c *controlplane.Config) {
		c.MeshConfig = mesh
		c.RegistrySyncWait = 1 // xDS need not wait for the server: this test answers it after
	})
	vsType, _ := mcptypes.ByKind("VirtualService")
	var urls []string
	for range len(mcptypes.Types()) {
		urls = append(urls, srv.NextSotW(t).GetTypeUrl())
	}
	for _, u := range urls {
		var res []*anypb.Any
		if u == vsType.URL() {
			a, err := vsType.Encode(mcptypes.Resource{Namespace: "fin", Name: "ledger", Version: "7", Spec: &networking.VirtualService{
				Hosts: []string{"ledger.fin.svc.cluster.local"},
				Http:  []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "ledger.fin.svc.cluster.local"}}}}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			res = append(res, a)
		}
		srv.SendSotW(t, &discovery.DiscoveryResponse{TypeUrl: u, VersionInfo: "v1", Nonce: u, Resources: res})
		if ack := srv.NextSotW(t); ack.GetErrorDetail() != nil {
			t.Fatalf("%s NACKed: %v", u, ack.GetErrorDetail())
		}
	}
	source := "source mcp:xds://" + srv.Addr + ": "
	table, _ := runVMesh(t, "status", "--server", cp.HTTPAddr())
	if !strings.Contains(table, source+"connected, version v1, 1 objects, 0 errors") {
		t.Errorf("status lacks the connected MCP source:\n%s", table)
	}

	srv.Stop()
	xdstest.Eventually(t, "the disconnect in vmesh status", func() bool {
		table, _ = runVMesh(t, "status", "--server", cp.HTTPAddr())
		return strings.Contains(table, source+"disconnected: ")
	})
	for _, want := range []string{"version v1, 1 objects, 1 errors", "first: mcp:xds://" + srv.Addr + ": xds://" + srv.Addr + ": disconnected", "not connected: keeping its 1 objects (version v1)"} {
		if !strings.Contains(table, want) {
			t.Errorf("status while disconnected lacks %q:\n%s", want, table)
		}
	}
}
