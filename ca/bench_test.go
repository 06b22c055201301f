package ca_test

import (
	"context"
	"testing"

	securityv1alpha1 "istio.io/api/security/v1alpha1"

	"github.com/vmesh/vmesh/ca"
)

// BenchmarkSignCSR measures certificates signed per second by the CA alone:
// CSR parsing, its signature check, and an ECDSA P-256 signature.
func BenchmarkSignCSR(b *testing.B) {
	c, _, _ := newTestCA(b, nil)
	csr, _ := newCSR(b, []string{testID.String()}, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.SignCSR(csr, testID, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "certs/s")
}

// BenchmarkSignCSRParallel is BenchmarkSignCSR from GOMAXPROCS goroutines.
func BenchmarkSignCSRParallel(b *testing.B) {
	c, _, _ := newTestCA(b, nil)
	csr, _ := newCSR(b, []string{testID.String()}, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := c.SignCSR(csr, testID, 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "certs/s")
}

// BenchmarkCreateCertificateRPC measures the full path a VM takes: a
// CreateCertificate call with a bootstrap token over TLS on a loopback gRPC
// connection (token check, CSR check, signing, response).
func BenchmarkCreateCertificateRPC(b *testing.B) {
	c, _, _ := newTestCA(b, nil)
	addr, _ := startServerTB(b, c)
	client := dialTB(b, addr, c.TrustBundle().CertPool(), nil)
	tok, _, err := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err != nil {
		b.Fatal(err)
	}
	csr, _ := newCSR(b, []string{testID.String()}, nil)
	ctx := withToken(context.Background(), tok)
	req := &securityv1alpha1.IstioCertificateRequest{Csr: string(csr)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.CreateCertificate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "certs/s")
}

// BenchmarkVerifyToken measures bootstrap token verification.
func BenchmarkVerifyToken(b *testing.B) {
	c, _, _ := newTestCA(b, nil)
	tok, _, err := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.VerifyToken(tok); err != nil {
			b.Fatal(err)
		}
	}
}
