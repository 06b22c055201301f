package ca_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/ca"
)

func TestCheckCSR(t *testing.T) {
	p224, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := newCSR(t, []string{testID.String()}, nil)
	block, _ := pem.Decode(good)
	badSig := append([]byte(nil), block.Bytes...)
	badSig[len(badSig)-3] ^= 0xff
	noSAN, _ := newCSR(t, nil, nil)

	for _, tc := range []struct {
		name   string
		csr    []byte
		want   error
		detail string
	}{
		{name: "own identity", csr: good},
		{name: "no SAN", csr: noSAN},
		{name: "another service account", csr: mustCSR(t, []string{"spiffe://cluster.local/ns/shop/sa/admin"}, nil), want: ca.ErrCSRIdentity, detail: "sa/admin"},
		{name: "another namespace", csr: mustCSR(t, []string{"spiffe://cluster.local/ns/kube-system/sa/cart"}, nil), want: ca.ErrCSRIdentity, detail: "ns/kube-system"},
		{name: "another trust domain", csr: mustCSR(t, []string{"spiffe://evil.org/ns/shop/sa/cart"}, nil), want: ca.ErrCSRIdentity, detail: "evil.org"},
		{name: "own plus another", csr: mustCSR(t, []string{testID.String(), "spiffe://cluster.local/ns/shop/sa/admin"}, nil), want: ca.ErrCSRIdentity},
		{name: "DNS SAN", csr: mustCSR(t, nil, []string{"payments.internal"}), want: ca.ErrCSRIdentity, detail: "payments.internal"},
		{name: "bad signature", csr: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: badSig}), want: ca.ErrCSRInvalid},
		{name: "weak curve", csr: csrFor(t, p224, nil, nil), want: ca.ErrCSRInvalid, detail: "P-224"},
		{name: "short RSA", csr: csrFor(t, rsa1024, nil, nil), want: ca.ErrCSRInvalid, detail: "1024 bits"},
		{name: "not PEM", csr: []byte("hello"), want: ca.ErrCSRInvalid, detail: "PEM"},
		{name: "wrong PEM type", csr: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}), want: ca.ErrCSRInvalid, detail: "CERTIFICATE REQUEST"},
		{name: "empty", csr: nil, want: ca.ErrCSRInvalid, detail: "no CSR"},
		{name: "oversized", csr: []byte(strings.Repeat("x", ca.MaxCSRSize+1)), want: ca.ErrCSRInvalid, detail: "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			csr, err := ca.CheckCSR(tc.csr, testID)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if csr == nil {
					t.Fatal("nil CSR")
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want reason %s", err, tc.want.(*ca.Error).Reason)
			}
			if tc.detail != "" && !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("message %q does not say %q", err, tc.detail)
			}
		})
	}
}

func TestSignCSRIgnoresSubject(t *testing.T) {
	c, _, _ := newTestCA(t, nil)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.CertificateRequest{}
	tmpl.Subject.CommonName = "spiffe://cluster.local/ns/kube-system/sa/admin"
	tmpl.Subject.Organization = []string{"admins"}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _, err := c.SignCSR(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), testID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != "" || len(leaf.Subject.Organization) != 0 {
		t.Fatalf("subject %q copied from the CSR", leaf.Subject)
	}
	if leaf.URIs[0].String() != testID.String() {
		t.Fatalf("SAN = %v", leaf.URIs)
	}
}

func mustCSR(t *testing.T, uris, dns []string) []byte {
	t.Helper()
	csr, _ := newCSR(t, uris, dns)
	return csr
}
