package certs_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/agents/certs"
	"github.com/vmesh/vmesh/agents/internal/agenttest"
	"github.com/vmesh/vmesh/internal/refusal"
)

func newManager(t *testing.T, c *agenttest.CA, token string, ttl time.Duration, out string) (*certs.Manager, *prometheus.Registry) {
	t.Helper()
	_, b := c.Bundle(t, "shop", "cart", "", nil)
	if token == "" {
		token = b.Token
	}
	reg := prometheus.NewRegistry()
	m, err := certs.New(certs.Config{
		Address: b.DiscoveryAddress, RootsPEM: b.RootCerts, Token: token, TTL: ttl, OutDir: out,
		RetryMin: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
	}, agenttest.Logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// start runs m until the end of the test, waiting for Run to return.
func start(t *testing.T, m *certs.Manager) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ctx
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestRotatesSeveralTimes gets a certificate with the bootstrap token and
// watches the manager renew it over mTLS several times with a 2 s lifetime,
// checking the files on disk after each rotation.
func TestRotatesSeveralTimes(t *testing.T) {
	c := agenttest.NewCA(t, nil)
	out := filepath.Join(t.TempDir(), "certs")
	m, reg := newManager(t, c, "", 2*time.Second, out)
	sub, unsub := m.Subscribe()
	defer unsub()
	ctx := start(t, m)

	want := "spiffe://cluster.local/ns/shop/sa/cart"
	serials := map[string]bool{}
	last := 0
	for last < 4 {
		select {
		case <-sub:
		case <-ctx.Done():
			t.Fatalf("only %d certificates before the deadline", last)
		}
		kp := m.Current()
		if kp.Generation <= last {
			continue
		}
		last = kp.Generation
		if len(kp.Leaf.URIs) != 1 || kp.Leaf.URIs[0].String() != want {
			t.Fatalf("generation %d: URIs %v, want %s", kp.Generation, kp.Leaf.URIs, want)
		}
		s := kp.Leaf.SerialNumber.String()
		if serials[s] {
			t.Fatalf("generation %d reuses serial %s", kp.Generation, s)
		}
		serials[s] = true
		if life := time.Until(kp.Leaf.NotAfter); life > 3*time.Second {
			t.Fatalf("generation %d lives %s more, want the requested 2s", kp.Generation, life)
		}
		// X.509 times have whole seconds, so "half" is only roughly visible
		// here; TestRenewsAtHalfLifeWithJitter measures it on a long lifetime.
		if d := kp.Leaf.NotAfter.Sub(kp.RenewAt); d < 400*time.Millisecond || d >= 2*time.Second {
			t.Fatalf("generation %d renews %s before expiry, want about half of 2s", kp.Generation, d)
		}
		// The files are written before subscribers hear of the rotation and
		// hold a matching pair that chains to the written roots.
		pair, err := tls.LoadX509KeyPair(filepath.Join(out, certs.CertChainFile), filepath.Join(out, certs.KeyFile))
		if err != nil {
			t.Fatalf("generation %d: files: %v", kp.Generation, err)
		}
		if pair.Leaf.NotBefore.Before(kp.Leaf.NotBefore) {
			t.Fatalf("generation %d: file holds an older certificate", kp.Generation)
		}
		roots, err := os.ReadFile(filepath.Join(out, certs.RootCertFile))
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(roots)
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Fatalf("generation %d: written leaf does not verify with written roots: %v", kp.Generation, err)
		}
		if st, err := os.Stat(filepath.Join(out, certs.KeyFile)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("key.pem: %v, %v; want mode 0600", st, err)
		}
	}
	if got := counter(t, reg, "vmesh_certs_fetches_total", map[string]string{"auth": "token", "result": "ok"}); got != 1 {
		t.Fatalf("token fetches = %v, want 1", got)
	}
	if got := counter(t, reg, "vmesh_certs_fetches_total", map[string]string{"auth": "certificate", "result": "ok"}); got < 3 {
		t.Fatalf("mTLS renewals = %v, want >= 3", got)
	}
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Fatalf("temporary file %s left behind", e.Name())
		}
	}
}

// TestRenewsAtHalfLifeWithJitter checks the renewal time of a one-hour
// certificate: between 50 % and 51 % of its lifetime.
func TestRenewsAtHalfLifeWithJitter(t *testing.T) {
	c := agenttest.NewCA(t, nil)
	m, _ := newManager(t, c, "", time.Hour, "")
	start(t, m)
	select {
	case <-m.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("no certificate")
	}
	kp := m.Current()
	issued := kp.Leaf.NotAfter.Add(-time.Hour)
	frac := float64(kp.RenewAt.Sub(issued)) / float64(time.Hour)
	if frac < 0.499 || frac > 0.5105 {
		t.Fatalf("renews at %.4f of the lifetime, want [0.5, 0.51]", frac)
	}
}

// TestBadTokenStopsTheManager: a token the CA refuses for good ends Run
// with a *refusal.PermanentError naming the reason and the fix (the agent
// exits on it instead of retrying forever), and never produces a
// certificate.
func TestBadTokenStopsTheManager(t *testing.T) {
	c := agenttest.NewCA(t, nil)
	m, reg := newManager(t, c, "not-a-token", time.Hour, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := m.Run(ctx)
	perr, ok := errors.AsType[*refusal.PermanentError](err)
	if !ok || ctx.Err() != nil {
		t.Fatalf("Run = %v (deadline: %v), want a permanent refusal before the deadline", err, ctx.Err())
	}
	if perr.Refusal.Reason != "token_malformed" || perr.Refusal.Fix == "" {
		t.Fatalf("refusal %+v, want token_malformed with a fix", perr.Refusal)
	}
	if got := counter(t, reg, "vmesh_certs_fetches_total", map[string]string{"auth": "token", "result": "error"}); got != 1 {
		t.Errorf("%v failed requests, want the one that was refused", got)
	}
	if m.Current() != nil {
		t.Fatal("a certificate from a rejected token")
	}
	select {
	case <-m.Ready():
		t.Fatal("Ready closed without a certificate")
	default:
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]certs.Config{
		"no port":  {Address: "127.0.0.1", RootsPEM: []byte("x"), Token: "t"},
		"no roots": {Address: "127.0.0.1:1", RootsPEM: []byte("not pem"), Token: "t"},
	} {
		if _, err := certs.New(cfg, nil, nil); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}
