package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmesh/vmesh/ca/bundle"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

// TestVMBundleTakesTheMeshDefaultConfig: with a mesh.yaml in the config
// directory whose defaultConfig names a discovery address and
// proxyMetadata, `vmesh vm bundle` without --discovery-address uses that
// address (checked like a given one) and writes the proxyMetadata into the
// bundle for the agent; an explicit --discovery-address wins.
func TestVMBundleTakesTheMeshDefaultConfig(t *testing.T) {
	var configDir string
	cp, dataDir := servePlane(t, onboardingConfig, func(c *controlplane.Config) { configDir = c.ConfigDir })
	_, securePort, _ := net.SplitHostPort(cp.SecureAddr())
	mesh := fmt.Sprintf("defaultConfig:\n  discoveryAddress: localhost:%s\n  proxyMetadata: {ISTIO_META_NETWORK: vm-net, ISTIO_META_DNS_CAPTURE: \"true\"}\n", securePort)
	if err := os.WriteFile(filepath.Join(configDir, filestore.MeshConfigFile), []byte(mesh), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for cp.Store().Snapshot().Get(store.MeshConfigKey) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the config directory's mesh.yaml was never loaded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	base := []string{"--server", cp.HTTPAddr(), "--data-dir", dataDir, "--namespace", "fin", "--service-account", "ledger", "--workload-group", "ledger"}
	dir := filepath.Join(t.TempDir(), "vm")
	if _, stderr, err := execVMesh(append([]string{"vm", "bundle", "--out", dir}, base...)...); err != nil {
		t.Fatalf("vm bundle: %v\n%s", err, stderr)
	}
	b, err := bundle.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.DiscoveryAddress != "localhost:"+securePort || b.ProxyMetadata["ISTIO_META_NETWORK"] != "vm-net" || b.ProxyMetadata["ISTIO_META_DNS_CAPTURE"] != "true" {
		t.Fatalf("bundle: discovery %q, proxyMetadata %v; want the mesh config's", b.DiscoveryAddress, b.ProxyMetadata)
	}
	dir2 := filepath.Join(t.TempDir(), "vm2")
	if _, stderr, err := execVMesh(append([]string{"vm", "bundle", "--out", dir2, "--discovery-address", "127.0.0.1:" + securePort}, base...)...); err != nil {
		t.Fatalf("vm bundle: %v\n%s", err, stderr)
	}
	if b2, err := bundle.Read(dir2); err != nil || b2.DiscoveryAddress != "127.0.0.1:"+securePort {
		t.Fatalf("an explicit --discovery-address: %+v %v", b2, err)
	}
}
