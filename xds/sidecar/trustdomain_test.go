package sidecar_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/vmesh/vmesh/agents/sds"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/spiffe"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// inboundTLS returns the TLS context of each chain of v's virtualInbound
// that terminates TLS, by chain name.
func inboundTLS(t *testing.T, v *model.View) map[string]*tlsv3.DownstreamTlsContext {
	t.Helper()
	ls, err := sidecar.Listeners(v)
	if err != nil {
		t.Fatal(err)
	}
	vi := listener(t, ls, sidecar.VirtualInboundListener)
	if err := sidecar.Validate(vi); err != nil {
		t.Fatal(err)
	}
	out := map[string]*tlsv3.DownstreamTlsContext{}
	for _, fc := range vi.GetFilterChains() {
		if fc.GetTransportSocket() == nil {
			continue
		}
		ctx := &tlsv3.DownstreamTlsContext{}
		if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
			t.Fatalf("chain %s: %v", fc.GetName(), err)
		}
		out[fc.GetName()] = ctx
	}
	return out
}

// Inbound mesh mTLS checks the client's trust domain as Istio's inbound
// listeners do (TrustDomainsForValidation): every chain that terminates it
// (the workload port's and the catch-all ones) requires a client
// certificate of the mesh root (SDS ROOTCA) whose URI SAN starts with
// spiffe://TD/ for the mesh's trust domain or one of MeshConfig's
// trustDomainAliases, each once.
func TestInboundMTLSChecksTrustDomains(t *testing.T) {
	for _, tc := range []struct {
		name, mesh string
		want       []string
	}{
		{"default", "", []string{"spiffe://cluster.local/"}},
		{"trust domain and aliases", "trustDomain: example.org\ntrustDomainAliases: [old.example, example.org, legacy.example.]\n",
			[]string{"spiffe://example.org/", "spiffe://old.example/", "spiffe://legacy.example./"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctxs := inboundTLS(t, meshFieldsViewOf(t, tc.mesh, productpage()))
			var names []string
			for name, ctx := range ctxs {
				names = append(names, name)
				if !ctx.GetRequireClientCertificate().GetValue() {
					t.Errorf("%s: client certificate not required", name)
				}
				// Istio's TLS parameters: 1.2 to 1.3, AES-GCM suites only.
				p := ctx.GetCommonTlsContext().GetTlsParams()
				if p.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2 || p.GetTlsMaximumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 ||
					!slices.Equal(p.GetCipherSuites(), []string{"ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-ECDSA-AES128-GCM-SHA256",
						"ECDHE-RSA-AES128-GCM-SHA256", "AES256-GCM-SHA384", "AES128-GCM-SHA256"}) {
					t.Errorf("%s: TLS parameters %v, want Istio's", name, p)
				}
				cvc := ctx.GetCommonTlsContext().GetCombinedValidationContext()
				if cvc.GetValidationContextSdsSecretConfig().GetName() != sidecar.SecretRootCA {
					t.Errorf("%s: roots %q, want %s", name, cvc.GetValidationContextSdsSecretConfig().GetName(), sidecar.SecretRootCA)
				}
				var got []string
				for _, m := range cvc.GetDefaultValidationContext().GetMatchTypedSubjectAltNames() {
					if m.GetSanType() != tlsv3.SubjectAltNameMatcher_URI {
						t.Errorf("%s: SAN matcher of type %s, want URI", name, m.GetSanType())
					}
					got = append(got, m.GetMatcher().GetPrefix())
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("%s: trust domain prefixes %q, want %q", name, got, tc.want)
				}
			}
			slices.Sort(names)
			if want := []string{"inbound|8080|mtls", "virtualInbound-catchall-http|mtls", "virtualInbound-catchall|mtls"}; !slices.Equal(names, want) {
				t.Errorf("mTLS chains %v, want %v", names, want)
			}
		})
	}
}

// pluginCA writes root as an Istio plug-in CA folder (the root issues
// workload certificates itself).
func pluginCA(t *testing.T, root *testenv.TestCA) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range map[string][]byte{ca.PluginCACertFile: root.CertPEM, ca.PluginCAKeyFile: root.KeyPEM, ca.PluginRootCertFile: root.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// workloadCert is the certificate chain and key vmesh's CA, of the given
// trust domain and plug-in folder, issues to ns/sa (as an agent gets it).
func workloadCert(t *testing.T, cacerts, trustDomain, ns, sa string) tls.Certificate {
	t.Helper()
	c, err := ca.New(ca.Config{DataDir: t.TempDir(), CACertsDir: cacerts, TrustDomain: trustDomain}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := spiffe.Identity{TrustDomain: trustDomain, Namespace: ns, ServiceAccount: sa}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id.URL()}}, key)
	if err != nil {
		t.Fatal(err)
	}
	_, chain, err := c.SignCSR(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair([]byte(strings.Join(chain, "")), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// A client certificate from another trust domain is refused by a
// sidecar's inbound mTLS even when its CA chains to the same root: two
// meshes (vmesh CAs of trust domains cluster.local and other.example) share
// one plug-in root, and the productpage sidecar's generated inbound chain,
// its SDS secrets as the agent builds them (sds.Secrets), takes real
// handshakes as Envoy's validator does (testenv.EnvoyServerTLS). A client
// of cluster.local passes; one of other.example is refused; one of
// old.example passes only while old.example is a trustDomainAliases entry.
// A client of another root is refused either way, and so is a TLS 1.2
// client offering only a CBC cipher suite (Istio's AES-GCM list).
func TestInboundMTLSRefusesAnotherTrustDomain(t *testing.T) {
	root := testenv.NewTestCA(t, "shared root")
	cacerts := pluginCA(t, root)
	server := workloadCert(t, cacerts, "cluster.local", "shop", "productpage")
	chainPEM := pemChain(server)
	keyPEM := pkcs8(t, server)
	def, rootSecret := sds.Secrets(chainPEM, keyPEM, root.CertPEM)
	secrets := map[string]*tlsv3.Secret{sds.DefaultSecret: def, sds.RootSecret: rootSecret}
	roots := x509.NewCertPool()
	roots.AddCert(root.Cert)

	foreign := pluginCA(t, testenv.NewTestCA(t, "another root"))
	clients := map[string]tls.Certificate{
		"cluster.local": workloadCert(t, cacerts, "cluster.local", "shop", "reviews"),
		"other.example": workloadCert(t, cacerts, "other.example", "shop", "reviews"),
		"old.example":   workloadCert(t, cacerts, "old.example", "shop", "reviews"),
		"another root":  workloadCert(t, foreign, "cluster.local", "shop", "reviews"),
	}
	for _, tc := range []struct {
		mesh     string
		accepted []string
	}{
		{"", []string{"cluster.local"}},
		{"trustDomainAliases: [old.example]\n", []string{"cluster.local", "old.example"}},
	} {
		ctx := inboundTLS(t, meshFieldsViewOf(t, tc.mesh, productpage()))["inbound|8080|mtls"]
		cfg, err := testenv.EnvoyServerTLS(ctx, secrets)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range slices.Sorted(maps.Keys(clients)) {
			err := testenv.Handshake(t, cfg, &tls.Config{Certificates: []tls.Certificate{clients[name]}, InsecureSkipVerify: true, VerifyConnection: testenv.VerifyServerAgainst(roots)})
			if want := slices.Contains(tc.accepted, name); (err == nil) != want {
				t.Errorf("mesh config %q: client of %s: server handshake error %v, want accepted %v", tc.mesh, name, err, want)
			}
		}
		// Without a certificate: refused.
		if err := testenv.Handshake(t, cfg, &tls.Config{InsecureSkipVerify: true, VerifyConnection: testenv.VerifyServerAgainst(roots)}); err == nil {
			t.Errorf("mesh config %q: a client without a certificate was accepted", tc.mesh)
		}
		// TLS 1.2: an AES-GCM suite passes, a CBC one is refused.
		for suite, want := range map[uint16]bool{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256: true, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA: false} {
			err := testenv.Handshake(t, cfg, &tls.Config{Certificates: []tls.Certificate{clients["cluster.local"]}, InsecureSkipVerify: true,
				VerifyConnection: testenv.VerifyServerAgainst(roots), MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}})
			if (err == nil) != want {
				t.Errorf("mesh config %q: TLS 1.2 with %s: server handshake error %v, want accepted %v", tc.mesh, tls.CipherSuiteName(suite), err, want)
			}
		}
	}
}

func pemChain(c tls.Certificate) []byte {
	var b []byte
	for _, der := range c.Certificate {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return b
}

func pkcs8(t *testing.T, c tls.Certificate) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// MeshConfig meshMTLS sets inbound mesh mTLS's TLS parameters as in
// Istio's BuildInboundTLS: cipherSuites replaces Istio's list,
// minProtocolVersion TLSV1_3 makes it TLS 1.3 only.
func TestInboundMTLSMeshMTLS(t *testing.T) {
	ctxs := inboundTLS(t, meshFieldsViewOf(t, "meshMTLS:\n  minProtocolVersion: TLSV1_3\n  cipherSuites: [ECDHE-ECDSA-AES256-GCM-SHA384]\n", productpage()))
	if len(ctxs) == 0 {
		t.Fatal("no mTLS chain")
	}
	for name, ctx := range ctxs {
		p := ctx.GetCommonTlsContext().GetTlsParams()
		if p.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 || p.GetTlsMaximumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 ||
			!slices.Equal(p.GetCipherSuites(), []string{"ECDHE-ECDSA-AES256-GCM-SHA384"}) {
			t.Errorf("%s: TLS parameters %v, want TLS 1.3 and the mesh's suite", name, p)
		}
	}
}
