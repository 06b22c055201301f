package router_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/vmesh/vmesh/agents/sds"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/xds/router"
)

// A MUTUAL Gateway server with credentialName refuses a client certificate
// its credential folder's ca.crl revokes, as Istio's gateways do with a
// secret's ca.crl: the router's generated chain, with the secrets the agent
// serves for the folder (sds.CredentialSecrets), takes real handshakes as
// Envoy's validator does (testenv.EnvoyServerTLS). A client the CRL does
// not list passes; the revoked one is refused; without ca.crl it passes,
// so it is the CRL that refuses it; a client of another CA is refused
// either way.
func TestCredentialCRLRefusesRevokedClient(t *testing.T) {
	const yaml = `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [api.example.com]
    tls: {mode: MUTUAL, credentialName: api-cred}
`
	lds, err := router.Listeners(view(t, yaml, ingress()))
	if err != nil {
		t.Fatal(err)
	}
	var ctx *tlsv3.DownstreamTlsContext
	for _, l := range lds {
		for _, fc := range l.GetFilterChains() {
			if fc.GetTransportSocket() == nil {
				continue
			}
			ctx = &tlsv3.DownstreamTlsContext{}
			if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ctx == nil {
		t.Fatal("no TLS chain for api.example.com")
	}

	serverCA, clientCA, otherCA := testenv.NewTestCA(t, "server ca"), testenv.NewTestCA(t, "partner clients"), testenv.NewTestCA(t, "someone else")
	crt, key, _ := serverCA.Issue(t, &x509.Certificate{DNSNames: []string{"api.example.com"}})
	client := func(ca *testenv.TestCA, name string) (tls.Certificate, *x509.Certificate) {
		c, k, leaf := ca.Issue(t, &x509.Certificate{DNSNames: []string{name}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return pair, leaf
	}
	good, _ := client(clientCA, "good.partner.example")
	revoked, revokedLeaf := client(clientCA, "old.partner.example")
	stranger, _ := client(otherCA, "good.partner.example")
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.Cert)

	dir := t.TempDir()
	folder := filepath.Join(dir, "api-cred")
	if err := os.Mkdir(folder, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": clientCA.CertPEM} {
		if err := os.WriteFile(filepath.Join(folder, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		crl  []byte
		want map[string]bool // client -> accepted
	}{
		{nil, map[string]bool{"good": true, "revoked": true, "stranger": false}},
		{clientCA.CRL(t, revokedLeaf), map[string]bool{"good": true, "revoked": false, "stranger": false}},
	} {
		if tc.crl != nil {
			if err := os.WriteFile(filepath.Join(folder, "ca.crl"), tc.crl, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		secrets, err := sds.CredentialSecrets(dir, "api-cred")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := testenv.EnvoyServerTLS(ctx, secrets)
		if err != nil {
			t.Fatal(err)
		}
		for name, cert := range map[string]tls.Certificate{"good": good, "revoked": revoked, "stranger": stranger} {
			err := testenv.Handshake(t, cfg, &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, VerifyConnection: testenv.VerifyServerAgainst(roots)})
			if (err == nil) != tc.want[name] {
				t.Errorf("with CRL %v: client %s: server handshake error %v, want accepted %v", tc.crl != nil, name, err, tc.want[name])
			}
		}
	}
}
