package controlplane_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
)

type vmBackend struct {
	testpb.UnimplementedTestServiceServer
}

func (vmBackend) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{ServerId: "vm-backend"}, nil
}

// startVMApp runs the VM's application (a plain gRPC server) on addr.
func startVMApp(t *testing.T, addr string) func() {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, vmBackend{})
	go func() { _ = gs.Serve(lis) }()
	return gs.Stop
}

// TestAgentAutoRegistration: starting an agent makes its VM an endpoint
// another client reaches; a failing probe takes it out; stopping the agent
// removes the WorkloadEntry after the grace period.
func TestAgentAutoRegistration(t *testing.T) {
	cp, appAddr, appPort := ledgerPlane(t, `apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: ledger, namespace: fin}
spec:
  metadata: {labels: {app: ledger}}
  template:
    ports: {grpc: APP_PORT}
    serviceAccount: ledger
  probe:
    periodSeconds: 1
    tcpSocket: {port: APP_PORT}
`)

	// The VM's onboarding bundle, as `vmesh vm bundle` writes it.
	bundleDir := filepath.Join(t.TempDir(), "bundle")
	if _, err := cp.CA().WriteVMBundle(bundleDir, ca.VMBundleRequest{Namespace: "fin", ServiceAccount: "ledger", WorkloadGroup: "ledger", DiscoveryAddress: cp.SecureAddr()}); err != nil {
		t.Fatal(err)
	}
	stopApp := startVMApp(t, appAddr)
	defer func() { stopApp() }()

	probe := health.Probe{TCP: &health.TCPSocket{Port: int(mustAtoi(t, appPort))}, Period: 200 * time.Millisecond, Timeout: time.Second, SuccessThreshold: 1, FailureThreshold: 1}
	agentCtx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- agent.Run(agentCtx, agent.Config{
			BundleDir: bundleDir, OutDir: t.TempDir(), SocketDir: shortTempDir(t), IPs: []string{"127.0.0.1"},
			WorkloadName: "ledger-vm-1", DisableEnvoy: true, Probe: &probe,
			RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		}, nil, prometheus.NewRegistry())
	}()
	defer func() { stopAgent(); <-agentDone }()

	entry := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: "ledger-127.0.0.1"}
	waitFor(t, "the VM registered and healthy", func() bool {
		o := cp.Store().Snapshot().Get(entry)
		return o != nil && o.Healthy != nil && *o.Healthy
	})
	client := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "teller", Namespace: "fin"}, "ledger.fin.internal:7070")
	if got := xdstest.CallUntil(t, client, 20*time.Second); got != "vm-backend" {
		t.Fatalf("reached %q", got)
	}

	// The application dies: the probe fails and the VM stops being an endpoint.
	stopApp()
	waitFor(t, "the failing probe marked the VM unhealthy", func() bool {
		o := cp.Store().Snapshot().Get(entry)
		return o != nil && o.Healthy != nil && !*o.Healthy
	})
	// It comes back: the VM is an endpoint again.
	stopApp = startVMApp(t, appAddr)
	waitFor(t, "healthy again", func() bool {
		o := cp.Store().Snapshot().Get(entry)
		return o != nil && o.Healthy != nil && *o.Healthy
	})
	if got := xdstest.CallUntil(t, client, 20*time.Second); got != "vm-backend" {
		t.Fatalf("reached %q", got)
	}

	// Stopping the agent removes the entry after the grace period, not before.
	stopAgent()
	<-agentDone
	agentDone <- nil
	stopped := time.Now()
	waitFor(t, "the WorkloadEntry removed", func() bool { return cp.Store().Snapshot().Get(entry) == nil })
	if since := time.Since(stopped); since < 900*time.Millisecond {
		t.Fatalf("removed after %s, before the 1s grace period", since)
	}
}

// ledgerPlane runs a ready control plane (1 s registration grace, a short
// debounce) whose config is the ServiceEntry ledger.fin.internal selecting
// app=ledger plus extra, with APP_PORT replaced by the port the VM's
// application is to listen on; it returns the plane and that address.
func ledgerPlane(t *testing.T, extra string) (cp *controlplane.ControlPlane, appAddr, appPort string) {
	t.Helper()
	appPort = strconv.Itoa(testenv.FreePort(t))
	appAddr = net.JoinHostPort("127.0.0.1", appPort)
	dir := t.TempDir()
	cfgYAML := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ledger, namespace: fin}
spec:
  hosts: [ledger.fin.internal]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: ledger}}
---
` + strings.ReplaceAll(extra, "APP_PORT", appPort)
	if err := os.WriteFile(filepath.Join(dir, "ledger.yaml"), []byte(cfgYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.DebounceQuiet, cfg.DebounceMax = 20*time.Millisecond, 200*time.Millisecond
	cfg.RegistrationGrace = time.Second
	cp = start(t, cfg)
	waitReady(t, cp)
	return cp, appAddr, appPort
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustAtoi(t *testing.T, s string) uint32 {
	var n uint32
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// shortTempDir is a temp dir short enough for Unix socket paths.
func shortTempDir(t *testing.T) string {
	d, err := os.MkdirTemp("/tmp", "vm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
