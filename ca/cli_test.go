package ca_test

import (
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/bundle"
)

func TestCommandFunctionsUseTheServersCA(t *testing.T) {
	server, cfg, _ := newTestCA(t, nil)

	tok, claims, err := ca.CreateToken(cfg, quietLogger(), ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart", TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := server.VerifyToken(tok); err != nil || got.ID != claims.ID {
		t.Fatalf("server rejects the CLI's token: %v", err)
	}

	dir := t.TempDir()
	if _, err := ca.WriteVMBundle(cfg, quietLogger(), dir, ca.VMBundleRequest{Namespace: "shop", ServiceAccount: "cart", DiscoveryAddress: "127.0.0.1:15012"}); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.VerifyToken(b.Token); err != nil {
		t.Fatalf("server rejects the bundle's token: %v", err)
	}

	csr, _ := newCSR(t, nil, nil)
	leaf, _, err := server.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Revoke(cfg, quietLogger(), ca.RevokeRequest{Serial: leaf.SerialNumber.Text(16), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := server.VerifyPeerCertificates([]*x509.Certificate{leaf}); !errors.Is(err, ca.ErrCertRevoked) {
		t.Fatalf("CLI revoke not seen by the server: %v", err)
	}
	if err := ca.Revoke(cfg, quietLogger(), ca.RevokeRequest{Serial: "ab", Identity: "spiffe://cluster.local/ns/shop/sa/cart"}); err == nil {
		t.Fatal("serial and identity together accepted")
	}
	if err := ca.Revoke(cfg, quietLogger(), ca.RevokeRequest{Identity: "spiffe://other.example/ns/shop/sa/cart"}); err == nil || !strings.Contains(err.Error(), "trust domain") {
		t.Fatalf("an identity of another trust domain: %v", err)
	}
	// A token revoked by its ID is refused; another token of the same
	// identity still works.
	tok2, _, err := ca.CreateToken(cfg, quietLogger(), ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Revoke(cfg, quietLogger(), ca.RevokeRequest{Token: claims.ID, Reason: "lost"}); err != nil {
		t.Fatal(err)
	}
	if _, err := server.VerifyToken(tok); !errors.Is(err, ca.ErrTokenRevoked) || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("revoked token: %v", err)
	}
	if _, err := server.VerifyToken(tok2); err != nil {
		t.Fatalf("another token of the identity refused: %v", err)
	}
	list, err := ca.Revocations(cfg, quietLogger())
	if err != nil || len(list) != 2 {
		t.Fatalf("revocations = %v %v, want the serial and the token", list, err)
	}
}

func TestCommandFunctionsNeverCreateARoot(t *testing.T) {
	cfg := ca.Config{DataDir: t.TempDir()}
	_, _, err := ca.CreateToken(cfg, quietLogger(), ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err == nil || !strings.Contains(err.Error(), "no CA root") {
		t.Fatalf("token create on an empty data dir: err = %v, want a no CA root error", err)
	}
}
