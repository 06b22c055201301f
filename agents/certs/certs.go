// Package certs keeps a VM's workload certificate: it obtains the first one
// from the control plane's CA (Istio's IstioCertificateService over TLS) with
// the bootstrap token, renews it over mTLS with the current certificate at
// half its lifetime plus up to 1 % jitter, writes cert-chain.pem, key.pem and
// root-cert.pem atomically for grpc-go's file_watcher certificate provider,
// and tells subscribers (the SDS server) about every rotation.
//
// It depends only on the Istio API and grpc, never on the server-side CA.
package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/vmesh/vmesh/internal/pemcert"
	"github.com/vmesh/vmesh/internal/retry"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/vmesh/vmesh/agents/caclient"
	"github.com/vmesh/vmesh/agents/internal/failover"
	"github.com/vmesh/vmesh/internal/refusal"
)

// File names written into Config.OutDir, the names Istio uses for
// file-mounted workload certificates.
const (
	CertChainFile = caclient.CertChainFile // leaf then intermediates
	KeyFile       = caclient.KeyFile       // PKCS#8, mode 0600
	RootCertFile  = caclient.RootCertFile  // trusted roots
)

// Defaults for Config.
const (
	DefaultJitter   = 0.01
	DefaultRetryMin = 500 * time.Millisecond
	DefaultRetryMax = 30 * time.Second
	DefaultTimeout  = 10 * time.Second
)

// Config says where to get certificates and where to put them.
type Config struct {
	// Address is host:port of the CA (the bundle's discovery address).
	Address string
	// Failover are more replicas of the CA (host:port), tried in order
	// after Address; each is verified against its own host unless
	// ServerName is set.
	Failover []string
	// ServerName verifies the CA's serving certificate; default: the host
	// part of Address.
	ServerName string
	// RootsPEM is the trust bundle the CA's certificate is verified with;
	// it is also written, together with the root the CA returns, as
	// root-cert.pem.
	RootsPEM []byte
	// Token is the bootstrap token used for the first certificate (and
	// again if the current certificate expired before it could be renewed).
	Token string
	// TTL is the requested lifetime; 0 lets the CA choose.
	TTL time.Duration
	// OutDir receives the certificate files; empty means none are written.
	OutDir string
	// Jitter is the largest extra delay before a renewal, as a fraction of
	// the lifetime; default 0.01.
	Jitter float64
	// RetryMin and RetryMax bound the exponential backoff after a failed
	// request.
	RetryMin, RetryMax time.Duration
	// Timeout bounds one request to the CA.
	Timeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() error {
	host, _, err := net.SplitHostPort(c.Address)
	if err != nil {
		return fmt.Errorf("certs: CA address %q: %w", c.Address, err)
	}
	if c.ServerName == "" && len(c.Failover) == 0 {
		c.ServerName = host
	}
	if c.Jitter == 0 {
		c.Jitter = DefaultJitter
	}
	if c.Jitter < 0 || c.Jitter > 0.5 {
		return fmt.Errorf("certs: jitter %v out of [0, 0.5]", c.Jitter)
	}
	if c.RetryMin <= 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(DefaultRetryMax, c.RetryMin)
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.TTL < 0 {
		return fmt.Errorf("certs: negative TTL %s", c.TTL)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// KeyPair is one issued certificate with its key (caclient.KeyPair, with
// the bundle's roots, its generation and its jittered renewal time). It is
// immutable.
type KeyPair = caclient.KeyPair

// Manager obtains and rotates the workload certificate. Create it with New
// and start it with Run.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	met     *metrics
	roots   *x509.CertPool
	jitterF func() float64

	mu      sync.Mutex
	current *KeyPair
	subs    map[chan struct{}]struct{}
	ready   chan struct{}
	// renew wakes Run to renew before the renewal time (Renew).
	renew chan struct{}
}

// New checks cfg and returns a Manager. Metrics are registered on reg when
// it is not nil.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Manager, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cfg.RootsPEM) {
		return nil, errors.New("certs: no root certificate in the trust bundle")
	}
	if cfg.Token == "" {
		return nil, errors.New("certs: no bootstrap token")
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Manager{
		cfg:     cfg,
		log:     logger,
		met:     newMetrics(reg),
		roots:   roots,
		jitterF: mrand.Float64,
		subs:    map[chan struct{}]struct{}{},
		ready:   make(chan struct{}),
		renew:   make(chan struct{}, 1),
	}, nil
}

// Current returns the current certificate, or nil before the first one.
func (m *Manager) Current() *KeyPair {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.current
}

// Ready is closed once the first certificate is in place (and written).
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// Subscribe returns a channel that receives a signal after every rotation
// (coalesced: read Current for the latest pair) and a func that ends the
// subscription.
func (m *Manager) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	if m.current != nil {
		ch <- struct{}{}
	}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.mu.Unlock()
	}
}

// Renew makes Run ask for a new certificate now instead of at the renewal
// time: the agent calls it when the control plane stops accepting the
// current one (revoked, say). If the CA refuses the renewal for good, Run
// returns its *refusal.PermanentError. Calls while a renewal is pending
// coalesce.
func (m *Manager) Renew() {
	select {
	case m.renew <- struct{}{}:
	default:
	}
}

// ClientTLSConfig returns a TLS client configuration towards the control
// plane: it verifies the server with the trust bundle and presents the
// certificate current at handshake time.
func (m *Manager) ClientTLSConfig() *tls.Config {
	return &tls.Config{
		RootCAs:    m.roots,
		ServerName: m.cfg.ServerName,
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if kp := m.Current(); kp != nil {
				return &kp.Certificate, nil
			}
			return &tls.Certificate{}, nil
		},
	}
}

// Run obtains the first certificate, then renews it until ctx is done. It
// retries failed requests with backoff and returns nil when ctx ends, or a
// *refusal.PermanentError when the CA refused the request for good (a
// revoked, expired or foreign token, say): retrying could not help.
func (m *Manager) Run(ctx context.Context) error {
	backoff := retry.New(m.cfg.RetryMin, m.cfg.RetryMax)
	for {
		var wait time.Duration
		kp, err := m.fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if perr := refusal.Permanent("certificate request", err); perr != nil {
				return perr
			}
			wait = backoff.Next()
			m.log.Warn("certificate request failed", "ca", m.cfg.Address, "retry_in", wait, "error", err)
		} else {
			backoff.Reset()
			if err := m.install(kp); err != nil {
				// Files could not be written: keep the pair in memory (SDS
				// still works) and try again soon.
				m.log.Error("installing certificate", "error", err)
			}
			wait = kp.RenewAt.Sub(m.cfg.Now())
			m.log.Info("workload certificate installed", "generation", kp.Generation,
				"serial", kp.Leaf.SerialNumber.Text(16), "not_after", kp.Leaf.NotAfter, "renew_at", kp.RenewAt)
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		case <-m.renew:
			t.Stop()
			m.log.Info("renewing the workload certificate before its renewal time, as asked")
		}
	}
}

// fetch asks the CA for a new certificate: over mTLS with the current one
// while it is valid, with the bootstrap token otherwise.
func (m *Manager) fetch(ctx context.Context) (*KeyPair, error) {
	cur := m.Current()
	now := m.cfg.Now()
	useCert := cur != nil && now.Before(cur.Leaf.NotAfter)
	auth := "token"
	tlsCfg := &tls.Config{RootCAs: m.roots, ServerName: m.cfg.ServerName, MinVersion: tls.VersionTLS12}
	if useCert {
		auth = "certificate"
		tlsCfg.Certificates = []tls.Certificate{cur.Certificate}
	}
	kp, err := m.request(ctx, tlsCfg, useCert)
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.met.fetches.WithLabelValues(auth, result).Inc()
	if err != nil {
		return nil, fmt.Errorf("certs: %s-authenticated request to %s: %w", auth, m.cfg.Address, err)
	}
	start := kp.Leaf.NotBefore
	if now.After(start) {
		// The CA backdates NotBefore for clock skew; count the lifetime from
		// when we asked so a short-lived certificate is not renewed at once.
		start = now
	}
	life := kp.Leaf.NotAfter.Sub(start)
	kp.RenewAt = start.Add(life/2 + time.Duration(m.cfg.Jitter*m.jitterF()*float64(life)))
	if cur != nil {
		kp.Generation = cur.Generation + 1
	} else {
		kp.Generation = 1
	}
	return kp, nil
}

func (m *Manager) request(ctx context.Context, tlsCfg *tls.Config, useCert bool) (*KeyPair, error) {
	// A fresh connection per request: a long-lived one would keep presenting
	// the certificate of its first handshake.
	conn, err := failover.Dial(append([]string{m.cfg.Address}, m.cfg.Failover...), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	req := caclient.Request{TTL: m.cfg.TTL}
	if !useCert {
		req.Token = m.cfg.Token
	}
	issued, err := caclient.Fetch(ctx, conn, req)
	if err != nil {
		return nil, err
	}
	return m.keyPair(issued)
}

// keyPair adds the bundle's roots to an issued pair and checks that it
// chains to them.
func (m *Manager) keyPair(issued *caclient.KeyPair) (*KeyPair, error) {
	roots, err := pemcert.Merge(m.cfg.RootsPEM, issued.RootsPEM)
	if err != nil {
		return nil, fmt.Errorf("trust bundle and the CA's root: %w", err)
	}
	kp := &KeyPair{KeyPEM: issued.KeyPEM, ChainPEM: issued.ChainPEM, Certificate: issued.Certificate, Leaf: issued.Leaf, RootsPEM: roots}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(kp.RootsPEM)
	inter := x509.NewCertPool()
	for _, c := range kp.Certificate.Certificate[1:] {
		if ic, err := x509.ParseCertificate(c); err == nil {
			inter.AddCert(ic)
		}
	}
	if _, err := kp.Leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: kp.Leaf.NotBefore.Add(time.Second), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("issued certificate does not chain to the trust bundle: %w", err)
	}
	return kp, nil
}

// install writes the files, then publishes the pair to Current and
// subscribers.
func (m *Manager) install(kp *KeyPair) error {
	var err error
	if m.cfg.OutDir != "" {
		err = kp.WriteFiles(m.cfg.OutDir)
	}
	m.met.expiry.Set(float64(kp.Leaf.NotAfter.Unix()))
	m.mu.Lock()
	first := m.current == nil
	m.current = kp
	for ch := range m.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	m.mu.Unlock()
	if first {
		close(m.ready)
	}
	return err
}
