package mcpsource_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/filestore/mcpsource"
	"github.com/vmesh/vmesh/internal/mcptest"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
)

// testPKI is a root and leaf certificates it signed, written as PEM files.
type testPKI struct {
	dir  string
	root *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(der)
	p := &testPKI{dir: t.TempDir(), root: root, key: key, pool: x509.NewCertPool()}
	p.pool.AddCert(root)
	p.write(t, "root.pem", "CERTIFICATE", der)
	return p
}

func (p *testPKI) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// leaf issues a certificate for dns names; it returns the tls pair and
// the cert and key files.
func (p *testPKI) leaf(t *testing.T, name string, dns ...string) (tls.Certificate, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.root, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", kder)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certFile, keyFile
}

// TestMutualTLS: tlsSettings MUTUAL verifies the server (caCertificates,
// sni, subjectAltNames) and presents the client certificate the server
// requires; a server whose certificate names none of subjectAltNames is
// refused and the source says why.
func TestMutualTLS(t *testing.T) {
	pki := newPKI(t)
	serverCert, _, _ := pki.leaf(t, "server", "istiod.istio-system.svc")
	_, clientCert, clientKey := pki.leaf(t, "client", "vmesh.istio-system.svc")
	srv := mcptest.Start(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	})))
	settings := &networking.ClientTLSSettings{
		Mode: networking.ClientTLSSettings_MUTUAL, CaCertificates: filepath.Join(pki.dir, "root.pem"),
		ClientCertificate: clientCert, PrivateKey: clientKey, Sni: "istiod.istio-system.svc",
		SubjectAltNames: []string{"istiod.istio-system.svc"}, CredentialName: "istiod-client", InsecureSkipVerify: wrapperspb.Bool(true),
	}
	creds, warns, err := mcpsource.TLSSettings("configSources[0].tlsSettings", settings)
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, w := range warns {
		if w.Code != store.CodeMeshConfigNotApplied {
			t.Errorf("warning %v has no VM1011", w)
		}
		fields = append(fields, w.Field)
	}
	if got := strings.Join(fields, ","); got != "configSources[0].tlsSettings.credentialName,configSources[0].tlsSettings.insecureSkipVerify" {
		t.Errorf("warnings on %s", got)
	}
	run := func(creds credentials.TransportCredentials) (*mcpsource.Source, *store.Store) {
		st := store.NewStore()
		src, err := mcpsource.New(mcpsource.Config{Address: "xds://" + srv.Addr, Credentials: creds}, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = src.Run(ctx) }()
		t.Cleanup(func() { cancel(); wg.Wait() })
		return src, st
	}
	run(creds)
	subscriptions(t, srv, false) // the handshake passed both ways
	sotw(t, srv, "1", vs(t, "echo", "r1", "echo-v2.mesh.internal"))

	settings.SubjectAltNames = []string{"other.example"}
	wrong, _, err := mcpsource.TLSSettings("configSources[0].tlsSettings", settings)
	if err != nil {
		t.Fatal(err)
	}
	src, st := run(wrong)
	xdstest.Eventually(t, "the refused server reported", func() bool {
		return strings.Contains(sourceStatus(st, src.Name()).Connection, "subjectAltNames")
	})

	if _, _, err := mcpsource.TLSSettings("f", &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}); err == nil {
		t.Error("ISTIO_MUTUAL accepted")
	}
	if _, _, err := mcpsource.TLSSettings("f", &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_MUTUAL}); err == nil {
		t.Error("MUTUAL without a certificate accepted")
	}
}
