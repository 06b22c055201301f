package ca

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"

	"github.com/vmesh/vmesh/ca/spiffe"
)

// MaxCSRSize bounds the PEM CSR a request may carry.
const MaxCSRSize = 64 << 10

// CheckCSR parses a PEM certificate signing request and checks it may be
// signed for id: a valid self-signature (proof of possession), a supported
// key (ECDSA P-256/P-384/P-521, RSA 2048-8192 bits, Ed25519), and no identity
// other than id: its URI SANs, if any, must all equal id's SPIFFE ID, and it
// may not ask for DNS, IP or e-mail SANs. The subject is ignored: issued
// certificates carry only the SPIFFE URI SAN.
func CheckCSR(csrPEM []byte, id spiffe.Identity) (*x509.CertificateRequest, error) {
	if len(csrPEM) == 0 {
		return nil, reject(ReasonCSRInvalid, "the request has no CSR", nil)
	}
	if len(csrPEM) > MaxCSRSize {
		return nil, reject(ReasonCSRInvalid, fmt.Sprintf("CSR is %d bytes, more than %d", len(csrPEM), MaxCSRSize), nil)
	}
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		return nil, reject(ReasonCSRInvalid, "CSR is not PEM encoded", nil)
	}
	if block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST" {
		return nil, reject(ReasonCSRInvalid, fmt.Sprintf("PEM block is %q, want CERTIFICATE REQUEST", block.Type), nil)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, reject(ReasonCSRInvalid, "parse CSR", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, reject(ReasonCSRInvalid, "CSR signature does not verify (no proof of key possession)", err)
	}
	if err := checkPublicKey(csr.PublicKey); err != nil {
		return nil, err
	}
	want := id.String()
	for _, u := range csr.URIs {
		if u.String() != want {
			return nil, reject(ReasonCSRIdentity, fmt.Sprintf("CSR asks for URI SAN %q but the caller is authenticated as %s", u.String(), want), nil)
		}
	}
	if len(csr.DNSNames) > 0 {
		return nil, reject(ReasonCSRIdentity, fmt.Sprintf("CSR asks for DNS SANs %q; workload certificates carry only the caller's SPIFFE ID %s", csr.DNSNames, want), nil)
	}
	if len(csr.IPAddresses) > 0 {
		return nil, reject(ReasonCSRIdentity, fmt.Sprintf("CSR asks for IP SANs %v; workload certificates carry only the caller's SPIFFE ID %s", csr.IPAddresses, want), nil)
	}
	if len(csr.EmailAddresses) > 0 {
		return nil, reject(ReasonCSRIdentity, fmt.Sprintf("CSR asks for e-mail SANs %q; workload certificates carry only the caller's SPIFFE ID %s", csr.EmailAddresses, want), nil)
	}
	return csr, nil
}

func checkPublicKey(pub any) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return reject(ReasonCSRInvalid, fmt.Sprintf("ECDSA curve %s is not supported (P-256, P-384, P-521)", k.Curve.Params().Name), nil)
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < 2048 || n > 8192 {
			return reject(ReasonCSRInvalid, fmt.Sprintf("RSA key of %d bits is not supported (2048 to 8192)", n), nil)
		}
		return nil
	case ed25519.PublicKey:
		return nil
	}
	return reject(ReasonCSRInvalid, fmt.Sprintf("public key type %T is not supported", pub), nil)
}
