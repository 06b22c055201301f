package ca_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/spiffe"
)

func TestSelfSignedRootCreatedOnFirstStartWithKeyMode0600(t *testing.T) {
	c, cfg, _ := newTestCA(t, nil)
	st, err := os.Stat(filepath.Join(cfg.DataDir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if mode := st.Mode().Perm(); mode != 0o600 {
		t.Fatalf("root key mode = %o, want 600", mode)
	}
	roots := c.TrustBundle().Roots()
	if len(roots) != 1 {
		t.Fatalf("%d roots, want 1", len(roots))
	}
	root := roots[0]
	if !root.IsCA || root.CheckSignatureFrom(root) != nil {
		t.Fatal("root is not a self-signed CA")
	}
	pub, ok := root.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Fatalf("root key is %T, want ECDSA P-256", root.PublicKey)
	}
	onDisk, err := os.ReadFile(filepath.Join(cfg.DataDir, ca.RootCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, c.TrustBundle().PEM()) {
		t.Fatal("root-cert.pem differs from the trust bundle")
	}

	// A second start loads the same root instead of making a new one.
	again, err := ca.New(cfg, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !again.TrustBundle().Roots()[0].Equal(root) {
		t.Fatal("second start created a new root")
	}
}

func TestNewRejectsRootWithoutKey(t *testing.T) {
	_, cfg, _ := newTestCA(t, nil)
	if err := os.Remove(filepath.Join(cfg.DataDir, ca.RootKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.New(cfg, quietLogger(), nil); err == nil || !strings.Contains(err.Error(), "root key") {
		t.Fatalf("New with root but no key: err = %v, want a root key error", err)
	}
}

func TestWorkloadCertificateCarriesExactlyOneSPIFFESAN(t *testing.T) {
	clock := newTestClock()
	c, _, _ := newTestCA(t, func(cfg *ca.Config) { cfg.Now = clock.Now })
	csr, key := newCSR(t, []string{testID.String()}, nil)
	leaf, chain, err := c.SignCSR(csr, testID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://cluster.local/ns/shop/sa/cart" {
		t.Fatalf("URIs = %v, want exactly spiffe://cluster.local/ns/shop/sa/cart", leaf.URIs)
	}
	if len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 {
		t.Fatalf("unexpected SANs: %v %v %v", leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses)
	}
	if leaf.IsCA {
		t.Fatal("workload certificate is a CA")
	}
	if !leaf.PublicKey.(*ecdsa.PublicKey).Equal(key.Public()) {
		t.Fatal("certificate is not for the CSR's key")
	}
	if got := leaf.NotAfter.Sub(clock.Now().Truncate(time.Second)); got != 24*time.Hour {
		t.Fatalf("lifetime = %s, want the 24h default", got)
	}
	certs := parseChain(t, chain)
	if len(certs) != 2 || !certs[0].Equal(leaf) || !certs[1].Equal(c.TrustBundle().Roots()[0]) {
		t.Fatalf("chain = %d certs, want leaf then root", len(certs))
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if _, err := c.TrustBundle().Verify(leaf, nil, clock.Now(), usage); err != nil {
			t.Fatalf("verify for usage %v: %v", usage, err)
		}
	}
	id, err := spiffe.FromCertificate(leaf)
	if err != nil || id != testID {
		t.Fatalf("FromCertificate = %v, %v", id, err)
	}
}

func TestTTLDefaultsAndMaximum(t *testing.T) {
	clock := newTestClock()
	c, _, _ := newTestCA(t, func(cfg *ca.Config) {
		cfg.Now = clock.Now
		cfg.DefaultTTL = 2 * time.Hour
		cfg.MaxTTL = 48 * time.Hour
	})
	csr, _ := newCSR(t, nil, nil)
	for _, tc := range []struct {
		name    string
		ttl     time.Duration
		want    time.Duration
		wantErr error
	}{
		{name: "default", ttl: 0, want: 2 * time.Hour},
		{name: "explicit", ttl: 30 * time.Minute, want: 30 * time.Minute},
		{name: "at max", ttl: 48 * time.Hour, want: 48 * time.Hour},
		{name: "over max", ttl: 49 * time.Hour, wantErr: ca.ErrTTL},
		{name: "negative", ttl: -time.Second, wantErr: ca.ErrTTL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaf, _, err := c.SignCSR(csr, testID, tc.ttl)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := leaf.NotAfter.Sub(clock.Now().Truncate(time.Second)); got != tc.want {
				t.Fatalf("lifetime = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ca.Config
		want string
	}{
		{name: "no data dir", cfg: ca.Config{}, want: "data dir"},
		{name: "bad trust domain", cfg: ca.Config{DataDir: t.TempDir(), TrustDomain: "Bad Domain"}, want: "trust domain"},
		{name: "default over max", cfg: ca.Config{DataDir: t.TempDir(), DefaultTTL: 48 * time.Hour, MaxTTL: time.Hour}, want: "exceeds max TTL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ca.New(tc.cfg, quietLogger(), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestCustomTrustDomain(t *testing.T) {
	c, _, _ := newTestCA(t, func(cfg *ca.Config) { cfg.TrustDomain = "prod.example.org" })
	id := c.Identity("shop", "cart")
	csr, _ := newCSR(t, nil, nil)
	leaf, _, err := c.SignCSR(csr, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := leaf.URIs[0].String(); got != "spiffe://prod.example.org/ns/shop/sa/cart" {
		t.Fatalf("SAN = %q", got)
	}
	// An identity from another trust domain is never signed.
	if _, _, err := c.SignCSR(csr, testID, 0); !errors.Is(err, ca.ErrCSRIdentity) {
		t.Fatalf("foreign trust domain: err = %v, want %v", err, ca.ErrCSRIdentity)
	}
}

func TestPluginCACertsWithIntermediates(t *testing.T) {
	root, rootKey := newTestRoot(t, "corp root")
	mid, midKey := newTestIntermediate(t, "corp intermediate", root, rootKey)
	issuing, issuingKey := newTestIntermediate(t, "vmesh issuing CA", mid, midKey)

	dir := t.TempDir()
	write := func(name string, data ...[]byte) {
		if err := os.WriteFile(filepath.Join(dir, name), bytes.Join(data, nil), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(ca.PluginCACertFile, certPEM(issuing))
	write(ca.PluginCAKeyFile, keyPEM(t, issuingKey))
	// Istio's layout: cert-chain.pem holds ca-cert, the intermediates and the root.
	write(ca.PluginCertChainFile, certPEM(issuing), certPEM(mid), certPEM(root))
	write(ca.PluginRootCertFile, certPEM(root))

	dataDir := t.TempDir()
	c, err := ca.New(ca.Config{DataDir: dataDir, CACertsDir: dir}, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, ca.RootKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("plug-in mode created a self-signed root key (stat err %v)", err)
	}
	if roots := c.TrustBundle().Roots(); len(roots) != 1 || !roots[0].Equal(root) {
		t.Fatal("trust bundle is not the plugged-in root")
	}
	csr, _ := newCSR(t, []string{testID.String()}, nil)
	leaf, chain, err := c.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certs := parseChain(t, chain)
	if len(certs) != 4 {
		t.Fatalf("chain has %d certificates, want leaf, issuing CA, intermediate, root", len(certs))
	}
	if !certs[1].Equal(issuing) || !certs[2].Equal(mid) || !certs[3].Equal(root) {
		t.Fatal("chain order is not leaf, issuing CA, intermediate, root")
	}
	if err := leaf.CheckSignatureFrom(issuing); err != nil {
		t.Fatalf("leaf not signed by ca-cert.pem: %v", err)
	}
	// A verifier that only knows the root accepts the chain as sent.
	pool := x509.NewCertPool()
	pool.AddCert(root)
	inter := x509.NewCertPool()
	for _, ic := range certs[1 : len(certs)-1] {
		inter.AddCert(ic)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatalf("chain does not verify to the root: %v", err)
	}
	if n := len(chains[0]); n != 4 {
		t.Fatalf("verified chain length %d, want 4", n)
	}
	// Without the intermediates it must not verify: they are really needed.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Fatal("leaf verified without intermediates")
	}
}

func TestPluginCACertsRejectsBadLayouts(t *testing.T) {
	root, rootKey := newTestRoot(t, "corp root")
	issuing, issuingKey := newTestIntermediate(t, "issuing", root, rootKey)
	otherRoot, _ := newTestRoot(t, "other root")
	_, strayKey := newTestRoot(t, "stray")

	for _, tc := range []struct {
		name  string
		files map[string][]byte
		want  string
	}{
		{
			name: "key does not match",
			files: map[string][]byte{
				ca.PluginCACertFile: certPEM(issuing), ca.PluginCAKeyFile: keyPEM(t, strayKey),
				ca.PluginCertChainFile: certPEM(issuing), ca.PluginRootCertFile: certPEM(root),
			},
			want: "does not match",
		},
		{
			name: "does not chain to root",
			files: map[string][]byte{
				ca.PluginCACertFile: certPEM(issuing), ca.PluginCAKeyFile: keyPEM(t, issuingKey),
				ca.PluginCertChainFile: certPEM(issuing), ca.PluginRootCertFile: certPEM(otherRoot),
			},
			want: "does not chain",
		},
		{
			name: "missing root",
			files: map[string][]byte{
				ca.PluginCACertFile: certPEM(issuing), ca.PluginCAKeyFile: keyPEM(t, issuingKey),
			},
			want: ca.PluginRootCertFile,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ca.New(ca.Config{DataDir: t.TempDir(), CACertsDir: dir}, quietLogger(), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestRootRotationKeepsOldRootTrusted(t *testing.T) {
	c, cfg, _ := newTestCA(t, nil)
	oldRoot := c.TrustBundle().Roots()[0]
	csr, _ := newCSR(t, nil, nil)
	oldLeaf, _, err := c.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	if err := ca.RotateSelfSignedRoot(cfg); err != nil {
		t.Fatal(err)
	}
	rotated, err := ca.New(cfg, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := rotated.TrustBundle().Roots()
	if len(roots) != 2 || roots[0].Equal(oldRoot) || !roots[1].Equal(oldRoot) {
		t.Fatalf("after rotation the bundle holds %d roots; want the new root first and the old one second", len(roots))
	}
	newLeaf, chain, err := rotated.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := newLeaf.CheckSignatureFrom(roots[0]); err != nil {
		t.Fatalf("new certificate not signed by the new root: %v", err)
	}
	if last := parseChain(t, chain); !last[len(last)-1].Equal(roots[0]) {
		t.Fatal("chain does not end with the new root")
	}
	// A workload still holding a certificate from the old root can renew.
	id, err := rotated.VerifyPeerCertificates([]*x509.Certificate{oldLeaf})
	if err != nil || id != testID {
		t.Fatalf("old-root certificate after rotation: %v, %v", id, err)
	}
	// And both roots are in the PEM bundle handed to workloads.
	if n := bytes.Count(rotated.TrustBundle().PEM(), []byte("BEGIN CERTIFICATE")); n != 2 {
		t.Fatalf("bundle PEM has %d certificates, want 2", n)
	}
}

func TestTrustBundleDropsDuplicatesAndRejectsLeaves(t *testing.T) {
	r1, _ := newTestRoot(t, "r1")
	r2, _ := newTestRoot(t, "r2")
	b, err := ca.NewTrustBundle(r1, r2, r1)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Roots(); len(got) != 2 || !got[0].Equal(r1) || !got[1].Equal(r2) {
		t.Fatalf("roots = %d, want r1, r2", len(got))
	}
	c, _, _ := newTestCA(t, nil)
	csr, _ := newCSR(t, nil, nil)
	leaf, _, err := c.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.NewTrustBundle(leaf); err == nil {
		t.Fatal("a leaf certificate was accepted as a root")
	}
	if _, err := ca.NewTrustBundle(); err == nil {
		t.Fatal("empty bundle accepted")
	}
}

func TestServerCertificateIsReissuedAtHalfLife(t *testing.T) {
	clock := newTestClock()
	c, _, _ := newTestCA(t, func(cfg *ca.Config) {
		cfg.Now = clock.Now
		cfg.ServerCertTTL = time.Hour
	})
	tlsCfg, err := c.ServerTLSConfig([]string{"127.0.0.1", "vmesh.example"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := tlsCfg.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Leaf; len(got.IPAddresses) != 1 || !got.IPAddresses[0].Equal([]byte{127, 0, 0, 1}) || len(got.DNSNames) != 1 || got.DNSNames[0] != "vmesh.example" {
		t.Fatalf("serving SANs = %v %v", got.IPAddresses, got.DNSNames)
	}
	if _, err := c.TrustBundle().Verify(first.Leaf, nil, clock.Now(), x509.ExtKeyUsageServerAuth); err != nil {
		t.Fatalf("serving certificate not issued by the CA: %v", err)
	}
	clock.Add(20 * time.Minute)
	same, _ := tlsCfg.GetCertificate(nil)
	if same != first {
		t.Fatal("serving certificate reissued before half its lifetime")
	}
	clock.Add(15 * time.Minute)
	next, _ := tlsCfg.GetCertificate(nil)
	if next == first || next.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Fatal("serving certificate not reissued after half its lifetime")
	}
	if !next.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Fatal("reissued certificate does not live longer")
	}
	if tlsCfg.ClientAuth.String() != "RequestClientCert" {
		t.Fatalf("ClientAuth = %v, want RequestClientCert (client certificates optional)", tlsCfg.ClientAuth)
	}
	if _, err := c.ServerTLSConfig(nil); err == nil {
		t.Fatal("ServerTLSConfig with no hosts accepted")
	}
}

func TestConcurrentFirstStartsAgreeOnOneRoot(t *testing.T) {
	cfg := ca.Config{DataDir: filepath.Join(t.TempDir(), "data")}
	const n = 4
	cas := make([]*ca.CA, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { cas[i], errs[i] = ca.New(cfg, quietLogger(), nil) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	for i := 1; i < n; i++ {
		if !cas[i].TrustBundle().Roots()[0].Equal(cas[0].TrustBundle().Roots()[0]) {
			t.Fatalf("start %d uses a different root", i)
		}
	}
	// Tokens from one verify at another: they share the key, not just the certificate.
	tok, _, err := cas[1].CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cas[3].VerifyToken(tok); err != nil {
		t.Fatalf("token from a concurrent start rejected: %v", err)
	}
}

func TestLooseRootKeyModeIsReported(t *testing.T) {
	_, cfg, _ := newTestCA(t, nil)
	if err := os.Chmod(filepath.Join(cfg.DataDir, ca.RootKeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := ca.New(cfg, slog.New(slog.NewTextHandler(&buf, nil)), nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "readable by other users") || !strings.Contains(buf.String(), "0644") {
		t.Fatalf("no warning about the 0644 key:\n%s", buf.String())
	}
}

func TestConcurrentSigningAndRevocation(t *testing.T) {
	c, _, _ := newTestCA(t, nil)
	csr, _ := newCSR(t, nil, nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				leaf, _, err := c.SignCSR(csr, testID, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if err := c.Revoke(leaf, ""); err != nil {
					t.Error(err)
					return
				}
				if _, err := c.VerifyPeerCertificates([]*x509.Certificate{leaf}); !errors.Is(err, ca.ErrCertRevoked) {
					t.Errorf("just-revoked certificate: err = %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := len(c.Revoked()); n != 40 {
		t.Fatalf("%d revocations recorded, want 40", n)
	}
}

func TestStatus(t *testing.T) {
	c, _, _ := newTestCA(t, func(cfg *ca.Config) { cfg.TrustDomain = "prod.example" })
	csr, _ := newCSR(t, nil, nil)
	leaf, _, err := c.SignCSR(csr, c.Identity("a", "b"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Revoke(leaf, ""); err != nil {
		t.Fatal(err)
	}
	s := c.Status()
	if s.TrustDomain != "prod.example" || s.Mode != "self-signed" || len(s.Roots) != 1 || s.Revoked != 1 || s.DefaultTTL != "24h0m0s" {
		t.Fatalf("Status = %+v", s)
	}
	if !strings.Contains(s.Issuer, "prod.example") || s.Roots[0].Serial != c.TrustBundle().Roots()[0].SerialNumber.Text(16) {
		t.Fatalf("Status = %+v", s)
	}
}

// A plug-in intermediate made a moment ago: leaves are backdated by a
// minute, but never before their issuer, so a verifier that checks the
// chain at the leaf's start (the agent does) accepts them, and revoking the
// identity still refuses them.
func TestLeafNeverStartsBeforeItsIssuer(t *testing.T) {
	root, rootKey := newTestRoot(t, "corp root")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	fresh := time.Now().Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: "fresh issuing CA"},
		NotBefore: fresh, NotAfter: fresh.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root, key.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	issuing, _ := x509.ParseCertificate(der)
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		ca.PluginCACertFile: certPEM(issuing), ca.PluginCAKeyFile: keyPEM(t, key),
		ca.PluginCertChainFile: append(certPEM(issuing), certPEM(root)...), ca.PluginRootCertFile: certPEM(root),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := ca.New(ca.Config{DataDir: t.TempDir(), CACertsDir: dir}, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	csr, _ := newCSR(t, []string{testID.String()}, nil)
	leaf, chain, err := c.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.NotBefore.Before(issuing.NotBefore) {
		t.Fatalf("leaf starts %s, before its issuer (%s)", leaf.NotBefore, issuing.NotBefore)
	}
	pool := x509.NewCertPool()
	pool.AddCert(root)
	inter := x509.NewCertPool()
	inter.AddCert(parseChain(t, chain)[1])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: leaf.NotBefore.Add(time.Second), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("the chain does not verify at the leaf's start: %v", err)
	}
	// Revoking the identity refuses the clamped leaf: its issue time is
	// taken as its earliest possible one.
	if _, err := c.VerifyPeerCertificates([]*x509.Certificate{leaf, issuing}); err != nil {
		t.Fatalf("the leaf is refused before any revocation: %v", err)
	}
	if err := c.RevokeIdentity(testID, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.VerifyPeerCertificates([]*x509.Certificate{leaf, issuing}); err == nil {
		t.Error("a leaf issued before its identity was revoked is still accepted")
	}
}
