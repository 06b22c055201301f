package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/ca/bundle"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

const onboardingConfig = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ledger, namespace: fin}
spec:
  hosts: [ledger.fin.internal]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: ledger}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: ledger, namespace: fin}
spec:
  metadata: {labels: {app: ledger, version: v1}}
  template: {serviceAccount: ledger}
---
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: orphan, namespace: fin}
spec:
  metadata: {labels: {app: orphan}}
  template: {serviceAccount: ledger}
`

// servePlane runs a control plane on kernel ports with the config in
// configYAML until the test ends, and returns it and its data dir.
func servePlane(t *testing.T, configYAML string, edit func(*controlplane.Config)) (*controlplane.ControlPlane, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(configYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	if edit != nil {
		edit(&cfg)
	}
	cp, err := controlplane.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !cp.Ready() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the control plane was not ready after 30s")
		}
	}
	return cp, cfg.DataDir
}

// TestVMBundleChecksTheRunningControlPlane: `vmesh vm bundle` and `vmesh
// token create` ask the running control plane first and refuse, one line
// per problem naming the flag and the fix, whatever would stop the VM from
// joining; a bundle that passes has the CA's root and trust domain.
func TestVMBundleChecksTheRunningControlPlane(t *testing.T) {
	cp, dataDir := servePlane(t, onboardingConfig, func(c *controlplane.Config) { c.SecureHosts = []string{"cp.example.internal"} })
	_, securePort, _ := net.SplitHostPort(cp.SecureAddr())
	_, xdsPort, _ := net.SplitHostPort(cp.XDSAddr())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := lis.Addr().String()
	lis.Close()

	base := []string{"--server", cp.HTTPAddr(), "--data-dir", dataDir, "--namespace", "fin", "--service-account", "ledger"}
	refused := []struct {
		name string
		args []string
		want []string // each an output line's start
	}{
		{"unknown group", []string{"--workload-group", "ledgr", "--discovery-address", "localhost:" + securePort},
			[]string{"vmesh: --workload-group: WorkloadGroup fin/ledgr is not in the control plane's config; fix: add a WorkloadGroup named ledgr in namespace fin to the config, or pass one that exists: ledger, orphan"}},
		{"group no ServiceEntry selects", []string{"--workload-group", "orphan", "--discovery-address", "localhost:" + securePort},
			[]string{"vmesh: --workload-group: no ServiceEntry in namespace fin selects WorkloadGroup orphan's labels {app: orphan}"}},
		{"other service account", []string{"--workload-group", "ledger", "--service-account", "teller", "--discovery-address", "localhost:" + securePort},
			[]string{`vmesh: --service-account: WorkloadGroup fin/ledger registers service account "ledger", not "teller"`}},
		{"foreign trust domain", []string{"--workload-group", "ledger", "--trust-domain", "other.example", "--discovery-address", "localhost:" + securePort},
			[]string{`vmesh: --trust-domain: trust domain "other.example" is not the CA's ("cluster.local"): the CA would refuse the token; fix: drop --trust-domain, or pass --trust-domain cluster.local`}},
		{"name not in the certificate", []string{"--workload-group", "ledger", "--discovery-address", "vmesh.example.internal:" + securePort},
			[]string{
				"vmesh: --discovery-address: the secure port listens on " + cp.SecureAddr() + " only: a VM dialling vmesh.example.internal:" + securePort + " cannot reach it; fix: set secureAddr: 0.0.0.0:" + securePort,
				`vmesh: --discovery-address: the secure port's certificate does not name "vmesh.example.internal" (it names localhost, cp.example.internal, 127.0.0.1): the agent would fail TLS verification; fix: add vmesh.example.internal to secureHosts in vmesh.yaml (or --secure-host) and restart vmesh serve`,
			}},
		{"a name it has, on loopback", []string{"--workload-group", "ledger", "--discovery-address", "cp.example.internal:" + securePort},
			[]string{"vmesh: --discovery-address: the secure port listens on " + cp.SecureAddr() + " only"}},
		{"plaintext port", []string{"--workload-group", "ledger", "--discovery-address", "127.0.0.1:" + xdsPort},
			[]string{"vmesh: --discovery-address: port " + xdsPort + " is the plaintext xDS port; the agent needs the secure port (" + securePort + "); fix: pass --discovery-address 127.0.0.1:" + securePort}},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "vm")
			args := append(append([]string{"vm", "bundle", "--out", out}, base...), c.args...)
			_, stderr, err := execVMesh(args...)
			if err == nil {
				t.Fatalf("vmesh %v succeeded, want refused", args)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != len(c.want) {
				t.Fatalf("stderr has %d lines, want %d:\n%s", len(lines), len(c.want), stderr)
			}
			for i, want := range c.want {
				if !strings.HasPrefix(lines[i], want) {
					t.Errorf("line %d:\n%s\nwant it to start with\n%s", i, lines[i], want)
				}
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a refused bundle was written to %s", out)
			}
		})
	}

	t.Run("control plane not running", func(t *testing.T) {
		_, _, err := execVMesh(append([]string{"vm", "bundle", "--out", filepath.Join(t.TempDir(), "vm"), "--server", down}, base[2:]...)...)
		if err == nil || !strings.Contains(err.Error(), "cannot check against the control plane (start vmesh serve, or pass --server with its HTTP address)") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no CA in the data dir", func(t *testing.T) {
		_, _, err := execVMesh("token", "create", "--server", cp.HTTPAddr(), "--data-dir", t.TempDir(), "--service-account", "web")
		if err == nil {
			t.Fatal("token create made a CA of its own")
		}
	})
	t.Run("token for another trust domain", func(t *testing.T) {
		_, stderr, err := execVMesh("token", "create", "--server", cp.HTTPAddr(), "--data-dir", dataDir, "--service-account", "web", "--trust-domain", "other.example")
		if err == nil || !strings.HasPrefix(stderr, `vmesh: --trust-domain: trust domain "other.example" is not the CA's`) {
			t.Fatalf("err %v, stderr %q", err, stderr)
		}
	})

	stdout, _, err := execVMesh("token", "create", "--server", cp.HTTPAddr(), "--data-dir", dataDir, "--namespace", "demo", "--service-account", "web")
	if err != nil || strings.Count(strings.TrimSpace(stdout), ".") != 2 {
		t.Fatalf("token create: %v %q", err, stdout)
	}
	dir := filepath.Join(t.TempDir(), "vm1")
	if _, stderr, err := execVMesh(append(append([]string{"vm", "bundle", "--out", dir}, base...),
		"--workload-group", "ledger", "--labels", "app=ledger,version=v1", "--discovery-address", "localhost:"+securePort)...); err != nil {
		t.Fatalf("vm bundle: %v\n%s", err, stderr)
	}
	b, err := bundle.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.Namespace != "fin" || b.ServiceAccount != "ledger" || b.WorkloadGroup != "ledger" || b.Labels["version"] != "v1" ||
		b.DiscoveryAddress != "localhost:"+securePort || b.Token == "" || b.TrustDomain != cp.CA().TrustDomain() {
		t.Fatalf("bundle: %+v", b)
	}
	root, _ := os.ReadFile(filepath.Join(dataDir, "ca", "root-cert.pem"))
	if string(root) != string(b.RootCerts) {
		t.Error("bundle root differs from the server's")
	}
}

// execVMesh runs the vmesh command in-process and returns its stdout, its
// stderr and the error it ends with.
func execVMesh(args ...string) (stdout, stderr string, err error) {
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}
