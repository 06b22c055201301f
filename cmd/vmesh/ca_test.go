package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/agents/bundle"
	"github.com/vmesh/vmesh/internal/controlplane"
)

func TestTokenAndVMBundleUseTheServersCA(t *testing.T) {
	data := t.TempDir()
	// No CA yet: the commands refuse rather than create a root of their own.
	if _, code := runVMeshErr(t, "token", "create", "--data-dir", data, "--service-account", "web"); code == 0 {
		t.Fatal("token create made a CA of its own")
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = "../../examples/quickstart"
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", data
	if _, err := controlplane.New(cfg, nil); err != nil { // creates the CA in data
		t.Fatal(err)
	}
	out, code := runVMesh(t, "token", "create", "--data-dir", data, "--namespace", "demo", "--service-account", "web")
	if code != 0 || strings.Count(strings.TrimSpace(out), ".") != 2 {
		t.Fatalf("token create: exit %d %q", code, out)
	}
	dir := filepath.Join(t.TempDir(), "vm1")
	if _, code := runVMesh(t, "vm", "bundle", "--data-dir", data, "--out", dir, "--namespace", "demo", "--service-account", "web",
		"--workload-group", "web", "--labels", "app=web,version=v1", "--discovery-address", "10.0.0.1:15012"); code != 0 {
		t.Fatalf("vm bundle exit %d", code)
	}
	b, err := bundle.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.Namespace != "demo" || b.ServiceAccount != "web" || b.WorkloadGroup != "web" || b.Labels["version"] != "v1" ||
		b.DiscoveryAddress != "10.0.0.1:15012" || b.Token == "" || len(b.RootCerts) == 0 {
		t.Fatalf("bundle: %+v", b)
	}
	root, _ := os.ReadFile(filepath.Join(data, "ca", "root-cert.pem"))
	if string(root) != string(b.RootCerts) {
		t.Error("bundle root differs from the server's")
	}
}

// runVMeshErr runs vmesh and returns (error text, exit code) for commands
// that fail with a plain error.
func runVMeshErr(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(new(strings.Builder))
	cmd.SetErr(new(strings.Builder))
	if err := cmd.Execute(); err != nil {
		return err.Error(), 1
	}
	return "", 0
}
