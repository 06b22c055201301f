// Package caclient obtains workload certificates from an
// istio.v1.auth.IstioCertificateService (vmesh's CA, or istiod): it makes a
// key and a CSR, calls CreateCertificate with a bootstrap token or over mTLS
// with the current certificate, and writes the result where grpc-go's
// file_watcher certificate provider (or Envoy) reads it.
//
// It depends only on the Istio API and grpc, so per-VM agents and test
// workloads can use it without importing the server-side CA.
package caclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/vmesh/vmesh/internal/atomicfile"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	securityv1alpha1 "istio.io/api/security/v1alpha1"
)

// File names WriteFiles uses, the names Istio uses for file-mounted certificates.
const (
	CertChainFile = "cert-chain.pem" // leaf then intermediates
	KeyFile       = "key.pem"        // mode 0600
	RootCertFile  = "root-cert.pem"  // trusted roots
)

// Request says how to ask for a certificate.
type Request struct {
	// Token is the bootstrap token sent as "authorization: Bearer <token>".
	// Leave it empty when renewing over a connection that presents the
	// current certificate.
	Token string
	// TTL asks for a lifetime; 0 lets the CA pick its default.
	TTL time.Duration
	// SPIFFEID, when set, is put in the CSR as its URI SAN. The CA takes the
	// identity from the credentials anyway and rejects a CSR naming another.
	SPIFFEID string
}

// KeyPair is an issued certificate with its key: the one type the agent's
// certificate code passes around (agents/certs keeps and rotates it). It is
// immutable once published.
type KeyPair struct {
	// ChainPEM is the leaf followed by any intermediates.
	ChainPEM []byte
	// KeyPEM is the PKCS#8 private key.
	KeyPEM []byte
	// RootsPEM is the trust bundle: from Fetch, the root the CA returned
	// last in its chain; an agent holding a fuller bundle (several roots
	// during a rotation) merges its roots in.
	RootsPEM []byte
	// Leaf is the parsed leaf certificate.
	Leaf *x509.Certificate
	// Certificate is the pair ready for a tls.Config.
	Certificate tls.Certificate
	// RenewAt is when to renew it: from Fetch, at half its lifetime, as
	// Istio's agents do (agents/certs adds jitter).
	RenewAt time.Time
	// Generation counts rotations, 1 for the first certificate; 0 from
	// Fetch (agents/certs numbers them).
	Generation int
}

// Fetch makes an ECDSA P-256 key and CSR and calls CreateCertificate on cc.
// The connection must use TLS towards the CA; to renew, dial with the current
// certificate as the client certificate and leave Token empty.
func Fetch(ctx context.Context, cc grpc.ClientConnInterface, req Request) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("caclient: generate key: %w", err)
	}
	tmpl := &x509.CertificateRequest{}
	if req.SPIFFEID != "" {
		u, err := url.Parse(req.SPIFFEID)
		if err != nil {
			return nil, fmt.Errorf("caclient: SPIFFE ID %q: %w", req.SPIFFEID, err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("caclient: create CSR: %w", err)
	}
	if req.Token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+req.Token)
	}
	resp, err := securityv1alpha1.NewIstioCertificateServiceClient(cc).CreateCertificate(ctx, &securityv1alpha1.IstioCertificateRequest{
		Csr:              string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER})),
		ValidityDuration: int64(req.TTL / time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("caclient: CreateCertificate: %w", err)
	}
	chain := resp.GetCertChain()
	if len(chain) < 2 {
		return nil, fmt.Errorf("caclient: CA returned %d certificates, want the leaf and at least the root", len(chain))
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("caclient: encode key: %w", err)
	}
	kp := &KeyPair{KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
	for _, c := range chain[:len(chain)-1] {
		kp.ChainPEM = append(kp.ChainPEM, c...)
	}
	kp.RootsPEM = []byte(chain[len(chain)-1])
	kp.Certificate, err = tls.X509KeyPair(kp.ChainPEM, kp.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("caclient: issued certificate: %w", err)
	}
	kp.Leaf = kp.Certificate.Leaf
	if kp.Leaf == nil {
		if kp.Leaf, err = x509.ParseCertificate(kp.Certificate.Certificate[0]); err != nil {
			return nil, fmt.Errorf("caclient: issued certificate: %w", err)
		}
	}
	if pub, ok := kp.Leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(key.Public()) {
		return nil, errors.New("caclient: the CA returned a certificate for another key")
	}
	kp.RenewAt = kp.Leaf.NotBefore.Add(kp.Leaf.NotAfter.Sub(kp.Leaf.NotBefore) / 2)
	return kp, nil
}

// WriteFiles writes key.pem (mode 0600), cert-chain.pem and root-cert.pem
// (0644) into dir (created with mode 0750 when missing: searchable by its
// group, which the vmesh agent sets to Envoy's before writing here, and by
// no other user), each atomically through a
// temporary file and a rename. These are the files to name in grpc-go's
// file_watcher certificate provider config. The key goes first: the
// provider rejects a key and certificate of different generations and
// keeps its previous pair until the next refresh, so a reader never uses a
// torn pair.
func (k *KeyPair) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("caclient: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{KeyFile, k.KeyPEM, 0o600}, {CertChainFile, k.ChainPEM, 0o644}, {RootCertFile, k.RootsPEM, 0o644}} {
		if err := atomicfile.Write(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return fmt.Errorf("caclient: write %s: %w", f.name, err)
		}
	}
	return nil
}
