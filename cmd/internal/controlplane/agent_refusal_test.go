package controlplane_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/spiffe"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/refusal"
	"github.com/vmesh/vmesh/writers/autoregister"
)

const ledgerGroupYAML = `apiVersion: networking.istio.io/v1
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
  metadata: {labels: {app: ledger}}
  template:
    ports: {grpc: 7070}
    serviceAccount: ledger
`

// TestAgentRefusedForGood: an agent the control plane can never accept (a
// revoked identity, a token minted for another trust domain, a WorkloadGroup
// that does not exist) stops with a *refusal.PermanentError naming the
// reason and the fix, the error the vmesh command exits 78 on, instead of
// retrying forever; an unreachable control plane is retried.
func TestAgentRefusedForGood(t *testing.T) {
	configDir, dataDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(configDir, "ledger.yaml"), []byte(ledgerGroupYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir, cfg.DataDir = configDir, dataDir
	cp, _ := startIn(t, cfg)
	waitReady(t, cp)
	bundleFor := func(t *testing.T, c *ca.CA, group string) string {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "bundle")
		if _, err := c.WriteVMBundle(dir, ca.VMBundleRequest{Namespace: "fin", ServiceAccount: "ledger", WorkloadGroup: group, DiscoveryAddress: cp.SecureAddr()}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	runAgent := func(ctx context.Context, t *testing.T, bundleDir string, reg prometheus.Registerer) error {
		return agent.Run(ctx, agent.Config{
			BundleDir: bundleDir, OutDir: t.TempDir(), SocketDir: shortTempDir(t), IPs: []string{"127.0.0.1"},
			WorkloadName: "ledger-vm", DisableEnvoy: true, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		}, nil, reg)
	}
	// Minted with the right key but for another trust domain, as `vmesh
	// token create --trust-domain other.example` did.
	foreign, err := ca.Open(ca.Config{DataDir: filepath.Join(dataDir, "ca"), TrustDomain: "other.example", NoCreate: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	foreignBundle := bundleFor(t, foreign, "ledger")

	cases := []struct {
		name   string
		bundle func(t *testing.T) string
		part   string
		reason string
	}{
		{name: "unknown WorkloadGroup", part: "registration", reason: autoregister.ReasonNoWorkloadGroup,
			bundle: func(t *testing.T) string { return bundleFor(t, cp.CA(), "ledgr") }},
		{name: "token for another trust domain", part: "certificate request", reason: string(ca.ReasonTokenClaims),
			bundle: func(*testing.T) string { return foreignBundle }},
		// Last: it revokes fin/ledger for good.
		{name: "revoked identity", part: "certificate request", reason: string(ca.ReasonTokenRevoked),
			bundle: func(t *testing.T) string {
				dir := bundleFor(t, cp.CA(), "ledger")
				if err := cp.CA().RevokeIdentity(spiffe.Identity{TrustDomain: cp.CA().TrustDomain(), Namespace: "fin", ServiceAccount: "ledger"}, "decommissioned"); err != nil {
					t.Fatal(err)
				}
				return dir
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := runAgent(ctx, t, c.bundle(t), prometheus.NewRegistry())
			perr, ok := errors.AsType[*refusal.PermanentError](err)
			if !ok {
				t.Fatalf("agent.Run = %v, want a permanent refusal", err)
			}
			if ctx.Err() != nil {
				t.Fatalf("the agent retried until the deadline: %v", err)
			}
			if perr.Part != c.part || perr.Refusal.Reason != c.reason || perr.Refusal.Fix == "" {
				t.Fatalf("refusal %q: %+v, want part %q, reason %q, with a fix", perr, perr.Refusal, c.part, c.reason)
			}
			if strings.Contains(perr.Error(), "\n") {
				t.Errorf("the refusal is not one line: %q", perr)
			}
			t.Logf("vmesh agent would print: vmesh: %s", err)
		})
	}

	t.Run("unreachable control plane is retried", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := lis.Addr().String()
		lis.Close()
		dir := filepath.Join(t.TempDir(), "bundle")
		if _, err := cp.CA().WriteVMBundle(dir, ca.VMBundleRequest{Namespace: "fin", ServiceAccount: "other", DiscoveryAddress: closed}); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- runAgent(ctx, t, dir, reg) }()
		failed := func() float64 {
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			sum := 0.0 // over both auth kinds: every series exists from the start
			for _, mf := range mfs {
				if mf.GetName() != "vmesh_certs_fetches_total" {
					continue
				}
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "result" && l.GetValue() == "error" {
							sum += m.GetCounter().GetValue()
						}
					}
				}
			}
			return sum
		}
		waitUntil(t, 30*time.Second, "three failed certificate requests", func() bool {
			select {
			case err := <-done:
				t.Fatalf("the agent gave up on an unreachable control plane: %v", err)
			default:
			}
			return failed() >= 3
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("agent.Run after cancel = %v, want nil", err)
		}
	})
}
