package ca_test

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	securityv1alpha1 "istio.io/api/security/v1alpha1"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/spiffe"
)

// peerLog records what PeerIdentity said about each call the server handled.
type peerLog struct {
	mu   sync.Mutex
	ids  []spiffe.Identity
	errs []error
}

func (l *peerLog) last() (spiffe.Identity, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ids[len(l.ids)-1], l.errs[len(l.errs)-1]
}

// startServer serves the CA on a real gRPC server over TLS on a loopback
// port, as `vmesh serve` does on 15012.
func startServerTB(t testing.TB, c *ca.CA) (string, *peerLog) {
	t.Helper()
	tlsCfg, err := c.ServerTLSConfig([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	log := &peerLog{}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			id, err := c.PeerIdentity(ctx)
			log.mu.Lock()
			log.ids, log.errs = append(log.ids, id), append(log.errs, err)
			log.mu.Unlock()
			return h(ctx, req)
		}))
	c.Register(s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String(), log
}

// dial connects with TLS verifying the server against roots and, when cert is
// not nil, presenting it as the client certificate.
func dialTB(t testing.TB, addr string, roots *x509.CertPool, cert *tls.Certificate) securityv1alpha1.IstioCertificateServiceClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return securityv1alpha1.NewIstioCertificateServiceClient(conn)
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

func tlsCert(leaf *x509.Certificate, key crypto.Signer) *tls.Certificate {
	return &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestCreateCertificateWithTokenThenRenewOverMTLS(t *testing.T) {
	c, _, reg := newTestCA(t, nil)
	addr, peers := startServer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	roots := c.TrustBundle().CertPool()

	// 1. A fresh VM: bootstrap token, no certificate.
	tok, _, err := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart", WorkloadGroup: "cart-vms"})
	if err != nil {
		t.Fatal(err)
	}
	csr, key := newCSR(t, []string{testID.String()}, nil)
	resp, err := dial(t, addr, roots, nil).CreateCertificate(withToken(ctx, tok), &securityv1alpha1.IstioCertificateRequest{Csr: string(csr), ValidityDuration: 3600})
	if err != nil {
		t.Fatalf("CreateCertificate with token: %v", err)
	}
	chain := parseChain(t, resp.GetCertChain())
	first := chain[0]
	if id, err := spiffe.FromCertificate(first); err != nil || id != testID {
		t.Fatalf("issued identity = %v, %v; want %s", id, err, testID)
	}
	if d := first.NotAfter.Sub(first.NotBefore); d != time.Hour+time.Minute {
		t.Fatalf("lifetime %s, want the requested hour (+1m backdating)", d)
	}
	if !chain[len(chain)-1].Equal(c.TrustBundle().Roots()[0]) {
		t.Fatal("chain does not end with the root")
	}
	if _, err := peers.last(); !errorsIs(err, ca.ErrNoCredentials) {
		t.Fatalf("PeerIdentity for a token-only caller: err = %v, want no_credentials", err)
	}

	// 2. Renewal: the VM presents its certificate over mTLS, no token.
	csr2, _ := newCSR(t, []string{testID.String()}, nil)
	resp2, err := dial(t, addr, roots, tlsCert(first, key)).CreateCertificate(ctx, &securityv1alpha1.IstioCertificateRequest{Csr: string(csr2)})
	if err != nil {
		t.Fatalf("renewal over mTLS: %v", err)
	}
	second := parseChain(t, resp2.GetCertChain())[0]
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("renewal returned the same certificate")
	}
	if id, err := spiffe.FromCertificate(second); err != nil || id != testID {
		t.Fatalf("renewed identity = %v, %v", id, err)
	}
	if d := second.NotAfter.Sub(second.NotBefore); d != 24*time.Hour+time.Minute {
		t.Fatalf("renewed lifetime %s, want the 24h default", d)
	}
	if id, err := peers.last(); err != nil || id != testID {
		t.Fatalf("PeerIdentity for the mTLS caller = %v, %v; want %s", id, err, testID)
	}

	if got := counterValue(t, reg, "vmesh_ca_certificates_issued_total", "auth", "token"); got != 1 {
		t.Fatalf("issued{auth=token} = %v, want 1", got)
	}
	if got := counterValue(t, reg, "vmesh_ca_certificates_issued_total", "auth", "certificate"); got != 1 {
		t.Fatalf("issued{auth=certificate} = %v, want 1", got)
	}
}

// TestCreateCertificateRejections is the negative list of issue 5 end to end:
// each request fails with a gRPC status carrying its own reason.
func TestCreateCertificateRejections(t *testing.T) {
	// The CAs are created 4h in the past so that certificates can be issued
	// "3h ago" under their roots.
	clock := newTestClock()
	clock.Add(-4 * time.Hour)
	c, _, reg := newTestCA(t, func(cfg *ca.Config) { cfg.Now = clock.Now })
	other, _, _ := newTestCA(t, func(cfg *ca.Config) { cfg.Now = clock.Now })
	clock.Add(4 * time.Hour)
	addr, _ := startServer(t, c)
	roots := c.TrustBundle().CertPool()
	anon := dial(t, addr, roots, nil)

	token := func(c *ca.CA, req ca.TokenRequest) string {
		t.Helper()
		req.Namespace, req.ServiceAccount = "shop", "cart"
		raw, _, err := c.CreateToken(req)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	good := token(c, ca.TokenRequest{})
	csr, key := newCSR(t, []string{testID.String()}, nil)

	// Certificates for the renewal cases.
	validLeaf, _, err := c.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	revokedLeaf, _, err := c.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Revoke(revokedLeaf, "key compromise"); err != nil {
		t.Fatal(err)
	}
	clock.Add(-3 * time.Hour)
	expiredLeaf, _, err := c.SignCSR(csr, testID, time.Hour)
	expiredTok := token(c, ca.TokenRequest{TTL: time.Hour})
	clock.Add(3 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreignLeaf, _, err := other.SignCSR(csr, testID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreignExpired, _, err := other.SignCSR(csr, testID, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * time.Minute) // foreignExpired is expired by the CA's clock

	impersonate, _ := structpb.NewStruct(map[string]any{"ImpersonatedIdentity": "spiffe://cluster.local/ns/shop/sa/admin"})

	for _, tc := range []struct {
		name   string
		client securityv1alpha1.IstioCertificateServiceClient
		token  string
		req    *securityv1alpha1.IstioCertificateRequest
		code   codes.Code
		reason ca.Reason
		detail string
	}{
		{name: "no credentials", client: anon, code: codes.Unauthenticated, reason: ca.ReasonNoCredentials, detail: "Bearer"},
		{name: "expired token", client: anon, token: expiredTok, code: codes.Unauthenticated, reason: ca.ReasonTokenExpired, detail: "expired at"},
		{name: "not-yet-valid token", client: anon, token: token(c, ca.TokenRequest{NotBefore: clock.Now().Add(time.Hour)}), code: codes.Unauthenticated, reason: ca.ReasonTokenNotYetValid},
		{name: "wrong-audience token", client: anon, token: token(c, ca.TokenRequest{Audience: "other"}), code: codes.Unauthenticated, reason: ca.ReasonTokenAudience},
		{name: "wrong-signature token", client: anon, token: token(other, ca.TokenRequest{}), code: codes.Unauthenticated, reason: ca.ReasonTokenSignature},
		{name: "tampered token", client: anon, token: tamper(t, good, "sa", "admin"), code: codes.Unauthenticated, reason: ca.ReasonTokenSignature},
		{name: "CSR for another identity", client: anon, token: good, req: &securityv1alpha1.IstioCertificateRequest{Csr: string(mustCSR(t, []string{"spiffe://cluster.local/ns/shop/sa/admin"}, nil))}, code: codes.PermissionDenied, reason: ca.ReasonCSRIdentity, detail: "sa/admin"},
		{name: "renewal with revoked certificate", client: dial(t, addr, roots, tlsCert(revokedLeaf, key)), code: codes.Unauthenticated, reason: ca.ReasonCertRevoked, detail: revokedLeaf.SerialNumber.Text(16)},
		{name: "revoked certificate is not rescued by a token", client: dial(t, addr, roots, tlsCert(revokedLeaf, key)), token: good, code: codes.Unauthenticated, reason: ca.ReasonCertRevoked},
		{name: "renewal with expired certificate", client: dial(t, addr, roots, tlsCert(expiredLeaf, key)), code: codes.Unauthenticated, reason: ca.ReasonCertExpired, detail: "expired at"},
		{name: "renewal with another CA's certificate", client: dial(t, addr, roots, tlsCert(foreignLeaf, key)), code: codes.Unauthenticated, reason: ca.ReasonCertUntrusted},
		{name: "renewal with another CA's expired certificate", client: dial(t, addr, roots, tlsCert(foreignExpired, key)), code: codes.Unauthenticated, reason: ca.ReasonCertUntrusted},
		{name: "renewal for another identity", client: dial(t, addr, roots, tlsCert(validLeaf, key)), req: &securityv1alpha1.IstioCertificateRequest{Csr: string(mustCSR(t, []string{"spiffe://cluster.local/ns/shop/sa/admin"}, nil))}, code: codes.PermissionDenied, reason: ca.ReasonCSRIdentity},
		{name: "impersonation", client: anon, token: good, req: &securityv1alpha1.IstioCertificateRequest{Csr: string(csr), Metadata: impersonate}, code: codes.PermissionDenied, reason: ca.ReasonImpersonation},
		{name: "lifetime over max", client: anon, token: good, req: &securityv1alpha1.IstioCertificateRequest{Csr: string(csr), ValidityDuration: int64(ca.DefaultMaxTTL/time.Second) + 1}, code: codes.InvalidArgument, reason: ca.ReasonTTL},
		{name: "garbage CSR", client: anon, token: good, req: &securityv1alpha1.IstioCertificateRequest{Csr: "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"}, code: codes.InvalidArgument, reason: ca.ReasonCSRInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if tc.token != "" {
				ctx = withToken(ctx, tc.token)
			}
			req := tc.req
			if req == nil {
				req = &securityv1alpha1.IstioCertificateRequest{Csr: string(csr)}
			}
			before := counterValue(t, reg, "vmesh_ca_certificates_rejected_total", "reason", string(tc.reason))
			resp, err := tc.client.CreateCertificate(ctx, req)
			if err == nil {
				t.Fatalf("request accepted, chain of %d", len(resp.GetCertChain()))
			}
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("code = %v, want %v (%s)", st.Code(), tc.code, st.Message())
			}
			if !strings.HasPrefix(st.Message(), string(tc.reason)+":") {
				t.Fatalf("message %q does not start with reason %q", st.Message(), tc.reason)
			}
			if tc.detail != "" && !strings.Contains(st.Message(), tc.detail) {
				t.Fatalf("message %q does not say %q", st.Message(), tc.detail)
			}
			if after := counterValue(t, reg, "vmesh_ca_certificates_rejected_total", "reason", string(tc.reason)); after != before+1 {
				t.Fatalf("rejected{reason=%s} went %v -> %v, want +1", tc.reason, before, after)
			}
		})
	}

	// The same setup does issue for good credentials: the rejections above
	// are specific, not a broken server.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A non-positive lifetime asks for the default, as in Istio.
	resp, err := anon.CreateCertificate(withToken(ctx, good), &securityv1alpha1.IstioCertificateRequest{Csr: string(csr), ValidityDuration: -5})
	if err != nil {
		t.Fatalf("good token rejected: %v", err)
	}
	if leaf := parseChain(t, resp.GetCertChain())[0]; leaf.NotAfter.Sub(leaf.NotBefore) != ca.DefaultTTL+time.Minute {
		t.Fatalf("lifetime for validity_duration=-5: %s, want the default", leaf.NotAfter.Sub(leaf.NotBefore))
	}
	if _, err := dial(t, addr, roots, tlsCert(validLeaf, key)).CreateCertificate(ctx, &securityv1alpha1.IstioCertificateRequest{Csr: string(csr)}); err != nil {
		t.Fatalf("valid certificate rejected: %v", err)
	}
}

func startServer(t *testing.T, c *ca.CA) (string, *peerLog) { return startServerTB(t, c) }

func dial(t *testing.T, addr string, roots *x509.CertPool, cert *tls.Certificate) securityv1alpha1.IstioCertificateServiceClient {
	return dialTB(t, addr, roots, cert)
}

// TestRenewalChainAcrossSeveralRotations renews over mTLS again and again,
// each time with the certificate from the previous round, as an agent
// rotating at half-life does; a certificate left to expire cannot renew.
func TestRenewalChainAcrossSeveralRotations(t *testing.T) {
	clock := newTestClock()
	c, _, reg := newTestCA(t, func(cfg *ca.Config) {
		cfg.Now = clock.Now
		cfg.DefaultTTL = time.Hour
	})
	addr, _ := startServer(t, c)
	roots := c.TrustBundle().CertPool()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tok, _, err := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err != nil {
		t.Fatal(err)
	}
	csr, key := newCSR(t, nil, nil)
	resp, err := dial(t, addr, roots, nil).CreateCertificate(withToken(ctx, tok), &securityv1alpha1.IstioCertificateRequest{Csr: string(csr)})
	if err != nil {
		t.Fatal(err)
	}
	current := parseChain(t, resp.GetCertChain())[0]
	first, firstKey := current, key
	for round := range 4 {
		clock.Add(35 * time.Minute) // past half of the 1h lifetime
		csr, next := newCSR(t, nil, nil)
		resp, err := dial(t, addr, roots, tlsCert(current, key)).CreateCertificate(ctx, &securityv1alpha1.IstioCertificateRequest{Csr: string(csr)})
		if err != nil {
			t.Fatalf("round %d: renewal with the previous certificate: %v", round, err)
		}
		renewed := parseChain(t, resp.GetCertChain())[0]
		if !renewed.NotAfter.After(current.NotAfter) {
			t.Fatalf("round %d: renewed certificate does not outlive the previous one", round)
		}
		current, key = renewed, next
	}
	if got := counterValue(t, reg, "vmesh_ca_certificates_issued_total", "auth", "certificate"); got != 4 {
		t.Fatalf("issued{auth=certificate} = %v, want 4", got)
	}
	// The first certificate expired long ago and cannot renew any more.
	csr2, _ := newCSR(t, nil, nil)
	_, err = dial(t, addr, roots, tlsCert(first, firstKey)).CreateCertificate(ctx, &securityv1alpha1.IstioCertificateRequest{Csr: string(csr2)})
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.HasPrefix(st.Message(), string(ca.ReasonCertExpired)) {
		t.Fatalf("expired first certificate: %v", err)
	}
}
