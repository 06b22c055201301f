package controlplane_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/spiffe"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/refusal"
	"github.com/vmesh/vmesh/store"
)

// TestAgentExitsOnRevocation: a running agent whose identity is revoked
// stops with a permanent refusal (the `vmesh agent` command exits 78 on
// it, which its unit does not restart) instead of retrying its refused
// xDS stream forever: the control plane ends the stream, the agent renews
// its certificate at once, the CA refuses the renewal for good
// (cert_revoked), and the agent ends with that refusal, long before the
// certificate's renewal time.
func TestAgentExitsOnRevocation(t *testing.T) {
	configDir, dataDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(configDir, "ledger.yaml"), []byte(ledgerGroupYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir, cfg.DataDir = configDir, dataDir
	cp, _ := startIn(t, cfg)
	waitReady(t, cp)
	bundleDir := filepath.Join(t.TempDir(), "bundle")
	if _, err := cp.CA().WriteVMBundle(bundleDir, ca.VMBundleRequest{Namespace: "fin", ServiceAccount: "ledger", WorkloadGroup: "ledger", DiscoveryAddress: cp.SecureAddr()}); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		BundleDir: bundleDir, OutDir: t.TempDir(), SocketDir: shortTempDir(t), IPs: []string{"127.0.0.1"},
		WorkloadName: "ledger-vm", DisableEnvoy: true, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		// Renewal is hours away: only the revocation can end the agent.
		CertTTL: 2 * time.Hour,
	}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent.Run = %v before it was ready", err)
	}
	entry := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: "ledger-127.0.0.1"}
	waitUntil(t, 10*time.Second, "the agent registered", func() bool { return cp.Store().Snapshot().Get(entry) != nil })

	if err := cp.CA().RevokeIdentity(spiffe.Identity{TrustDomain: cp.CA().TrustDomain(), Namespace: "fin", ServiceAccount: "ledger"}, "decommissioned"); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	select {
	case err := <-done:
		perr, ok := errors.AsType[*refusal.PermanentError](err)
		if !ok {
			t.Fatalf("agent.Run = %v, want a permanent refusal", err)
		}
		if perr.Refusal.Reason != string(ca.ReasonCertRevoked) || perr.Part != "certificate request" || perr.Refusal.Fix == "" {
			t.Fatalf("refusal %q: %+v, want the certificate renewal refused with %s and a fix", perr, perr.Refusal, ca.ReasonCertRevoked)
		}
		t.Logf("agent stopped %v after the revocation: vmesh: %s", time.Since(revoked).Round(time.Millisecond), err)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent kept running 30 s after its identity was revoked")
	}
}
