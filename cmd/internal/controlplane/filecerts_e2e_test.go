package controlplane_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/filecert"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/credentials"
)

// TestCertificateFilesThroughAgent: certificate files on a gateway VM, end
// to end through the control plane and a real agent. A Gateway's MUTUAL
// server names serverCertificate, privateKey and caCertificates in a
// directory the agent allows (--cert-file-dirs), another server files
// outside it. The router's listener, fetched through the agent's xDS
// socket as Envoy does, names Istio's SDS secrets file-cert:CERT~KEY and
// file-root:CA for them; Envoy's SDS stream to the agent gets the files'
// contents under those names; rewriting the files re-sends the secret
// with the new contents, no restart. The files outside the allowed
// directory are refused: their secret is never served (that chain has no
// certificate: it fails closed), and the Gateway has VM1019 at its file,
// line and field with the agent's reason, listed for the router on
// /debug/credentials.
func TestCertificateFilesThroughAgent(t *testing.T) {
	allowed, outside := filepath.Join(t.TempDir(), "certs"), filepath.Join(t.TempDir(), "elsewhere")
	for _, d := range []string{allowed, outside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cert1, key1 := writeCertFiles(t, allowed, "ledger.example.com")
	writeFile(t, filepath.Join(allowed, "ca.crt"), cert1) // the self-signed certificate is its own root
	writeCertFiles(t, outside, "outside.example.com")
	cfg := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: edge}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [ledger.example.com]
    tls: {mode: MUTUAL, serverCertificate: %[1]s/tls.crt, privateKey: %[1]s/tls.key, caCertificates: %[1]s/ca.crt}
  - port: {number: 443, name: https-outside, protocol: HTTPS}
    hosts: [outside.example.com]
    tls: {mode: SIMPLE, serverCertificate: %[2]s/tls.crt, privateKey: %[2]s/tls.key}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ledger-in, namespace: edge}
spec:
  hosts: [ledger.example.com, outside.example.com]
  gateways: [ingress]
  http:
  - route: [{destination: {host: ledger.fin.internal, port: {number: 7070}}}]
`, allowed, outside)
	certName := filecert.CertName(allowed+"/tls.crt", allowed+"/tls.key")
	rootName := filecert.RootName(allowed + "/ca.crt")
	outsideName := filecert.CertName(outside+"/tls.crt", outside+"/tls.key")

	cp, _, _ := ledgerPlane(t, cfg)
	a, envoyNode, ctx := gatewayAgent(t, cp, t.TempDir(), []string{allowed})
	router := envoyNode.GetId()

	// Envoy's ADS stream through the agent's xDS socket: the router's
	// listener names the files' SDS secrets.
	chains := map[string][]string{} // SNI -> SDS secret names
	for sni, dtc := range chainTLS(t, routerListeners(t, ctx, a, envoyNode)) {
		var names []string
		for _, sc := range dtc.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs() {
			names = append(names, sc.GetName())
		}
		if ca := dtc.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); ca != nil {
			names = append(names, ca.GetName())
		}
		chains[sni] = names
	}
	if got := chains["ledger.example.com"]; !slices.Equal(got, []string{certName, rootName}) {
		t.Fatalf("ledger.example.com's chain asks for %v, want %v (chains %v)", got, []string{certName, rootName}, chains)
	}
	if got := chains["outside.example.com"]; !slices.Equal(got, []string{outsideName}) {
		t.Fatalf("outside.example.com's chain asks for %v, want [%s]", got, outsideName)
	}

	// Envoy's SDS stream to the agent asks for what the listener names;
	// every secret served, as last sent.
	await := watchSecrets(t, ctx, a, envoyNode, []string{certName, rootName, outsideName})
	chainOf := func(s *tlsv3.Secret) []byte {
		return s.GetTlsCertificate().GetCertificateChain().GetInlineBytes()
	}
	m := await("the allowed files' secrets", func(m map[string]*tlsv3.Secret) bool { return m[certName] != nil && m[rootName] != nil })
	if !bytes.Equal(chainOf(m[certName]), cert1) || !bytes.Equal(m[certName].GetTlsCertificate().GetPrivateKey().GetInlineBytes(), key1) {
		t.Errorf("%s: served contents are not the files'", certName)
	}
	if got := m[rootName].GetValidationContext().GetTrustedCa().GetInlineBytes(); !bytes.Equal(got, cert1) {
		t.Errorf("%s: served roots are not ca.crt's", rootName)
	}

	// The files outside the allowed directory: refused, reported (VM1019
	// with the agent's reason), never served.
	gw := store.Key{Kind: store.KindGateway, Namespace: "edge", Name: "ingress"}
	warning := func() *store.ConfigError {
		var dc filestore.DebugConfig
		_, body := get(t, "http://"+cp.HTTPAddr()+"/debug/config?kind=none")
		if err := json.Unmarshal([]byte(body), &dc); err != nil {
			t.Fatal(err)
		}
		for _, w := range dc.Warnings {
			if w.Code == store.CodeCredentialNotHeld {
				return &w
			}
		}
		return nil
	}
	waitFor(t, "VM1019 on the Gateway for the files outside --cert-file-dirs", func() bool { return warning() != nil })
	w := warning()
	if w.Object != gw.String() || w.Field != "servers[1].tls.serverCertificate" || w.File != "ledger.yaml" || w.Line == 0 ||
		!strings.Contains(w.Message, router) || !strings.Contains(w.Message, "outside the directories") || !strings.Contains(w.Message, outside+"/tls.crt") {
		t.Errorf("warning %s", w.Error())
	}
	var ps []credentials.Proxy
	_, body := get(t, "http://"+cp.HTTPAddr()+"/debug/credentials")
	if err := json.Unmarshal([]byte(body), &ps); err != nil {
		t.Fatalf("/debug/credentials: %v: %s", err, body)
	}
	var missing []credentials.Missing
	for _, p := range ps {
		if p.ID == router {
			missing = p.Missing
		}
	}
	if len(missing) != 1 || missing[0].Secret != outsideName || !strings.Contains(missing[0].Reason, "outside the directories") {
		t.Errorf("/debug/credentials for %s: %+v, want %s refused", router, missing, outsideName)
	}

	// Rewriting the allowed files re-sends the secret with the new
	// contents; the refused one is still not served.
	cert2, key2 := writeCertFiles(t, allowed, "ledger.example.com")
	if bytes.Equal(cert1, cert2) {
		t.Fatal("the new certificate is the old one")
	}
	m = await("the rewritten files' secret", func(m map[string]*tlsv3.Secret) bool { return bytes.Equal(chainOf(m[certName]), cert2) })
	if !bytes.Equal(m[certName].GetTlsCertificate().GetPrivateKey().GetInlineBytes(), key2) {
		t.Errorf("%s: the new certificate is served with another key", certName)
	}
	if m[outsideName] != nil {
		t.Errorf("%s (outside --cert-file-dirs) was served", outsideName)
	}
}

// writeCertFiles writes a fresh self-signed certificate for host and its
// key as dir/tls.crt and dir/tls.key, each replaced in one rename, and
// returns their contents.
func writeCertFiles(t *testing.T, dir, host string) (cert, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	key = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	writeFile(t, filepath.Join(dir, "tls.key"), key)
	writeFile(t, filepath.Join(dir, "tls.crt"), cert)
	return cert, key
}

// writeFile replaces path with b (mode 0600) in one rename.
func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
