package sds_test

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vmesh/vmesh/agents/internal/agenttest"
	"github.com/vmesh/vmesh/agents/sds"
	"github.com/vmesh/vmesh/internal/testenv"
)

// writeCredential writes a credential folder the way an operator does:
// each file replaced by rename, mode 0600.
func writeCredential(t *testing.T, dir, name string, files map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
		t.Fatal(err)
	}
	for f, b := range files {
		p := filepath.Join(dir, name, f)
		if err := os.WriteFile(p+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			t.Fatal(err)
		}
	}
}

// credRig is an SDS server serving a credentials directory on a Unix
// socket (no workload certificate: only the file credentials).
type credRig struct {
	srv  *sds.Server
	dir  string
	reg  *prometheus.Registry
	sdsc secretv3.SecretDiscoveryServiceClient
}

func newCredRig(t *testing.T) *credRig {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv := sds.New(agenttest.Logger(t), reg)
	dir := filepath.Join(t.TempDir(), "credentials")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "sds.sock")
	lis, err := sds.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := grpc.NewServer()
	srv.Register(ctx, g)
	done := make(chan struct{}, 2)
	go func() { _ = g.Serve(lis); done <- struct{}{} }()
	go func() {
		if err := srv.ServeCredentials(ctx, dir); err != nil {
			t.Errorf("ServeCredentials: %v", err)
		}
		done <- struct{}{}
	}()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		g.Stop()
		<-done
		<-done
	})
	return &credRig{srv: srv, dir: dir, reg: reg, sdsc: secretv3.NewSecretDiscoveryServiceClient(conn)}
}

// watch opens a delta SDS stream for one secret, as Envoy does, and
// returns a function that waits for its next response.
func (r *credRig) watch(t *testing.T, ctx context.Context, name string) func() *discoveryv3.DeltaDiscoveryResponse {
	t.Helper()
	st, err := r.sdsc.DeltaSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.SecretType, ResourceNamesSubscribe: []string{name}}); err != nil {
		t.Fatal(err)
	}
	return func() *discoveryv3.DeltaDiscoveryResponse {
		t.Helper()
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.SecretType, ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

func secretOf(t *testing.T, resp *discoveryv3.DeltaDiscoveryResponse) *tlsv3.Secret {
	t.Helper()
	if len(resp.GetResources()) != 1 {
		t.Fatalf("response with %d secrets, removed %v; want one", len(resp.GetResources()), resp.GetRemovedResources())
	}
	s := &tlsv3.Secret{}
	if err := resp.GetResources()[0].GetResource().UnmarshalTo(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitState polls the server's credential state until cond holds.
func waitState(t *testing.T, srv *sds.Server, what string, cond func([]sds.CredentialState, []string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cond(srv.Credentials()) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	states, missing := srv.Credentials()
	t.Fatalf("timed out waiting for %s: states %+v, missing %v", what, states, missing)
}

// TestFileCredentialsServedAndReloaded: a credential folder is served under
// Istio's names for credentialName, the pair and its roots; replacing the
// files pushes the new pair without a restart; an invalid replacement keeps
// the last good pair and is reported; removing the folder withdraws it.
func TestFileCredentialsServedAndReloaded(t *testing.T) {
	r := newCredRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := agenttest.NewPair(t, "root", nil)
	first := agenttest.NewPair(t, "web.example.com", &ca)
	writeCredential(t, r.dir, "web", map[string][]byte{"tls.crt": first.Cert, "tls.key": first.Key, "ca.crt": ca.Cert})

	pair := r.watch(t, ctx, "kubernetes://web")
	roots := r.watch(t, ctx, "web-cacert")
	got := secretOf(t, pair())
	if got.GetName() != "kubernetes://web" || string(got.GetTlsCertificate().GetCertificateChain().GetInlineBytes()) != string(first.Cert) ||
		string(got.GetTlsCertificate().GetPrivateKey().GetInlineBytes()) != string(first.Key) {
		t.Fatalf("kubernetes://web = %v, want the folder's pair", got.GetName())
	}
	if rs := secretOf(t, roots()); string(rs.GetValidationContext().GetTrustedCa().GetInlineBytes()) != string(ca.Cert) {
		t.Fatalf("web-cacert = %v, want the folder's ca.crt", rs)
	}

	// Rotation: new files, no restart.
	second := agenttest.NewPair(t, "web.example.com", &ca)
	writeCredential(t, r.dir, "web", map[string][]byte{"tls.crt": second.Cert, "tls.key": second.Key})
	if got := secretOf(t, pair()); string(got.GetTlsCertificate().GetCertificateChain().GetInlineBytes()) != string(second.Cert) {
		t.Fatal("the rotated pair was not pushed")
	}

	// A key that does not match its certificate: refused, the last good
	// pair keeps serving, the state and the metric say so.
	other := agenttest.NewPair(t, "other", &ca)
	writeCredential(t, r.dir, "web", map[string][]byte{"tls.key": other.Key})
	waitState(t, r.srv, "web refused", func(st []sds.CredentialState, _ []string) bool {
		return len(st) == 1 && st[0].Error != "" && slices.Contains(st[0].Secrets, "kubernetes://web")
	})
	if v := gauge(t, r.reg, "refused"); v != 1 {
		t.Errorf("vmesh_sds_credentials{state=refused} = %v, want 1", v)
	}

	// Removed: withdrawn from every stream.
	if err := os.RemoveAll(filepath.Join(r.dir, "web")); err != nil {
		t.Fatal(err)
	}
	if resp := pair(); !slices.Equal(resp.GetRemovedResources(), []string{"kubernetes://web"}) {
		t.Fatalf("after removal: %v removed, want kubernetes://web", resp.GetRemovedResources())
	}
}

// TestFileCredentialsMissingAndRefused: a name Envoy asks for that no
// folder holds is reported missing (and gets no secret: what needs it fails
// closed); folders that could be someone else's (group-writable), that
// shadow the workload's own secrets, or that hold half a pair are refused.
func TestFileCredentialsMissingAndRefused(t *testing.T) {
	r := newCredRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := agenttest.NewPair(t, "root", nil)
	p := agenttest.NewPair(t, "api", &ca)
	writeCredential(t, r.dir, "shared", map[string][]byte{"tls.crt": p.Cert, "tls.key": p.Key})
	if err := os.Chmod(filepath.Join(r.dir, "shared", "tls.key"), 0o666); err != nil {
		t.Fatal(err)
	}
	writeCredential(t, r.dir, "ROOTCA", map[string][]byte{"ca.crt": ca.Cert})
	writeCredential(t, r.dir, "half", map[string][]byte{"tls.crt": p.Cert})

	_ = r.watch(t, ctx, "kubernetes://nowhere")
	waitState(t, r.srv, "three refusals and one missing name", func(st []sds.CredentialState, missing []string) bool {
		refused := 0
		for _, s := range st {
			if s.Error != "" && len(s.Secrets) == 0 {
				refused++
			}
		}
		return refused == 3 && slices.Equal(missing, []string{"kubernetes://nowhere"})
	})
	states, _ := r.srv.Credentials()
	for _, s := range states {
		want := map[string]string{"shared": "writable by group or others", "ROOTCA": "not a credential name", "half": "without its pair"}[s.Name]
		if !strings.Contains(s.Error, want) {
			t.Errorf("%s: error %q, want it to say %q", s.Name, s.Error, want)
		}
	}
	if v := gauge(t, r.reg, "missing"); v != 1 {
		t.Errorf("vmesh_sds_credentials{state=missing} = %v, want 1", v)
	}
	if got := r.srv.Requested(); !slices.Equal(got, []string{"kubernetes://nowhere"}) {
		t.Errorf("Requested() = %v, want the one name Envoy asked for", got)
	}
}

// gauge reads vmesh_sds_credentials{state=state} from reg.
func gauge(t *testing.T, reg *prometheus.Registry, state string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "vmesh_sds_credentials" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "state" && l.GetValue() == state {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no vmesh_sds_credentials{state=%q}", state)
	return 0
}

// TestFileCredentialCRL: a credential folder's ca.crl (Istio's secret key)
// is served as the crl of its roots' validation context, beside ca.crt,
// and re-sent when the file changes. A CRL signed by no certificate of
// ca.crt, one that is not PEM, and a ca.crl without ca.crt are refused (a
// refused replacement keeps the last good version serving).
func TestFileCredentialCRL(t *testing.T) {
	r := newCredRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clientCA := testenv.NewTestCA(t, "partner clients")
	server := testenv.NewTestCA(t, "server ca")
	crt, key, _ := server.Issue(t, &x509.Certificate{DNSNames: []string{"web.example.com"}})
	_, _, revoked := clientCA.Issue(t, &x509.Certificate{DNSNames: []string{"old.partner.example"}})
	firstCRL := clientCA.CRL(t, revoked)
	writeCredential(t, r.dir, "web", map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": clientCA.CertPEM, "ca.crl": firstCRL})

	roots := r.watch(t, ctx, "kubernetes://web-cacert")
	vc := secretOf(t, roots()).GetValidationContext()
	if string(vc.GetTrustedCa().GetInlineBytes()) != string(clientCA.CertPEM) || string(vc.GetCrl().GetInlineBytes()) != string(firstCRL) {
		t.Fatalf("kubernetes://web-cacert = %v, want ca.crt and ca.crl", vc)
	}
	secrets, err := sds.CredentialSecrets(r.dir, "web")
	if err != nil {
		t.Fatal(err)
	}
	if string(secrets["web-cacert"].GetValidationContext().GetCrl().GetInlineBytes()) != string(firstCRL) || secrets["web"].GetTlsCertificate() == nil {
		t.Errorf("CredentialSecrets: %v", secrets)
	}

	// A new CRL: re-sent.
	secondCRL := clientCA.CRL(t)
	writeCredential(t, r.dir, "web", map[string][]byte{"ca.crl": secondCRL})
	if vc := secretOf(t, roots()).GetValidationContext(); string(vc.GetCrl().GetInlineBytes()) != string(secondCRL) {
		t.Fatalf("after the CRL changed: %v", vc)
	}

	// Refused: a CRL of another issuer (the last good one keeps serving),
	// one that is not PEM, a CRL without roots.
	writeCredential(t, r.dir, "web", map[string][]byte{"ca.crl": server.CRL(t)})
	writeCredential(t, r.dir, "garbled", map[string][]byte{"ca.crt": clientCA.CertPEM, "ca.crl": []byte("not a CRL\n")})
	writeCredential(t, r.dir, "bare", map[string][]byte{"tls.crt": crt, "tls.key": key, "crl": secondCRL})
	waitState(t, r.srv, "three refusals", func(st []sds.CredentialState, _ []string) bool {
		n := 0
		for _, s := range st {
			if s.Error != "" {
				n++
			}
		}
		return n == 3
	})
	states, _ := r.srv.Credentials()
	for _, s := range states {
		want := map[string]string{"web": "signed by no certificate of ca.crt", "garbled": "not PEM", "bare": "without ca.crt"}[s.Name]
		if !strings.Contains(s.Error, want) {
			t.Errorf("%s: error %q, want it to say %q", s.Name, s.Error, want)
		}
		if s.Name == "web" && !slices.Contains(s.Secrets, "kubernetes://web-cacert") {
			t.Errorf("web: the last good version no longer serves: %v", s.Secrets)
		}
	}
}
