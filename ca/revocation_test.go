package ca_test

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/internal/refusal"
)

func TestRevocationIsPersistedAndSharedThroughTheDataDir(t *testing.T) {
	c, cfg, _ := newTestCA(t, nil)
	csr, _ := newCSR(t, nil, nil)
	a, _, err := c.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := c.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Revoke(a, "decommissioned"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, ca.RevocationFile)); err != nil {
		t.Fatalf("revocation list not written: %v", err)
	}

	// A restarted CA still refuses the revoked certificate and accepts the other.
	restarted, err := ca.New(cfg, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := restarted.VerifyPeerCertificates([]*x509.Certificate{a}); !errors.Is(err, ca.ErrCertRevoked) {
		t.Fatalf("revoked certificate after restart: err = %v, want %v", err, ca.ErrCertRevoked)
	}
	if _, err := restarted.VerifyPeerCertificates([]*x509.Certificate{b}); err != nil {
		t.Fatalf("unrevoked certificate: %v", err)
	}

	// A revoke by another process (the CLI) reaches the running CA without a restart.
	cli, err := ca.New(cfg, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.RevokeSerial(b.SerialNumber.Text(16), "lost VM"); err != nil {
		t.Fatal(err)
	}
	if _, err := restarted.VerifyPeerCertificates([]*x509.Certificate{b}); !errors.Is(err, ca.ErrCertRevoked) {
		t.Fatalf("revoke from another process not seen: err = %v", err)
	}
	got := restarted.Revoked()
	if len(got) != 2 {
		t.Fatalf("Revoked() = %d entries, want 2", len(got))
	}
	if err := cli.RevokeSerial("zz", ""); err == nil {
		t.Fatal("non-hex serial accepted")
	}
}

func TestRevocationListDropsExpiredEntries(t *testing.T) {
	clock := newTestClock()
	c, _, _ := newTestCA(t, func(cfg *ca.Config) { cfg.Now = clock.Now })
	csr, _ := newCSR(t, nil, nil)
	short, _, _ := c.SignCSR(csr, testID, time.Hour)
	long, _, _ := c.SignCSR(csr, testID, 48*time.Hour)
	if err := c.Revoke(short, ""); err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * time.Hour)
	if err := c.Revoke(long, ""); err != nil {
		t.Fatal(err)
	}
	got := c.Revoked()
	if len(got) != 1 || got[0].Serial != long.SerialNumber.Text(16) {
		t.Fatalf("Revoked() = %+v, want only the unexpired certificate", got)
	}
}

func TestUnreadableRevocationListFailsClosed(t *testing.T) {
	c, cfg, _ := newTestCA(t, nil)
	csr, _ := newCSR(t, nil, nil)
	leaf, _, _ := c.SignCSR(csr, testID, time.Hour)
	if err := os.WriteFile(filepath.Join(cfg.DataDir, ca.RevocationFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := c.VerifyPeerCertificates([]*x509.Certificate{leaf})
	if err == nil {
		t.Fatal("corrupt revocation list: the certificate was accepted, want a refusal")
	}
	// A list the CA cannot read is the CA's failure, not the agent's: the
	// refusal is retried, so an agent does not exit 78 over a passing
	// storage error (its renewal after a refused stream would otherwise
	// take a revocation that never happened for a permanent one).
	if errors.Is(err, ca.ErrCertRevoked) {
		t.Fatalf("corrupt revocation list: err = %v, want an internal refusal, not cert_revoked", err)
	}
	var ce *ca.Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %T %v, want *ca.Error", err, err)
	}
	if r, ok := refusal.Of(ce); !ok || r.Permanent {
		t.Fatalf("corrupt revocation list: refusal %+v (found %v), want one the agent retries", r, ok)
	}
}

func TestRevokeIdentityRefusesEverythingIssuedBefore(t *testing.T) {
	clock := newTestClock()
	c, cfg, _ := newTestCA(t, func(cfg *ca.Config) { cfg.Now = clock.Now })
	csr, _ := newCSR(t, nil, nil)
	oldCert, _, err := c.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	oldToken, _, err := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err != nil {
		t.Fatal(err)
	}
	otherID := c.Identity("shop", "payments")
	otherCert, _, err := c.SignCSR(csr, otherID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	clock.Add(2 * time.Second)
	if err := c.RevokeIdentity(testID, "VM stolen"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.VerifyPeerCertificates([]*x509.Certificate{oldCert}); !errors.Is(err, ca.ErrCertRevoked) || !strings.Contains(err.Error(), "VM stolen") {
		t.Fatalf("certificate issued before the identity was revoked: err = %v", err)
	}
	if _, err := c.VerifyToken(oldToken); !errors.Is(err, ca.ErrTokenRevoked) {
		t.Fatalf("token issued before the identity was revoked: err = %v", err)
	}
	if _, err := c.VerifyPeerCertificates([]*x509.Certificate{otherCert}); err != nil {
		t.Fatalf("another identity was affected: %v", err)
	}

	// Re-onboarding with a new token works, and so does the certificate it gets.
	clock.Add(2 * time.Second)
	newToken, _, err := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.VerifyToken(newToken); err != nil {
		t.Fatalf("token minted after the revocation: %v", err)
	}
	newCert, _, err := c.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.VerifyPeerCertificates([]*x509.Certificate{newCert}); err != nil {
		t.Fatalf("certificate issued after the revocation: %v", err)
	}

	// The identity revocation survives a restart.
	restarted, err := ca.New(cfg, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := restarted.VerifyPeerCertificates([]*x509.Certificate{oldCert}); !errors.Is(err, ca.ErrCertRevoked) {
		t.Fatalf("identity revocation lost on restart: err = %v", err)
	}
}
