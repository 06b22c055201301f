package spiffe_test

import (
	"crypto/x509"
	"net/url"
	"testing"

	"github.com/vmesh/vmesh/ca/spiffe"
)

func TestParseRoundTrip(t *testing.T) {
	id := spiffe.Identity{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "cart-v1"}
	s := id.String()
	if s != "spiffe://cluster.local/ns/shop/sa/cart-v1" {
		t.Fatalf("String() = %q", s)
	}
	got, err := spiffe.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if got != id {
		t.Fatalf("Parse(%q) = %+v, want %+v", s, got, id)
	}
	if id.URL().String() != s {
		t.Fatalf("URL() = %q, want %q", id.URL(), s)
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{
		"",
		"https://cluster.local/ns/a/sa/b",
		"spiffe://cluster.local",
		"spiffe://cluster.local/ns/a",
		"spiffe://cluster.local/ns/a/sa/b/extra",
		"spiffe://cluster.local/sa/b/ns/a",
		"spiffe://Cluster.Local/ns/a/sa/b",
		"spiffe:///ns/a/sa/b",
		"spiffe://cluster.local/ns//sa/b",
		"spiffe://cluster.local/ns/a/sa/..",
		"spiffe://cluster.local/ns/a%2Fb/sa/c",
	} {
		if id, err := spiffe.Parse(s); err == nil {
			t.Errorf("Parse(%q) = %+v, want error", s, id)
		}
	}
}

func TestFromCertificateWantsExactlyOneURI(t *testing.T) {
	u1, _ := url.Parse("spiffe://cluster.local/ns/a/sa/b")
	u2, _ := url.Parse("spiffe://cluster.local/ns/a/sa/c")
	if _, err := spiffe.FromCertificate(&x509.Certificate{URIs: []*url.URL{u1, u2}}); err == nil {
		t.Fatal("two URI SANs accepted")
	}
	if _, err := spiffe.FromCertificate(&x509.Certificate{}); err == nil {
		t.Fatal("no URI SAN accepted")
	}
	id, err := spiffe.FromCertificate(&x509.Certificate{URIs: []*url.URL{u1}})
	if err != nil || id.ServiceAccount != "b" {
		t.Fatalf("FromCertificate = %+v, %v", id, err)
	}
}
