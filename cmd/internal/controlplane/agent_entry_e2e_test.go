package controlplane_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
)

// TestAgentDecidesConfigDefinedEntry: a VM whose WorkloadEntry is in the
// config (annotated proxy.istio.io/health-checks-enabled) and whose agent
// names it (--workload-entry, Istio's WORKLOAD_ENTRY) is an endpoint only
// while the agent's probe passes, through the real secure xDS stream; a
// grace period after the agent stops, its health is unknown and it is no
// endpoint.
func TestAgentDecidesConfigDefinedEntry(t *testing.T) {
	cp, appAddr, appPort := ledgerPlane(t, `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: ledger-vm-1
  namespace: fin
  annotations: {proxy.istio.io/health-checks-enabled: "true"}
spec:
  address: 127.0.0.1
  labels: {app: ledger}
  ports: {grpc: APP_PORT}
  serviceAccount: ledger
`)
	entry := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: "ledger-vm-1"}
	healthOf := func() *bool { return cp.Store().Snapshot().Get(entry).Healthy }
	if h := healthOf(); h != nil {
		t.Fatalf("health before any agent: %v, want unknown", *h)
	}

	bundleDir := filepath.Join(t.TempDir(), "bundle")
	if _, err := cp.CA().WriteVMBundle(bundleDir, ca.VMBundleRequest{Namespace: "fin", ServiceAccount: "ledger", DiscoveryAddress: cp.SecureAddr()}); err != nil {
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
			WorkloadName: "ledger-vm-1", WorkloadEntry: "ledger-vm-1", DisableEnvoy: true, Probe: &probe,
			RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		}, nil, prometheus.NewRegistry())
	}()
	defer func() { stopAgent(); <-agentDone }()

	waitFor(t, "the agent's healthy report", func() bool { h := healthOf(); return h != nil && *h })
	client := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "teller", Namespace: "fin"}, "ledger.fin.internal:7070")
	if got := xdstest.CallUntil(t, client, 20*time.Second); got != "vm-backend" {
		t.Fatalf("reached %q", got)
	}
	stopApp()
	waitFor(t, "the failing probe's report", func() bool { h := healthOf(); return h != nil && !*h })
	stopApp = startVMApp(t, appAddr)
	waitFor(t, "healthy again", func() bool { h := healthOf(); return h != nil && *h })

	stopAgent()
	<-agentDone
	agentDone <- nil
	stopped := time.Now()
	waitFor(t, "health unknown after the grace period", func() bool { return healthOf() == nil })
	if since := time.Since(stopped); since < 900*time.Millisecond {
		t.Fatalf("health dropped after %s, before the 1s grace period", since)
	}
	if cp.Store().Snapshot().Get(entry) == nil {
		t.Fatal("the config-defined entry was removed")
	}
}
