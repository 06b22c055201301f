// Package spiffe names workload identities as SPIFFE IDs of the form
// spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>, the shape Istio
// uses, and reads them from X.509 certificates.
//
// It has no dependencies on the rest of vmesh so that the CA, the xDS server
// and the per-VM agents can share it.
package spiffe

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Scheme is the URI scheme of every SPIFFE ID.
const Scheme = "spiffe"

// DefaultTrustDomain is the trust domain used when none is configured.
const DefaultTrustDomain = "cluster.local"

// Identity is one workload identity: a service account in a namespace of a
// trust domain.
type Identity struct {
	TrustDomain    string
	Namespace      string
	ServiceAccount string
}

// String renders the identity as spiffe://<td>/ns/<ns>/sa/<sa>.
func (id Identity) String() string {
	return Scheme + "://" + id.TrustDomain + "/ns/" + id.Namespace + "/sa/" + id.ServiceAccount
}

// URL renders the identity as a URL, the form used in certificate SANs.
func (id Identity) URL() *url.URL {
	return &url.URL{Scheme: Scheme, Host: id.TrustDomain, Path: "/ns/" + id.Namespace + "/sa/" + id.ServiceAccount}
}

// Validate checks that every part is a non-empty, well-formed name.
func (id Identity) Validate() error {
	if err := ValidateTrustDomain(id.TrustDomain); err != nil {
		return err
	}
	if err := validateSegment("namespace", id.Namespace); err != nil {
		return err
	}
	return validateSegment("service account", id.ServiceAccount)
}

// ValidateTrustDomain checks a trust domain name: lower-case letters, digits,
// '.', '-' and '_', as the SPIFFE specification allows.
func ValidateTrustDomain(td string) error {
	if td == "" {
		return errors.New("trust domain is empty")
	}
	if len(td) > 255 {
		return fmt.Errorf("trust domain %.20q... is longer than 255 characters", td)
	}
	for _, r := range td {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("trust domain %q: character %q is not allowed (lower-case letters, digits, '.', '-', '_')", td, r)
		}
	}
	return nil
}

// validateSegment checks a namespace or service account: a non-empty path
// segment made of SPIFFE's unreserved characters (letters, digits, '.', '-', '_').
func validateSegment(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > 253 {
		return fmt.Errorf("%s %.20q... is longer than 253 characters", what, s)
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%s %q is not allowed", what, s)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("%s %q: character %q is not allowed (letters, digits, '.', '-', '_')", what, s, r)
		}
	}
	return nil
}

// Parse reads a SPIFFE ID of the form spiffe://<td>/ns/<ns>/sa/<sa>.
func Parse(s string) (Identity, error) {
	rest, ok := strings.CutPrefix(s, Scheme+"://")
	if !ok {
		return Identity{}, fmt.Errorf("%q is not a SPIFFE ID: want spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>", s)
	}
	td, path, ok := strings.Cut(rest, "/")
	if !ok {
		return Identity{}, fmt.Errorf("%q has no path: want spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>", s)
	}
	parts := strings.Split(path, "/")
	if len(parts) != 4 || parts[0] != "ns" || parts[2] != "sa" {
		return Identity{}, fmt.Errorf("%q: path must be /ns/<namespace>/sa/<service-account>", s)
	}
	id := Identity{TrustDomain: td, Namespace: parts[1], ServiceAccount: parts[3]}
	if err := id.Validate(); err != nil {
		return Identity{}, fmt.Errorf("%q: %w", s, err)
	}
	return id, nil
}

// FromCertificate returns the identity named by a workload certificate, which
// must carry exactly one URI SAN and that SAN must be a SPIFFE ID.
func FromCertificate(cert *x509.Certificate) (Identity, error) {
	if cert == nil {
		return Identity{}, errors.New("no certificate")
	}
	if len(cert.URIs) != 1 {
		return Identity{}, fmt.Errorf("certificate %s has %d URI SANs, want exactly one SPIFFE ID", cert.SerialNumber.Text(16), len(cert.URIs))
	}
	return Parse(cert.URIs[0].String())
}
