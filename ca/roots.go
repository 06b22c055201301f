package ca

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// TrustBundle is the ordered set of root certificates a workload trusts: the
// CA's current root first, then any roots kept during a rotation. It is
// immutable once built.
type TrustBundle struct {
	roots []*x509.Certificate
	pem   []byte
	pool  *x509.CertPool
}

// NewTrustBundle builds a bundle from root certificates, dropping duplicates
// and keeping the order given. Every certificate must be a CA.
func NewTrustBundle(roots ...*x509.Certificate) (*TrustBundle, error) {
	b := &TrustBundle{pool: x509.NewCertPool()}
	var buf bytes.Buffer
	for _, r := range roots {
		if r == nil {
			continue
		}
		if !r.IsCA {
			return nil, fmt.Errorf("trust bundle: certificate %q (serial %s) is not a CA", r.Subject, r.SerialNumber.Text(16))
		}
		if b.contains(r) {
			continue
		}
		b.roots = append(b.roots, r)
		b.pool.AddCert(r)
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: r.Raw})
	}
	if len(b.roots) == 0 {
		return nil, errors.New("trust bundle: no root certificates")
	}
	b.pem = buf.Bytes()
	return b, nil
}

func (b *TrustBundle) contains(c *x509.Certificate) bool {
	for _, r := range b.roots {
		if r.Equal(c) {
			return true
		}
	}
	return false
}

// Roots returns the root certificates, current root first.
func (b *TrustBundle) Roots() []*x509.Certificate {
	return append([]*x509.Certificate(nil), b.roots...)
}

// PEM returns every root as concatenated PEM blocks, the content of a
// root-cert.pem file.
func (b *TrustBundle) PEM() []byte { return append([]byte(nil), b.pem...) }

// CertPool returns a pool holding every root. Callers must not modify it.
func (b *TrustBundle) CertPool() *x509.CertPool { return b.pool }

// Verify checks that leaf chains up to one of the roots at time now, through
// the given intermediates, for the given extended key usage.
func (b *TrustBundle) Verify(leaf *x509.Certificate, intermediates []*x509.Certificate, now time.Time, usage x509.ExtKeyUsage) ([][]*x509.Certificate, error) {
	inter := x509.NewCertPool()
	for _, c := range intermediates {
		inter.AddCert(c)
	}
	return leaf.Verify(x509.VerifyOptions{
		Roots:         b.pool,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
}

func encodeCertPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}
