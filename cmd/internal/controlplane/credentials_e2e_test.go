package controlplane_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/credentials"
)

// gatewayCredentialConfig is an ingress Gateway terminating TLS with the
// file credential gw-cred, and a VirtualService bound to it.
const gatewayCredentialConfig = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: edge}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [ledger.example.com]
    tls: {mode: SIMPLE, credentialName: gw-cred}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ledger-in, namespace: edge}
spec:
  hosts: [ledger.example.com]
  gateways: [ingress]
  http:
  - route: [{destination: {host: ledger.fin.internal, port: {number: 7070}}}]
`

// TestMissingCredentialWarned: a gateway VM's agent (a real agent, its SDS
// server serving the credentials directory) reports the credentials it
// holds on its Envoy's stream; while gw-cred, which the Gateway's server
// names, is not in the directory, the Gateway has warning VM1019 at its
// file, line and field naming the router, /debug/credentials lists it for
// that proxy (vmesh status reads it), and the agent's SDS has no such
// secret (the server's filter chain fails closed). Adding the folder
// serves the secret and clears the warning; removing it brings it back.
func TestMissingCredentialWarned(t *testing.T) {
	cp, _, _ := ledgerPlane(t, gatewayCredentialConfig)
	credDir := filepath.Join(t.TempDir(), "credentials")
	if err := os.Mkdir(credDir, 0o700); err != nil {
		t.Fatal(err)
	}
	a, envoyNode, ctx := gatewayAgent(t, cp, credDir, nil)
	router := envoyNode.GetId()
	if !strings.HasPrefix(router, "router~") {
		t.Fatalf("gateway Envoy id %q", router)
	}
	// Envoy's ADS stream through the agent's xDS socket.
	var ads discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	waitFor(t, "the agent's xDS socket", func() bool {
		conn, err := grpc.NewClient("unix://"+a.XDSSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false
		}
		ads, err = discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err == nil {
			err = ads.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resourcev3.ListenerType})
		}
		if err == nil {
			_, err = ads.Recv()
		}
		if err != nil {
			conn.Close()
			return false
		}
		t.Cleanup(func() { conn.Close() })
		return true
	})

	gw := store.Key{Kind: store.KindGateway, Namespace: "edge", Name: "ingress"}
	missing := func() []credentials.Missing {
		var ps []credentials.Proxy
		_, body := get(t, "http://"+cp.HTTPAddr()+"/debug/credentials")
		if err := json.Unmarshal([]byte(body), &ps); err != nil {
			t.Fatalf("/debug/credentials: %v: %s", err, body)
		}
		for _, p := range ps {
			if p.ID == router {
				return p.Missing
			}
		}
		return nil
	}
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
	waitFor(t, "VM1019 on the Gateway", func() bool { return warning() != nil })
	w := warning()
	if w.Object != gw.String() || w.Field != "servers[0].tls.credentialName" || w.File != "ledger.yaml" || w.Line == 0 ||
		!strings.Contains(w.Message, router) || !strings.Contains(w.Message, `"gw-cred"`) {
		t.Errorf("warning %s", w.Error())
	}
	if m := missing(); len(m) != 1 || m[0].Secret != "gw-cred" || m[0].Object != gw.String() || m[0].Line != w.Line {
		t.Errorf("/debug/credentials for %s: %+v", router, m)
	}

	// Envoy asks the agent's SDS for the secret: none until the folder
	// is written.
	sdsConn, err := grpc.NewClient("unix://"+a.SDSSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer sdsConn.Close()
	var sds secretv3.SecretDiscoveryService_StreamSecretsClient
	waitFor(t, "the agent's SDS socket", func() bool {
		s, err := secretv3.NewSecretDiscoveryServiceClient(sdsConn).StreamSecrets(ctx)
		if err == nil {
			err = s.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resourcev3.SecretType, ResourceNames: []string{"kubernetes://gw-cred"}})
		}
		sds = s
		return err == nil
	})
	got := make(chan *discoveryv3.DiscoveryResponse, 1)
	go func() {
		for {
			// Answers without the secret come first (it is not held).
			r, err := sds.Recv()
			if err != nil {
				return
			}
			if len(r.GetResources()) > 0 {
				got <- r
				return
			}
			if sds.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.SecretType, ResourceNames: []string{"kubernetes://gw-cred"},
				VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}) != nil {
				return
			}
		}
	}()

	writeCredential(t, filepath.Join(credDir, "gw-cred"))
	select {
	case r := <-got:
		if len(r.GetResources()) != 1 {
			t.Errorf("SDS answered %d secrets", len(r.GetResources()))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent's SDS never served gw-cred once written")
	}
	waitFor(t, "VM1019 cleared once the agent holds gw-cred", func() bool { return warning() == nil && missing() == nil })

	if err := os.RemoveAll(filepath.Join(credDir, "gw-cred")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "VM1019 back once gw-cred is removed", func() bool { return warning() != nil && len(missing()) == 1 })
}

// writeCredential writes a self-signed certificate and its key as
// dir/tls.crt and dir/tls.key.
func writeCredential(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ledger.example.com"}, DNSNames: []string{"ledger.example.com"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dir + ".tmp"
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	// One rename: the agent never reads half a credential.
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
}

// TestCredentialCRLThroughAgent: a CRL in a gateway's credential folder
// (ca.crl, as in Istio's credentialName secrets), end to end through the
// control plane and a real agent. The router's MUTUAL server, fetched
// through the agent's xDS socket as Envoy does, checks clients against
// kubernetes://gw-mtls-cacert; the agent's SDS serves it with the folder's
// ca.crt and ca.crl. With that listener and those secrets, real
// handshakes as Envoy's validator makes them (testenv.EnvoyServerTLS):
// a client the CRL does not list passes, the revoked one is refused; a
// new ca.crl that revokes the other one too is re-sent, and then that
// client is refused as well.
func TestCredentialCRLThroughAgent(t *testing.T) {
	cp, _, _ := ledgerPlane(t, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: edge}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [ledger.example.com]
    tls: {mode: MUTUAL, credentialName: gw-mtls}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ledger-in, namespace: edge}
spec:
  hosts: [ledger.example.com]
  gateways: [ingress]
  http:
  - route: [{destination: {host: ledger.fin.internal, port: {number: 7070}}}]
`)
	serverCA, clientCA := testenv.NewTestCA(t, "server ca"), testenv.NewTestCA(t, "partner clients")
	crt, key, _ := serverCA.Issue(t, &x509.Certificate{DNSNames: []string{"ledger.example.com"}})
	client := func(name string) (tls.Certificate, *x509.Certificate) {
		c, k, leaf := clientCA.Issue(t, &x509.Certificate{DNSNames: []string{name}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return pair, leaf
	}
	good, goodLeaf := client("good.partner.example")
	revoked, revokedLeaf := client("old.partner.example")
	firstCRL := clientCA.CRL(t, revokedLeaf)
	credDir := filepath.Join(t.TempDir(), "credentials")
	if err := os.MkdirAll(filepath.Join(credDir, "gw-mtls"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": clientCA.CertPEM, "ca.crl": firstCRL} {
		writeFile(t, filepath.Join(credDir, "gw-mtls", name), b)
	}
	a, envoyNode, ctx := gatewayAgent(t, cp, credDir, nil)

	dtc := chainTLS(t, routerListeners(t, ctx, a, envoyNode))["ledger.example.com"]
	if dtc == nil {
		t.Fatal("the router has no TLS chain for ledger.example.com")
	}
	const pair, roots = "kubernetes://gw-mtls", "kubernetes://gw-mtls-cacert"
	if got := dtc.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName(); got != roots {
		t.Fatalf("clients are checked against %q, want %s", got, roots)
	}
	await := watchSecrets(t, ctx, a, envoyNode, []string{pair, roots})
	serverRoots := x509.NewCertPool()
	serverRoots.AddCert(serverCA.Cert)
	accepted := func(secrets map[string]*tlsv3.Secret, c tls.Certificate) bool {
		t.Helper()
		cfg, err := testenv.EnvoyServerTLS(dtc, secrets)
		if err != nil {
			t.Fatal(err)
		}
		return testenv.Handshake(t, cfg, &tls.Config{Certificates: []tls.Certificate{c}, InsecureSkipVerify: true, VerifyConnection: testenv.VerifyServerAgainst(serverRoots)}) == nil
	}

	m := await("the credential's secrets with its CRL", func(m map[string]*tlsv3.Secret) bool {
		return m[pair] != nil && bytes.Equal(m[roots].GetValidationContext().GetCrl().GetInlineBytes(), firstCRL)
	})
	if !accepted(m, good) {
		t.Error("a client the CRL does not list was refused")
	}
	if accepted(m, revoked) {
		t.Error("the revoked client was accepted")
	}

	secondCRL := clientCA.CRL(t, revokedLeaf, goodLeaf)
	writeFile(t, filepath.Join(credDir, "gw-mtls", "ca.crl"), secondCRL)
	m = await("the new CRL", func(m map[string]*tlsv3.Secret) bool {
		return bytes.Equal(m[roots].GetValidationContext().GetCrl().GetInlineBytes(), secondCRL)
	})
	if accepted(m, good) {
		t.Error("a client the new CRL revokes was accepted")
	}
}
