package ca_test

import (
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/ca"
)

// TestApplyRevocations: entries from elsewhere are merged once (a second
// apply is a no-op), an identity's later revocation replaces its earlier
// one, expired ones are skipped, and a token applied so is refused.
func TestApplyRevocations(t *testing.T) {
	c, _, _ := newTestCA(t, nil)
	tok, claims, err := c.CreateToken(ca.TokenRequest{Namespace: "fin", ServiceAccount: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	changed := c.RevocationChanges()
	rvs := []ca.Revocation{
		{Token: claims.ID, RevokedAt: now, NotAfter: now.Add(time.Hour)},
		{Identity: "spiffe://cluster.local/ns/fin/sa/old", RevokedAt: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)},
		{Serial: "abc", RevokedAt: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Hour)}, // expired
	}
	if n, err := c.ApplyRevocations(rvs); err != nil || n != 2 {
		t.Fatalf("first apply: %d new, %v", n, err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("applying did not signal a change of the list")
	}
	if _, err := c.VerifyToken(tok); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("applied token revocation not enforced: %v", err)
	}
	if n, err := c.ApplyRevocations(rvs); err != nil || n != 0 {
		t.Fatalf("second apply: %d new, %v", n, err)
	}
	later := ca.Revocation{Identity: "spiffe://cluster.local/ns/fin/sa/old", RevokedAt: now, NotAfter: now.Add(time.Hour), Reason: "again"}
	if n, err := c.ApplyRevocations([]ca.Revocation{later, {Identity: later.Identity, RevokedAt: now.Add(-3 * time.Hour)}}); err != nil || n != 1 {
		t.Fatalf("later identity revocation: %d new, %v", n, err)
	}
	var got []ca.Revocation
	for _, rv := range c.Revoked() {
		if rv.Identity != "" {
			got = append(got, rv)
		}
	}
	if len(got) != 1 || got[0].Reason != "again" || !got[0].RevokedAt.Equal(now) {
		t.Fatalf("identity entries %+v", got)
	}
	for _, rv := range c.Revoked() {
		if rv.Serial == "abc" {
			t.Fatal("an expired entry was applied")
		}
	}
}

// TestRevocationFor: the entries `vmesh ca revoke --state` builds without a
// CA, and their validation.
func TestRevocationFor(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rv, err := ca.RevocationFor(ca.RevokeRequest{Serial: "0A:BC"}, now, "")
	if err != nil || rv.Serial != "abc" || !rv.NotAfter.Equal(now.Add(ca.DefaultMaxTTL)) {
		t.Fatalf("serial: %+v %v", rv, err)
	}
	rv, err = ca.RevocationFor(ca.RevokeRequest{Token: "t-1", Reason: "lost"}, now, "")
	if err != nil || rv.Token != "t-1" || rv.Reason != "lost" || !rv.NotAfter.Equal(now.Add(ca.DefaultMaxTokenTTL)) {
		t.Fatalf("token: %+v %v", rv, err)
	}
	if _, err := ca.RevocationFor(ca.RevokeRequest{Identity: "spiffe://other.example/ns/a/sa/b"}, now, "cluster.local"); err == nil {
		t.Fatal("an identity of another trust domain accepted")
	}
	if _, err := ca.RevocationFor(ca.RevokeRequest{Serial: "zz"}, now, ""); err == nil {
		t.Fatal("a bad serial accepted")
	}
	if _, err := ca.RevocationFor(ca.RevokeRequest{Serial: "1", Token: "t"}, now, ""); err == nil {
		t.Fatal("two things at once accepted")
	}
}
