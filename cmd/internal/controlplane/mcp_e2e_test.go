package controlplane_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/mcptest"
	"github.com/vmesh/vmesh/internal/mcptypes"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
)

// istioRecording is what tools/istio-mcp-server record wrote: Istio's own
// MCP server's responses (SotW and delta) per step of its script.
type istioRecording struct {
	TypeURL string `json:"typeUrl"`
	Steps   []struct {
		Step  string            `json:"step"`
		Dest  string            `json:"dest"`
		SotW  []json.RawMessage `json:"sotw"`
		Delta []json.RawMessage `json:"delta"`
	} `json:"steps"`
}

// TestIstioMCPReachesProxyless replays what Istio's own MCP server
// (pilot/pkg/xds with its apigen generator, recorded by
// tools/istio-mcp-server) sent while a VirtualService was created,
// changed and deleted, through a real gRPC ADS server to vmesh's
// configSources client, SotW and delta; each step must reach a real
// grpc-go proxyless client through vmesh's xDS. Before the delete, a bad
// version of Istio's resource is NACKed by name and field while the last
// good one keeps routing, and the server goes away and comes back: the
// routing holds meanwhile.
func TestIstioMCPReachesProxyless(t *testing.T) {
	b, err := os.ReadFile("../../../filestore/mcpsource/testdata/istio-mcp.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec istioRecording
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Steps) != 4 || rec.Steps[0].Step != "initial" {
		t.Fatalf("recording has steps %v", rec.Steps)
	}
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(t *testing.T) {
			replayIstio(t, rec, delta)
		})
	}
}

func replayIstio(t *testing.T, rec istioRecording, delta bool) {
	srv := mcptest.Start(t)
	dir := t.TempDir()
	cfgDir := filepath.Join(dir, "config")
	if err := os.Mkdir(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	mesh := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(mesh, []byte("configSources:\n- address: xds://"+srv.Addr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir, cfg.AllowEmpty, cfg.MeshConfig, cfg.ConfigSourceDelta = cfgDir, true, mesh, delta
	cp := start(t, cfg)

	// send answers one recorded response and reads the client's answer.
	send := func(raw json.RawMessage) string {
		t.Helper()
		if delta {
			r := &discovery.DeltaDiscoveryResponse{}
			if err := protojson.Unmarshal(raw, r); err != nil {
				t.Fatal(err)
			}
			srv.SendDelta(t, r)
			for {
				if ack := srv.NextDelta(t); ack.GetResponseNonce() == r.GetNonce() {
					return ack.GetErrorDetail().GetMessage()
				}
			}
		}
		r := &discovery.DiscoveryResponse{}
		if err := protojson.Unmarshal(raw, r); err != nil {
			t.Fatal(err)
		}
		srv.SendSotW(t, r)
		for {
			if ack := srv.NextSotW(t); ack.GetResponseNonce() == r.GetNonce() {
				return ack.GetErrorDetail().GetMessage()
			}
		}
	}
	// The subscriptions: Istio's recorded first answer for the
	// VirtualService type, an empty one (what Istio's empty store
	// answers) for every other type.
	var urls []string
	for range len(mcptypes.Types()) {
		if delta {
			urls = append(urls, srv.NextDelta(t).GetTypeUrl())
		} else {
			urls = append(urls, srv.NextSotW(t).GetTypeUrl())
		}
	}
	for _, url := range urls {
		if url == rec.TypeURL {
			continue
		}
		var empty []byte
		if delta {
			empty, _ = protojson.Marshal(&discovery.DeltaDiscoveryResponse{TypeUrl: url, Nonce: "empty-" + url, SystemVersionInfo: "0"})
		} else {
			empty, _ = protojson.Marshal(&discovery.DiscoveryResponse{TypeUrl: url, Nonce: "empty-" + url, VersionInfo: "0"})
		}
		if nack := send(empty); nack != "" {
			t.Fatalf("empty %s NACKed: %s", url, nack)
		}
	}
	initial := rec.Steps[0].SotW
	if delta {
		initial = rec.Steps[0].Delta
	}
	for _, raw := range initial {
		if nack := send(raw); nack != "" {
			t.Fatalf("Istio's initial response NACKed: %s", nack)
		}
	}
	waitReady(t, cp)

	backends := map[string]*xdstest.Backend{}
	var ses strings.Builder
	for _, host := range []string{"echo.mesh.internal", "echo-v2.mesh.internal", "echo-v3.mesh.internal"} {
		name := strings.TrimSuffix(host, ".mesh.internal")
		b := xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: name + "-0", Namespace: "default"})
		backends[host] = b
		fmt.Fprintf(&ses, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: default}
spec:
  hosts: [%s]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1, ports: {grpc: %d}}]
---
`, name, host, b.Port)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "services.yaml"), []byte(ses.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	client := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "client-0", Namespace: "default"}, "echo.mesh.internal:7070")
	reaches := func(step, host string) {
		t.Helper()
		want := backends[host].ID
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := xdstest.CallUntil(t, client, 20*time.Second)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("step %s: calls reach %s, want %s", step, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	reaches("initial", "echo.mesh.internal")
	vsKey := store.Key{Kind: store.KindVirtualService, Namespace: "default", Name: "echo"}
	for _, step := range rec.Steps[1:] {
		resps := step.SotW
		if delta {
			resps = step.Delta
		}
		if len(resps) == 0 {
			t.Fatalf("step %s: Istio sent nothing", step.Step)
		}
		if step.Step == "delete" {
			// Before the delete: a bad version of the VirtualService is
			// NACKed by name and the last good one keeps routing; then the
			// server goes away and everything keeps routing until it
			// returns, and the delete arrives on the new stream.
			bad := strings.ReplaceAll(string(rec.Steps[2].SotW[0]), `"echo-v3.mesh.internal"`, `""`)
			if delta {
				bad = strings.ReplaceAll(string(rec.Steps[2].Delta[0]), `"echo-v3.mesh.internal"`, `""`)
			}
			bad = strings.Replace(bad, `"nonce": "`, `"nonce": "bad-`, 1)
			nack := send(json.RawMessage(bad))
			if !strings.Contains(nack, rec.TypeURL+" default/echo") || !strings.Contains(nack, "destination.host") {
				t.Fatalf("bad resource: NACK %q does not name it and the field", nack)
			}
			if o := cp.Store().Snapshot().Get(vsKey); o == nil || !strings.Contains(fmt.Sprint(o.Spec), "echo-v3.mesh.internal") {
				t.Fatalf("bad resource: the last good VirtualService is not kept: %v", o)
			}
			reaches("bad resource", "echo-v3.mesh.internal")
			srv.Stop()
			xdstest.Eventually(t, "the disconnect reported", func() bool {
				for _, s := range cp.Store().Snapshot().Sources {
					if s.Source == "mcp:xds://"+srv.Addr && strings.HasPrefix(s.Connection, "disconnected") {
						return true
					}
				}
				return false
			})
			if cp.Store().Snapshot().Get(vsKey) == nil {
				t.Fatal("disconnected: the VirtualService is gone")
			}
			reaches("disconnected", "echo-v3.mesh.internal")
			srv.Restart(t)
			for range len(mcptypes.Types()) {
				if delta {
					srv.NextDelta(t)
				} else {
					srv.NextSotW(t)
				}
			}
		}
		for _, raw := range resps {
			if nack := send(raw); nack != "" {
				t.Fatalf("step %s: Istio's response NACKed: %s", step.Step, nack)
			}
		}
		o := cp.Store().Snapshot().Get(vsKey)
		switch {
		case step.Dest == "" && o != nil:
			t.Fatalf("step %s: VirtualService still in the Store", step.Step)
		case step.Dest != "" && (o == nil || o.Origin.Source != "mcp:xds://"+srv.Addr || o.Origin.File != rec.TypeURL+" default/echo" || o.Origin.Version == ""):
			t.Fatalf("step %s: VirtualService %v", step.Step, o)
		}
		reaches(step.Step, cmpOr(step.Dest, "echo.mesh.internal"))
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestConfigSourcesWarnings: what of --mesh-config's configSources vmesh
// does not apply is a VM1011 warning of the mesh-config source at the
// entry's line; an ISTIO_MUTUAL entry is refused at start.
func TestConfigSourcesWarnings(t *testing.T) {
	srv := mcptest.Start(t)
	dir := t.TempDir()
	mesh := filepath.Join(dir, "mesh.yaml")
	yaml := "configSources:\n- address: fs:///etc/istio/config\n- address: xds://" + srv.Addr + "\n  subscribedResources: [SERVICE_REGISTRY]\n  tlsSettings: {mode: DISABLE}\n"
	if err := os.WriteFile(mesh, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir, cfg.AllowEmpty, cfg.MeshConfig, cfg.RegistrySyncWait = dir, true, mesh, 1
	cp := start(t, cfg)
	var got []string
	for _, s := range cp.Store().Snapshot().Sources {
		if s.Source == "mesh-config:"+mesh {
			for _, w := range s.Warnings {
				got = append(got, w.Error())
			}
		}
	}
	want := []string{
		mesh + `:2: configSources[0].address: warning VM1011: config source "fs:///etc/istio/config" is not applied: vmesh reads xds://HOST:PORT config sources (files: --config-dir or --git-repo)`,
		mesh + ":3: configSources[1].subscribedResources: warning VM1011: subscribedResources is not applied: vmesh subscribes to every Istio config type it implements",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	srv.NextSotW(t) // the xds:// entry is read

	if err := os.WriteFile(mesh, []byte("configSources:\n- address: xds://"+srv.Addr+"\n  tlsSettings: {mode: ISTIO_MUTUAL}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	if _, err := controlplane.New(cfg, nil); err == nil || !strings.Contains(err.Error(), "ISTIO_MUTUAL") {
		t.Errorf("ISTIO_MUTUAL: %v", err)
	}
}
