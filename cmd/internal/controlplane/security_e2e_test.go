package controlplane_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/vmesh/vmesh/agents/caclient"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/xds"
	"github.com/vmesh/vmesh/xds/security"
)

// secureMesh is a real control plane (CA and xDS on the TLS port) with
// workloads that get their certificates through CreateCertificate.
type secureMesh struct {
	t  *testing.T
	cp *controlplane.ControlPlane
}

func startSecureMesh(t *testing.T, configYAML string) *secureMesh {
	t.Helper()
	cfgDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfgDir, "mesh.yaml"), []byte(configYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = cfgDir
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.DebounceQuiet, cfg.DebounceMax = 10*time.Millisecond, 100*time.Millisecond
	cp, err := controlplane.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("control plane: %v", err)
		}
	})
	waitFor(t, "control plane ready", cp.Ready)
	return &secureMesh{t: t, cp: cp}
}

// dialCA connects to the secure port, presenting cert when not nil.
func (m *secureMesh) dialCA(cert *tls.Certificate) *grpc.ClientConn {
	m.t.Helper()
	tc := &tls.Config{RootCAs: m.cp.CA().TrustBundle().CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	cc, err := grpc.NewClient(m.cp.SecureAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		m.t.Fatal(err)
	}
	return cc
}

// workload is one VM's identity: its certificate files and xDS bootstrap.
type workload struct {
	ns, sa  string
	dir     string
	pair    *caclient.KeyPair
	boot    []byte
	labels  map[string]string
	meshRef *secureMesh
}

// enroll obtains a certificate for namespace/sa with a bootstrap token
// through CreateCertificate and writes it where file_watcher reads it.
func (m *secureMesh) enroll(ns, sa string, labels map[string]string, ttl time.Duration) *workload {
	m.t.Helper()
	token, _, err := m.cp.CA().CreateToken(ca.TokenRequest{Namespace: ns, ServiceAccount: sa, TTL: 10 * time.Minute})
	if err != nil {
		m.t.Fatal(err)
	}
	cc := m.dialCA(nil)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pair, err := caclient.Fetch(ctx, cc, caclient.Request{Token: token, TTL: ttl})
	if err != nil {
		m.t.Fatalf("CreateCertificate for %s/%s: %v", ns, sa, err)
	}
	w := &workload{ns: ns, sa: sa, dir: m.t.TempDir(), pair: pair, labels: labels, meshRef: m}
	if err := pair.WriteFiles(w.dir); err != nil {
		m.t.Fatal(err)
	}
	w.boot = w.bootstrap(m.cp.SecureAddr())
	return w
}

// renew gets a new certificate over mTLS with the current one and rewrites
// the files; grpc-go's file_watcher picks them up.
func (w *workload) renew(ttl time.Duration) {
	t := w.meshRef.t
	t.Helper()
	cc := w.meshRef.dialCA(&w.pair.Certificate)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pair, err := caclient.Fetch(ctx, cc, caclient.Request{TTL: ttl})
	if err != nil {
		t.Fatalf("renewing %s/%s: %v", w.ns, w.sa, err)
	}
	if err := pair.WriteFiles(w.dir); err != nil {
		t.Fatal(err)
	}
	w.pair = pair
}

func (w *workload) id() string { return "spiffe://cluster.local/ns/" + w.ns + "/sa/" + w.sa }

// bootstrap is the grpc-go bootstrap a VM uses: xDS over mTLS on the secure
// port ("tls" channel creds, gRFC A65) and the "default" file_watcher
// certificate provider that vmesh's TLS contexts name.
func (w *workload) bootstrap(secureAddr string) []byte {
	files := map[string]any{
		"certificate_file":    filepath.Join(w.dir, caclient.CertChainFile),
		"private_key_file":    filepath.Join(w.dir, caclient.KeyFile),
		"ca_certificate_file": filepath.Join(w.dir, caclient.RootCertFile),
		"refresh_interval":    "0.1s",
	}
	md := map[string]any{"GENERATOR": "grpc", "NAMESPACE": w.ns, "SERVICE_ACCOUNT": w.sa}
	if len(w.labels) > 0 {
		md["LABELS"] = w.labels
	}
	b, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      secureAddr,
			"channel_creds":   []any{map[string]any{"type": "tls", "config": files}},
			"server_features": []string{"xds_v3"},
		}},
		"node":                                   map[string]any{"id": w.sa + "." + w.ns, "metadata": md},
		"certificate_providers":                  map[string]any{security.CertProviderInstance: map[string]any{"plugin_name": "file_watcher", "config": files}},
		"server_listener_resource_name_template": xds.InboundListenerPrefix + "%s",
	})
	if err != nil {
		panic(err)
	}
	return b
}

// idServer answers with its id and records the SPIFFE IDs of its callers.
type idServer struct {
	testpb.UnimplementedTestServiceServer
	mu      sync.Mutex
	callers []string
}

func (s *idServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	p, _ := peer.FromContext(ctx)
	caller := "plaintext"
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 && len(ti.State.PeerCertificates[0].URIs) > 0 {
		caller = ti.State.PeerCertificates[0].URIs[0].String()
	}
	s.mu.Lock()
	s.callers = append(s.callers, caller)
	s.mu.Unlock()
	return &testpb.SimpleResponse{ServerId: "echo"}, nil
}

func (s *idServer) lastCaller() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.callers) == 0 {
		return ""
	}
	return s.callers[len(s.callers)-1]
}

// serve runs an xDS-enabled gRPC server with xDS credentials on lis and
// waits until vmesh makes it SERVING.
func (w *workload) serve(lis net.Listener) *idServer {
	t := w.meshRef.t
	t.Helper()
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{})
	var once sync.Once
	gs, err := grpcxds.NewGRPCServer(grpc.Creds(creds), grpcxds.BootstrapContentsForTesting(w.boot),
		grpcxds.ServingModeCallback(func(_ net.Addr, args grpcxds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				once.Do(func() { close(serving) })
			} else if args.Err != nil {
				t.Logf("server not serving: %v", args.Err)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	srv := &idServer{}
	testpb.RegisterTestServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	select {
	case <-serving:
	case <-time.After(20 * time.Second):
		t.Fatal("xDS server never became SERVING")
	}
	return srv
}

// dial returns a client of xds:///target using xDS credentials.
func (w *workload) dial(target string) *grpc.ClientConn {
	t := w.meshRef.t
	t.Helper()
	res, err := grpcxds.NewXDSResolverWithConfigForTesting(w.boot)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(creds), grpc.WithResolvers(res))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// callOnce makes one call and returns the server's certificate, if any.
func callOnce(cc *grpc.ClientConn) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := testpb.NewTestServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Peer(&p)); err != nil {
		return nil, err
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		return ti.State.PeerCertificates[0], nil
	}
	return nil, nil
}

// callUntil retries until the call's status code is want (config and
// certificates reach the workloads asynchronously).
func callUntil(t *testing.T, cc *grpc.ClientConn, want codes.Code) (*x509.Certificate, error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cert, err := callOnce(cc)
		if status.Code(err) == want {
			return cert, err
		}
		if time.Now().After(deadline) {
			t.Fatalf("call: %v (code %s), want code %s", err, status.Code(err), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func secureConfig(port int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: secure}
spec:
  hosts: [echo.secure.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{name: grpc, number: 7070, protocol: GRPC, targetPort: %[1]d}]
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: pinned, namespace: secure}
spec:
  hosts: [pinned.secure.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{name: grpc, number: 7070, protocol: GRPC, targetPort: %[1]d}]
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: pinned, namespace: secure}
spec:
  host: pinned.secure.internal
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL, subjectAltNames: ["spiffe://cluster.local/ns/secure/sa/someone-else"]}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-1, namespace: secure}
spec:
  address: 127.0.0.1
  serviceAccount: echo
  labels: {app: echo}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: secure}
spec:
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-bad, namespace: secure}
spec:
  selector: {matchLabels: {app: echo}}
  action: DENY
  rules:
  - from: [{source: {principals: ["cluster.local/ns/secure/sa/bad"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-secure, namespace: secure}
spec:
  selector: {matchLabels: {app: echo}}
  action: ALLOW
  rules:
  - from: [{source: {namespaces: [secure]}}]
    to: [{operation: {paths: ["/grpc.testing.TestService/*"], ports: ["%[1]d"], methods: [POST]}}]
    when: [{key: "request.headers[x-forbidden]", notValues: ["*"]}]
`, port)
}

// TestMTLSEndToEnd: workloads enrolled with bootstrap tokens through the
// real CreateCertificate RPC talk over mTLS configured by vmesh (STRICT
// server listener, automatic mTLS on the client's cluster), each verifying
// the other's SPIFFE ID; an AuthorizationPolicy denies one service account;
// a plaintext client is rejected; a DestinationRule pinning another SAN
// makes the client refuse the server.
func TestMTLSEndToEnd(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	m := startSecureMesh(t, secureConfig(port))
	echo := m.enroll("secure", "echo", map[string]string{"app": "echo"}, time.Hour)
	good := m.enroll("secure", "good", nil, time.Hour)
	bad := m.enroll("secure", "bad", nil, time.Hour)
	srv := echo.serve(lis)

	cert, _ := callUntil(t, good.dial("echo.secure.internal:7070"), codes.OK)
	if cert == nil || len(cert.URIs) != 1 || cert.URIs[0].String() != echo.id() {
		t.Fatalf("client saw server certificate %v, want SPIFFE ID %s", cert, echo.id())
	}
	if got := srv.lastCaller(); got != good.id() {
		t.Fatalf("server saw caller %q, want %s", got, good.id())
	}

	_, err = callUntil(t, bad.dial("echo.secure.internal:7070"), codes.PermissionDenied)
	t.Logf("denied service account: %v", err)

	// The ALLOW policy admits only namespace secure, without x-forbidden.
	outsider := m.enroll("other", "client", nil, time.Hour)
	_, err = callUntil(t, outsider.dial("echo.secure.internal:7070"), codes.PermissionDenied)
	t.Logf("other namespace: %v", err)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-forbidden", "1"), 5*time.Second)
	defer cancel()
	if _, err := testpb.NewTestServiceClient(good.dial("echo.secure.internal:7070")).UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.WaitForReady(true)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("call with x-forbidden: %v, want PermissionDenied", err)
	}

	// Plaintext straight to the STRICT server fails the handshake.
	plain, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := callOnce(plain); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext client: %v, want Unavailable", err)
	}
	// A TLS client without a mesh certificate is refused too.
	noCert, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: m.cp.CA().TrustBundle().CertPool(), ServerName: "echo", InsecureSkipVerify: true, //nolint:gosec // the server's identity is not what is tested
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	if _, err := callOnce(noCert); err == nil {
		t.Fatal("TLS client without a certificate was served by a STRICT server")
	}

	// SAN verification: the pinned host's DestinationRule accepts only
	// another identity, so the client refuses the echo server.
	pinned := good.dial("pinned.secure.internal:7070")
	_, err = callUntil(t, pinned, codes.Unavailable)
	t.Logf("pinned SAN mismatch: %v", err)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, c := range srv.callers {
		if c == "plaintext" || c == bad.id() || c == outsider.id() {
			t.Fatalf("the server handled a call it must not have: %s", c)
		}
	}
}

// TestMTLSRotation: with a short certificate TTL, a server and a client keep
// working across several rotations (renewed over mTLS with the current
// certificate, files rewritten, picked up by file_watcher), with no restart:
// new connections see each new server certificate.
func TestMTLSRotation(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	m := startSecureMesh(t, secureConfig(port))
	const ttl = 3 * time.Second
	echo := m.enroll("secure", "echo", map[string]string{"app": "echo"}, ttl)
	good := m.enroll("secure", "good", nil, ttl)
	srv := echo.serve(lis)
	long := good.dial("echo.secure.internal:7070")
	if _, err := callUntil(t, long, codes.OK); err != nil {
		t.Fatal(err)
	}
	first := echo.pair.Leaf.NotAfter
	seen := map[string]bool{}
	for round := range 4 {
		echo.renew(ttl)
		good.renew(ttl)
		want := echo.pair.Leaf.SerialNumber.String()
		// A fresh channel makes a fresh handshake, which must present the
		// renewed server certificate.
		deadline := time.Now().Add(10 * time.Second)
		for {
			cc := good.dial("echo.secure.internal:7070")
			cert, err := callOnce(cc)
			cc.Close()
			if err == nil && cert != nil && cert.SerialNumber.String() == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: server never presented the renewed certificate %s (last: %v, %v)", round, want, cert, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		seen[want] = true
		if got := srv.lastCaller(); got != good.id() {
			t.Fatalf("round %d: caller %q", round, got)
		}
		if _, err := callOnce(long); err != nil {
			t.Fatalf("round %d: the long-lived channel failed: %v", round, err)
		}
		time.Sleep(ttl / 3)
	}
	if len(seen) != 4 {
		t.Fatalf("rotations seen: %d, want 4", len(seen))
	}
	if time.Now().Before(first) {
		t.Fatalf("the test ended before the first certificate expired (%s); rotation was not needed", first)
	}
	// After every earlier certificate expired, a new connection still works.
	cc := good.dial("echo.secure.internal:7070")
	if _, err := callUntil(t, cc, codes.OK); err != nil {
		t.Fatal(err)
	}
}
