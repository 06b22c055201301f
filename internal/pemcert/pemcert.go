// Package pemcert reads and writes PEM certificate lists (chains and trust
// bundles): the one PEM loop of the CA, the onboarding bundle and the
// agent.
package pemcert

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// Parse reads every CERTIFICATE block of a PEM document. It fails on any
// other block type, on trailing data that is not PEM, and on a document
// with no certificate.
func Parse(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q, want CERTIFICATE", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(bytes.TrimSpace(data)) != 0 {
		return nil, errors.New("trailing data that is not PEM")
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return certs, nil
}

// Encode writes certs as PEM CERTIFICATE blocks.
func Encode(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// Merge returns the certificates of a followed by those of b that a does
// not hold already (a trust bundle gaining a root), as PEM.
func Merge(a, b []byte) ([]byte, error) {
	first, err := Parse(a)
	if err != nil {
		return nil, err
	}
	second, err := Parse(b)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []*x509.Certificate
	for _, c := range append(first, second...) {
		if !seen[string(c.Raw)] {
			seen[string(c.Raw)] = true
			out = append(out, c)
		}
	}
	return Encode(out), nil
}
