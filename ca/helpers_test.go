package ca_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/pemcert"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/spiffe"
)

// testClock is a settable clock shared by a test and the CA under test.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Now()} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestCA starts a self-signed CA in a fresh data dir; edit adjusts the config.
func newTestCA(t testing.TB, edit func(*ca.Config)) (*ca.CA, ca.Config, *prometheus.Registry) {
	t.Helper()
	cfg := ca.Config{DataDir: t.TempDir()}
	if edit != nil {
		edit(&cfg)
	}
	reg := prometheus.NewRegistry()
	c, err := ca.New(cfg, quietLogger(), reg)
	if err != nil {
		t.Fatalf("ca.New: %v", err)
	}
	return c, cfg, reg
}

// newCSR makes a P-256 key and a PEM CSR naming the given URIs and DNS names.
func newCSR(t testing.TB, uris []string, dns []string) ([]byte, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return csrFor(t, key, uris, dns), key
}

func csrFor(t testing.TB, key crypto.Signer, uris []string, dns []string) []byte {
	t.Helper()
	tmpl := &x509.CertificateRequest{DNSNames: dns}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func parseChain(t testing.TB, chain []string) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for i, p := range chain {
		certs, err := pemcert.Parse([]byte(p))
		if err != nil {
			t.Fatalf("chain[%d]: %v", i, err)
		}
		if len(certs) != 1 {
			t.Fatalf("chain[%d] holds %d certificates, want 1", i, len(certs))
		}
		out = append(out, certs[0])
	}
	return out
}

// newTestRoot makes a self-signed CA certificate and key.
func newTestRoot(t testing.TB, cn string) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * 365 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

// newTestIntermediate makes a CA certificate signed by parent.
func newTestIntermediate(t testing.TB, cn string, parent *x509.Certificate, parentKey crypto.Signer) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * 300 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 100))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func keyPEM(t testing.TB, k crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

var testID = spiffe.Identity{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "cart"}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
