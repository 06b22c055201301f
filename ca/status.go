package ca

import "time"

// Status summarises the CA for /debug endpoints and `vmesh status`.
type Status struct {
	TrustDomain string       `json:"trustDomain"`
	Mode        string       `json:"mode"` // "self-signed" or "plug-in"
	Issuer      string       `json:"issuer"`
	IssuerUntil time.Time    `json:"issuerNotAfter"`
	Roots       []RootStatus `json:"roots"`
	Revoked     int          `json:"revoked"`
	DefaultTTL  string       `json:"defaultTTL"`
	MaxTTL      string       `json:"maxTTL"`
}

// RootStatus describes one root of the trust bundle.
type RootStatus struct {
	Subject  string    `json:"subject"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"notAfter"`
}

// Status reports the CA's current key material and revocation count.
func (c *CA) Status() Status {
	s := Status{
		TrustDomain: c.cfg.TrustDomain,
		Mode:        "self-signed",
		Issuer:      c.is.cert.Subject.String(),
		IssuerUntil: c.is.cert.NotAfter.UTC(),
		Revoked:     len(c.revoked.list()),
		DefaultTTL:  c.cfg.DefaultTTL.String(),
		MaxTTL:      c.cfg.MaxTTL.String(),
	}
	if c.cfg.CACertsDir != "" {
		s.Mode = "plug-in"
	}
	for _, r := range c.is.roots.roots {
		s.Roots = append(s.Roots, RootStatus{Subject: r.Subject.String(), Serial: r.SerialNumber.Text(16), NotAfter: r.NotAfter.UTC()})
	}
	return s
}
