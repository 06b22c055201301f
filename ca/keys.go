package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/vmesh/vmesh/internal/atomicfile"
	"github.com/vmesh/vmesh/internal/pemcert"
)

// File names in the data directory (self-signed mode) and in an Istio
// plug-in cacerts directory.
const (
	RootCertFile        = "root-cert.pem"        // self-signed root, data dir
	RootKeyFile         = "root-key.pem"         // its key, mode 0600, data dir
	AdditionalRootsFile = "additional-roots.pem" // extra trusted roots (rotation), data dir
	RevocationFile      = "revoked.json"         // revocation list, data dir

	PluginCACertFile    = "ca-cert.pem"    // issuing certificate
	PluginCAKeyFile     = "ca-key.pem"     // its key
	PluginCertChainFile = "cert-chain.pem" // issuing certificate and intermediates (may end with the root)
	PluginRootCertFile  = "root-cert.pem"  // one or more roots
)

// issuer is the key material that signs: the issuing certificate and key, the
// intermediates between it and the root, and the trusted roots.
type issuer struct {
	cert  *x509.Certificate
	key   crypto.Signer
	chain []*x509.Certificate // issuing cert first, then intermediates; no root. Empty when cert is the root.
	roots *TrustBundle
}

// loadIssuer reads the plug-in cacerts directory when set, else the
// self-signed root in the data directory, creating it on first start.
func loadIssuer(cfg Config, now time.Time, log *slog.Logger) (*issuer, bool, error) {
	extra, err := readAdditionalRoots(cfg.DataDir)
	if err != nil {
		return nil, false, err
	}
	if cfg.CACertsDir != "" {
		is, err := loadPlugin(cfg.CACertsDir, extra, now)
		return is, false, err
	}
	return loadOrCreateSelfSigned(cfg, extra, now, log)
}

func readAdditionalRoots(dataDir string) ([]*x509.Certificate, error) {
	path := filepath.Join(dataDir, AdditionalRootsFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read additional roots: %w", err)
	}
	certs, err := pemcert.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return certs, nil
}

func loadPlugin(dir string, extra []*x509.Certificate, now time.Time) (*issuer, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("plug-in CA: %w", err)
		}
		return b, nil
	}
	certPEM, err := read(PluginCACertFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := read(PluginCAKeyFile)
	if err != nil {
		return nil, err
	}
	rootPEM, err := read(PluginRootCertFile)
	if err != nil {
		return nil, err
	}
	chainPEM, err := os.ReadFile(filepath.Join(dir, PluginCertChainFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("plug-in CA: %w", err)
	}

	certs, err := pemcert.Parse(certPEM)
	if err != nil {
		return nil, fmt.Errorf("plug-in CA %s: %w", filepath.Join(dir, PluginCACertFile), err)
	}
	cert := certs[0]
	key, err := parsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("plug-in CA %s: %w", filepath.Join(dir, PluginCAKeyFile), err)
	}
	roots, err := pemcert.Parse(rootPEM)
	if err != nil {
		return nil, fmt.Errorf("plug-in CA %s: %w", filepath.Join(dir, PluginRootCertFile), err)
	}
	var chain []*x509.Certificate
	if len(chainPEM) > 0 {
		if chain, err = pemcert.Parse(chainPEM); err != nil {
			return nil, fmt.Errorf("plug-in CA %s: %w", filepath.Join(dir, PluginCertChainFile), err)
		}
	}
	bundle, err := NewTrustBundle(append(roots, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("plug-in CA: %w", err)
	}
	is := &issuer{cert: cert, key: key, roots: bundle}
	if !isSelfSigned(cert) {
		is.chain = append(is.chain, cert)
	}
	for _, c := range chain {
		if c.Equal(cert) || isSelfSigned(c) {
			continue // cert-chain.pem often repeats ca-cert and ends with the root
		}
		is.chain = append(is.chain, c)
	}
	if err := is.check(now); err != nil {
		return nil, fmt.Errorf("plug-in CA in %s: %w", dir, err)
	}
	return is, nil
}

// check verifies the issuer is usable: a CA allowed to sign certificates,
// whose key matches, and which chains up to a trusted root.
func (is *issuer) check(now time.Time) error {
	if !is.cert.IsCA {
		return fmt.Errorf("issuing certificate %q is not a CA (basicConstraints CA:FALSE)", is.cert.Subject)
	}
	if is.cert.KeyUsage != 0 && is.cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("issuing certificate %q lacks the certSign key usage", is.cert.Subject)
	}
	if !publicKeysEqual(is.cert.PublicKey, is.key.Public()) {
		return fmt.Errorf("issuing key does not match the public key of certificate %q", is.cert.Subject)
	}
	if now.After(is.cert.NotAfter) {
		return fmt.Errorf("issuing certificate %q expired at %s", is.cert.Subject, is.cert.NotAfter.Format(time.RFC3339))
	}
	var inter []*x509.Certificate
	if len(is.chain) > 1 {
		inter = is.chain[1:]
	}
	if _, err := is.roots.Verify(is.cert, inter, now, x509.ExtKeyUsageAny); err != nil {
		return fmt.Errorf("issuing certificate %q does not chain to a trusted root: %w", is.cert.Subject, err)
	}
	return nil
}

func loadOrCreateSelfSigned(cfg Config, extra []*x509.Certificate, now time.Time, log *slog.Logger) (*issuer, bool, error) {
	certPath := filepath.Join(cfg.DataDir, RootCertFile)
	keyPath := filepath.Join(cfg.DataDir, RootKeyFile)
	var certPEM, keyPEM []byte
	created := false
	// Another process (vmesh serve and vmesh token create share the data dir)
	// may be creating the root right now: wait for it to finish.
	for attempt := 0; ; attempt++ {
		var cerr, kerr error
		certPEM, cerr = os.ReadFile(certPath)
		keyPEM, kerr = os.ReadFile(keyPath)
		if cerr == nil && kerr == nil {
			break
		}
		bothMissing := errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist)
		if bothMissing && cfg.NoCreate {
			return nil, false, fmt.Errorf("no CA root in %s (vmesh serve creates it on first start; point --data-dir at its data directory)", cfg.DataDir)
		}
		if bothMissing {
			var err error
			certPEM, keyPEM, err = createRoot(cfg, now)
			if err == nil {
				created = true
				break
			}
			if !errors.Is(err, fs.ErrExist) {
				return nil, false, err
			}
		}
		if attempt >= 40 {
			if cerr != nil {
				return nil, false, fmt.Errorf("read CA root: %w", cerr)
			}
			return nil, false, fmt.Errorf("read CA root key: %w", kerr)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if st, err := os.Stat(keyPath); err == nil && st.Mode().Perm()&0o077 != 0 {
		log.Warn("CA root key is readable by other users; chmod 600 it", "file", keyPath, "mode", fmt.Sprintf("%#o", st.Mode().Perm()))
	}
	certs, err := pemcert.Parse(certPEM)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", certPath, err)
	}
	key, err := parsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", keyPath, err)
	}
	bundle, err := NewTrustBundle(append([]*x509.Certificate{certs[0]}, extra...)...)
	if err != nil {
		return nil, false, err
	}
	is := &issuer{cert: certs[0], key: key, roots: bundle}
	if err := is.check(now); err != nil {
		return nil, false, fmt.Errorf("CA root in %s: %w", cfg.DataDir, err)
	}
	return is, created, nil
}

// createRoot makes a self-signed ECDSA P-256 root and writes it to the data
// directory: the key with mode 0600 (created exclusively), then the
// certificate.
func createRoot(cfg Config, now time.Time) (certPEM, keyPEM []byte, err error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create CA data dir: %w", err)
	}
	certPEM, keyPEM, err = newRootPEM(cfg.TrustDomain, now, cfg.RootTTL)
	if err != nil {
		return nil, nil, err
	}
	if err := writeFileExclusive(filepath.Join(cfg.DataDir, RootKeyFile), keyPEM, 0o600); err != nil {
		return nil, nil, fmt.Errorf("write CA root key: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(cfg.DataDir, RootCertFile), certPEM, 0o644); err != nil {
		return nil, nil, fmt.Errorf("write CA root: %w", err)
	}
	return certPEM, keyPEM, nil
}

func newRootPEM(trustDomain string, now time.Time, ttl time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{trustDomain}, CommonName: "vmesh root CA"},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(ttl),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-sign CA root: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// RotateSelfSignedRoot replaces the self-signed root in dataDir with a new
// one and appends the old root to additional-roots.pem, so certificates it
// issued keep verifying until they expire. Running CAs pick the new root up
// when restarted. It refuses to run on a data dir without a root.
func RotateSelfSignedRoot(cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	oldPEM, err := os.ReadFile(filepath.Join(cfg.DataDir, RootCertFile))
	if err != nil {
		return fmt.Errorf("rotate CA root: %w", err)
	}
	if _, err := pemcert.Parse(oldPEM); err != nil {
		return fmt.Errorf("rotate CA root: current root: %w", err)
	}
	extraPath := filepath.Join(cfg.DataDir, AdditionalRootsFile)
	extra, err := os.ReadFile(extraPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rotate CA root: %w", err)
	}
	certPEM, keyPEM, err := newRootPEM(cfg.TrustDomain, cfg.Now(), cfg.RootTTL)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(extraPath, append(extra, oldPEM...), 0o644); err != nil {
		return fmt.Errorf("rotate CA root: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(cfg.DataDir, RootKeyFile), keyPEM, 0o600); err != nil {
		return fmt.Errorf("rotate CA root: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(cfg.DataDir, RootCertFile), certPEM, 0o644); err != nil {
		return fmt.Errorf("rotate CA root: %w", err)
	}
	return nil
}

func writeFileExclusive(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func parsePrivateKeyPEM(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM private key found")
	}
	var (
		k   any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unexpected PEM block %q, want a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case *rsa.PrivateKey:
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	}
	return nil, fmt.Errorf("unsupported private key type %T", k)
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

func isSelfSigned(c *x509.Certificate) bool {
	return c.IsCA && bytes.Equal(c.RawSubject, c.RawIssuer) && c.CheckSignatureFrom(c) == nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}
