// Package ca is vmesh's certificate authority. It holds the root (a
// self-signed ECDSA P-256 root created in the data directory on first start,
// or a plugged-in CA in Istio's cacerts layout with intermediates), signs
// workload certificates whose only identity is one SPIFFE URI SAN, mints
// bootstrap tokens for VMs, keeps a revocation list, and serves Istio's
// istio.v1.auth.IstioCertificateService/CreateCertificate API where the
// identity comes only from authentication: a bootstrap token or a still-valid
// mesh certificate presented over mTLS.
package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/ca/spiffe"
)

// Defaults, Istio's where Istio has one.
const (
	DefaultTTL           = 24 * time.Hour
	DefaultMaxTTL        = 90 * 24 * time.Hour
	DefaultRootTTL       = 10 * 365 * 24 * time.Hour
	DefaultServerCertTTL = 24 * time.Hour
	DefaultTokenTTL      = time.Hour
	DefaultMaxTokenTTL   = 30 * 24 * time.Hour
	DefaultTokenAudience = "istio-ca"

	// DefaultRevocationCheckInterval is how often Run re-reads a changed
	// revocation list.
	DefaultRevocationCheckInterval = time.Second

	// clockSkew backdates NotBefore so peers with a slightly slow clock
	// accept a fresh certificate.
	clockSkew = time.Minute
)

// Config configures a CA. Zero fields take the defaults above.
type Config struct {
	// DataDir holds the self-signed root and its key (mode 0600), the
	// additional trusted roots and the revocation list. Required.
	DataDir string
	// CACertsDir, when set, is an Istio plug-in cacerts directory
	// (ca-cert.pem, ca-key.pem, cert-chain.pem, root-cert.pem) used instead of
	// the self-signed root.
	CACertsDir string
	// TrustDomain of the issued SPIFFE IDs; default cluster.local.
	TrustDomain string
	// DefaultTTL of a workload certificate when the request names none.
	DefaultTTL time.Duration
	// MaxTTL is the longest workload certificate lifetime a request may ask for.
	MaxTTL time.Duration
	// RootTTL is the lifetime of a newly created self-signed root.
	RootTTL time.Duration
	// ServerCertTTL is the lifetime of the CA's own TLS serving certificate;
	// it is reissued at half its lifetime.
	ServerCertTTL time.Duration
	// TokenAudiences are the audiences a bootstrap token may carry to be
	// accepted; default ["istio-ca"].
	TokenAudiences []string
	// DefaultTokenTTL and MaxTokenTTL bound bootstrap token lifetimes.
	DefaultTokenTTL time.Duration
	MaxTokenTTL     time.Duration
	// NoCreate makes New fail instead of creating a self-signed root when the
	// data dir has none; CLI commands that mint tokens for a running server
	// set it.
	NoCreate bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// RevocationCheckInterval is how often Run looks for revocations written
	// by another process (the CLI) to the revocation list; default 1s.
	RevocationCheckInterval time.Duration
}

func (c Config) withDefaults() Config {
	if c.TrustDomain == "" {
		c.TrustDomain = spiffe.DefaultTrustDomain
	}
	if c.DefaultTTL == 0 {
		c.DefaultTTL = DefaultTTL
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = DefaultMaxTTL
	}
	if c.RootTTL == 0 {
		c.RootTTL = DefaultRootTTL
	}
	if c.ServerCertTTL == 0 {
		c.ServerCertTTL = DefaultServerCertTTL
	}
	if len(c.TokenAudiences) == 0 {
		c.TokenAudiences = []string{DefaultTokenAudience}
	}
	if c.DefaultTokenTTL == 0 {
		c.DefaultTokenTTL = DefaultTokenTTL
	}
	if c.MaxTokenTTL == 0 {
		c.MaxTokenTTL = DefaultMaxTokenTTL
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.RevocationCheckInterval == 0 {
		c.RevocationCheckInterval = DefaultRevocationCheckInterval
	}
	return c
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("ca: data dir is required")
	}
	if err := spiffe.ValidateTrustDomain(c.TrustDomain); err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"default TTL", c.DefaultTTL}, {"max TTL", c.MaxTTL}, {"root TTL", c.RootTTL}, {"server cert TTL", c.ServerCertTTL}, {"default token TTL", c.DefaultTokenTTL}, {"max token TTL", c.MaxTokenTTL}, {"revocation check interval", c.RevocationCheckInterval}} {
		if d.v < 0 {
			return fmt.Errorf("ca: %s %s is negative", d.name, d.v)
		}
	}
	if c.DefaultTTL > c.MaxTTL {
		return fmt.Errorf("ca: default TTL %s exceeds max TTL %s", c.DefaultTTL, c.MaxTTL)
	}
	if c.DefaultTokenTTL > c.MaxTokenTTL {
		return fmt.Errorf("ca: default token TTL %s exceeds max token TTL %s", c.DefaultTokenTTL, c.MaxTokenTTL)
	}
	for _, a := range c.TokenAudiences {
		if a == "" {
			return errors.New("ca: empty token audience")
		}
	}
	return nil
}

// CA signs workload certificates and bootstrap tokens. It is safe for
// concurrent use.
type CA struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	is      *issuer
	revoked *revocations
	tokens  *tokenKeys
}

// New loads the CA's key material (creating a self-signed root in
// cfg.DataDir on first start unless cfg.CACertsDir is set) and its
// revocation list. Metrics are registered on reg when it is not nil.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*CA, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	if !cfg.NoCreate {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("ca: create data dir: %w", err)
		}
	}
	is, created, err := loadIssuer(cfg, cfg.Now(), logger)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	rv, err := newRevocations(filepath.Join(cfg.DataDir, RevocationFile))
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	tk, err := newTokenKeys(is.key, cfg.TrustDomain)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	c := &CA{cfg: cfg, log: logger, metrics: m, is: is, revoked: rv, tokens: tk}
	m.rootExpiry.Set(float64(is.roots.Roots()[0].NotAfter.Unix()))
	source := "self-signed root in " + cfg.DataDir
	if cfg.CACertsDir != "" {
		source = "plug-in CA in " + cfg.CACertsDir
	}
	logger.Info("CA ready", "source", source, "created", created, "trust_domain", cfg.TrustDomain,
		"issuer", is.cert.Subject.String(), "roots", len(is.roots.Roots()))
	return c, nil
}

// TrustDomain returns the trust domain of issued identities.
func (c *CA) TrustDomain() string { return c.cfg.TrustDomain }

// TrustBundle returns the roots workloads must trust.
func (c *CA) TrustBundle() *TrustBundle { return c.is.roots }

// Identity returns the SPIFFE identity of a service account in a namespace
// of the CA's trust domain.
func (c *CA) Identity(namespace, serviceAccount string) spiffe.Identity {
	return spiffe.Identity{TrustDomain: c.cfg.TrustDomain, Namespace: namespace, ServiceAccount: serviceAccount}
}

// SignCSR signs a PEM certificate signing request for identity with the given
// lifetime (0 = default TTL). The CSR must be self-consistent and may name no
// identity other than id (see CheckCSR); the certificate carries id as its
// only URI SAN and no other SAN. It returns the leaf and the chain as PEM
// strings in Istio's order: leaf first, then intermediates, then the root.
func (c *CA) SignCSR(csrPEM []byte, id spiffe.Identity, ttl time.Duration) (*x509.Certificate, []string, error) {
	if id.TrustDomain != c.cfg.TrustDomain {
		return nil, nil, reject(ReasonCSRIdentity, fmt.Sprintf("identity %s is not in trust domain %q", id, c.cfg.TrustDomain), nil)
	}
	csr, err := CheckCSR(csrPEM, id)
	if err != nil {
		return nil, nil, err
	}
	ttl, err = c.ttl(ttl)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := c.issueWorkload(csr.PublicKey, id, ttl)
	if err != nil {
		return nil, nil, err
	}
	return leaf, c.chainPEM(leaf), nil
}

func (c *CA) ttl(ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl == 0:
		return c.cfg.DefaultTTL, nil
	case ttl < 0:
		return 0, reject(ReasonTTL, fmt.Sprintf("requested lifetime %s is negative", ttl), nil)
	case ttl > c.cfg.MaxTTL:
		return 0, reject(ReasonTTL, fmt.Sprintf("requested lifetime %s exceeds the maximum %s", ttl, c.cfg.MaxTTL), nil)
	}
	return ttl, nil
}

func (c *CA) issueWorkload(pub crypto.PublicKey, id spiffe.Identity, ttl time.Duration) (*x509.Certificate, error) {
	if err := id.Validate(); err != nil {
		return nil, reject(ReasonCSRIdentity, "invalid identity", err)
	}
	ku := x509.KeyUsageDigitalSignature
	if _, ok := pub.(*rsa.PublicKey); ok {
		ku |= x509.KeyUsageKeyEncipherment
	}
	now := c.cfg.Now()
	tmpl := &x509.Certificate{
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(ttl),
		KeyUsage:              ku,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		URIs:                  []*url.URL{id.URL()},
	}
	return c.issue(tmpl, pub)
}

// issue signs tmpl for pub with the issuing key, capping NotAfter at the
// issuer's own expiry.
// issuedAt is when a leaf of this CA was issued, for revocations by
// identity ("every certificate issued before T"): NotBefore+clockSkew, or
// NotBefore itself for a leaf whose start was clamped to its issuer's
// (issue), the earliest it can have been issued, so that such a leaf is
// refused rather than let through.
func (c *CA) issuedAt(leaf *x509.Certificate) time.Time {
	if !leaf.NotBefore.After(c.is.cert.NotBefore) {
		return leaf.NotBefore
	}
	return leaf.NotBefore.Add(clockSkew)
}

func (c *CA) issue(tmpl *x509.Certificate, pub crypto.PublicKey) (*x509.Certificate, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, reject(ReasonInternal, "", err)
	}
	tmpl.SerialNumber = serial
	if tmpl.NotAfter.After(c.is.cert.NotAfter) {
		tmpl.NotAfter = c.is.cert.NotAfter
	}
	// Backdated by clockSkew, but never before the issuer's own NotBefore:
	// a leaf of a plug-in intermediate less than clockSkew old would
	// otherwise start before its issuer, and verifiers that check the
	// chain at the leaf's start (the agent does) refuse it.
	if tmpl.NotBefore.Before(c.is.cert.NotBefore) {
		tmpl.NotBefore = c.is.cert.NotBefore
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.is.cert, pub, c.is.key)
	if err != nil {
		return nil, reject(ReasonInternal, "sign certificate", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, reject(ReasonInternal, "parse signed certificate", err)
	}
	return cert, nil
}

// chainPEM renders leaf, intermediates and the current root, one PEM
// certificate per element.
func (c *CA) chainPEM(leaf *x509.Certificate) []string {
	out := []string{string(encodeCertPEM(leaf))}
	for _, ic := range c.is.chain {
		out = append(out, string(encodeCertPEM(ic)))
	}
	return append(out, string(encodeCertPEM(c.rootOf(c.is))))
}

// rootOf returns the root the issuer chains to.
func (c *CA) rootOf(is *issuer) *x509.Certificate {
	last := is.cert
	if len(is.chain) > 0 {
		last = is.chain[len(is.chain)-1]
	}
	for _, r := range is.roots.roots {
		if r.Equal(last) || last.CheckSignatureFrom(r) == nil {
			return r
		}
	}
	return is.roots.roots[0]
}

// Revoke puts a certificate on the revocation list; renewals presenting it
// fail from then on, in this process and in any CA sharing the data dir.
func (c *CA) Revoke(cert *x509.Certificate, reason string) error {
	return c.revoked.add(Revocation{Serial: cert.SerialNumber.Text(16), RevokedAt: c.cfg.Now().UTC(), NotAfter: cert.NotAfter.UTC(), Reason: reason}, c.cfg.Now())
}

// RevokeSerial puts a serial number (hex, as printed by openssl) on the
// revocation list.
func (c *CA) RevokeSerial(serialHex, reason string) error {
	s, ok := new(big.Int).SetString(strings.TrimPrefix(strings.ReplaceAll(strings.ToLower(serialHex), ":", ""), "0x"), 16)
	if !ok || s.Sign() <= 0 {
		return fmt.Errorf("ca: revoke: %q is not a hex serial number", serialHex)
	}
	return c.revoked.add(Revocation{Serial: s.Text(16), RevokedAt: c.cfg.Now().UTC(), Reason: reason}, c.cfg.Now())
}

// RevokeIdentity revokes every certificate and bootstrap token issued for
// id up to now (to the second): the workload must be onboarded again with a
// new token. Use it when a VM is lost or compromised, since a revoked
// certificate's holder may already have renewed it.
func (c *CA) RevokeIdentity(id spiffe.Identity, reason string) error {
	if err := id.Validate(); err != nil {
		return fmt.Errorf("ca: revoke: %w", err)
	}
	now := c.cfg.Now().UTC()
	return c.revoked.add(Revocation{Identity: id.String(), RevokedAt: now, NotAfter: now.Add(max(c.cfg.MaxTTL, c.cfg.MaxTokenTTL)), Reason: reason}, now)
}

// RevokeToken revokes one bootstrap token by its ID (the jti `vmesh token
// create` prints with the token); it stays revoked until it would have
// expired anyway.
func (c *CA) RevokeToken(id, reason string) error {
	if id == "" {
		return fmt.Errorf("ca: revoke: empty token ID")
	}
	now := c.cfg.Now().UTC()
	return c.revoked.add(Revocation{Token: id, RevokedAt: now, NotAfter: now.Add(c.cfg.MaxTokenTTL), Reason: reason}, now)
}

// ApplyRevocations records the revocations made elsewhere (by another
// replica, through the shared state) that this CA's list lacks, and returns
// how many were new. They take effect at once: renewals, token onboarding
// and the open streams watched by WatchPeer.
func (c *CA) ApplyRevocations(rvs []Revocation) (int, error) {
	return c.revoked.merge(rvs, c.cfg.Now())
}

// RevocationChanges returns a channel closed at the next change of the
// revocation list (a revocation made here, applied from elsewhere, or
// written to the data dir by another process and re-read by Run).
func (c *CA) RevocationChanges() <-chan struct{} { return c.revoked.changes() }

// NewRevocation builds the entry that RevokeSerial, RevokeIdentity or
// RevokeToken would record for req, without recording it: for sharing it
// with other replicas. An identity must be of this CA's trust domain.
func (c *CA) NewRevocation(req RevokeRequest) (Revocation, error) {
	now := c.cfg.Now().UTC()
	return newRevocation(req, now, c.cfg.MaxTTL, c.cfg.MaxTokenTTL, c.TrustDomain())
}

// Revoked lists the revocation entries.
func (c *CA) Revoked() []Revocation { return c.revoked.list() }

// ServerTLSConfig returns the TLS configuration for the secure port (15012):
// a serving certificate issued by this CA for hosts (DNS names or IP
// addresses), reissued automatically at half its lifetime, and client
// certificates requested but not required, so token-only clients can connect
// and mesh workloads can present their certificate. Client certificates are
// verified by the services, not the handshake: call PeerIdentity to
// authenticate a caller. Use it with grpc's credentials.NewTLS.
func (c *CA) ServerTLSConfig(hosts []string) (*tls.Config, error) {
	if len(hosts) == 0 {
		return nil, errors.New("ca: server certificate needs at least one host name or address")
	}
	var dns []string
	var ips []net.IP
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else if h != "" {
			dns = append(dns, h)
		}
	}
	sc := &servingCert{ca: c, dns: dns, ips: ips}
	if _, err := sc.get(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientAuth: tls.RequestClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return sc.get()
		},
		NextProtos: []string{"h2"},
	}, nil
}

// servingCert caches the CA's own serving certificate and reissues it once
// half of its lifetime has passed.
type servingCert struct {
	ca  *CA
	dns []string
	ips []net.IP

	mu      sync.Mutex
	cert    *tls.Certificate
	renewAt time.Time
}

func (s *servingCert) get() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.ca.cfg.Now()
	if s.cert != nil && now.Before(s.renewAt) {
		return s.cert, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(s.ca.cfg.ServerCertTTL),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              slices.Clone(s.dns),
		IPAddresses:           slices.Clone(s.ips),
	}
	leaf, err := s.ca.issue(tmpl, key.Public())
	if err != nil {
		return nil, fmt.Errorf("ca: serving certificate: %w", err)
	}
	chain := [][]byte{leaf.Raw}
	for _, ic := range s.ca.is.chain {
		chain = append(chain, ic.Raw)
	}
	s.cert = &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}
	life := leaf.NotAfter.Sub(now)
	s.renewAt = now.Add(life / 2)
	s.ca.log.Debug("CA serving certificate issued", "serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter, "dns", s.dns, "ips", s.ips)
	return s.cert, nil
}
