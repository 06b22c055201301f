package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/caclient"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/sharedstate"
)

// TestReplicasConsul and TestReplicasZooKeeper run three `vmesh serve`
// control planes (the serve path in process) sharing state through a real
// Consul dev agent or a real ZooKeeper, with a real agent and grpc-go xDS
// clients spread over them.
func TestReplicasConsul(t *testing.T) {
	c := testenv.StartConsul(t)
	testReplicas(t, sharedstate.Spec{Type: sharedstate.TypeConsul, TTL: 10 * time.Second}, c.HTTPAddr)
}

func TestReplicasZooKeeper(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	testReplicas(t, sharedstate.Spec{Type: sharedstate.TypeZooKeeper, TTL: 3 * time.Second}, z.Addr)
}

const replicasMesh = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ledger, namespace: fin}
spec:
  hosts: [ledger.fin.internal]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: ledger}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: ledger, namespace: fin}
spec:
  metadata: {labels: {app: ledger}}
  template:
    ports: {grpc: %[1]s}
    serviceAccount: ledger
  probe:
    periodSeconds: 1
    tcpSocket: {port: %[1]s}
`

// grace is the replicas' registration grace period, the longest a client
// on a live replica may lose the VM.
const grace = 3 * time.Second

type testReplica struct {
	id      string
	dataDir string
	cp      *controlplane.ControlPlane
	state   *testenv.Proxy // the replica's way to the shared state
	stop    context.CancelFunc
	done    chan error
}

func startTestReplica(t *testing.T, id, configDir, cacerts string, spec sharedstate.Spec, target string) *testReplica {
	t.Helper()
	r := &testReplica{id: id, state: testenv.StartProxy(t, target), done: make(chan error, 1)}
	spec.Address = r.state.Addr
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = configDir
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	r.dataDir = cfg.DataDir
	cfg.CA.CACertsDir = cacerts
	cfg.DebounceQuiet, cfg.DebounceMax = 20*time.Millisecond, 200*time.Millisecond
	cfg.RegistrationGrace = grace
	cfg.State, cfg.ReplicaID = &spec, id
	cp, err := controlplane.New(cfg, replicaLogger(t, id))
	if err != nil {
		t.Fatal(err)
	}
	r.cp = cp
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { r.done <- cp.Run(ctx) }()
	t.Cleanup(r.kill)
	deadline := time.Now().Add(30 * time.Second)
	for !cp.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not ready", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

// kill stops the replica as a crash would for the shared state: its way
// there is cut first, so it cleans nothing up and its session must expire.
func (r *testReplica) kill() {
	r.state.Cut()
	r.stop()
	<-r.done
	r.done <- nil
}

func replicaLogger(t *testing.T, id string) *slog.Logger {
	if testing.Verbose() && os.Getenv("VMESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil)).With("replica", id)
	}
	return slog.New(slog.DiscardHandler)
}

// front is a TCP front for several replicas, as one DNS name with several
// addresses is: each new connection goes to the first that accepts.
type front struct {
	Addr    string
	ln      net.Listener
	targets []string
	mu      sync.Mutex
	conns   map[net.Conn]bool
}

func startFront(t *testing.T, targets ...string) *front {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &front{Addr: ln.Addr().String(), ln: ln, targets: targets, conns: map[net.Conn]bool{}}
	go f.accept()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
	})
	return f
}

func (f *front) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			for _, tgt := range f.targets {
				up, err := net.DialTimeout("tcp", tgt, time.Second)
				if err != nil {
					continue
				}
				f.mu.Lock()
				f.conns[c], f.conns[up] = true, true
				f.mu.Unlock()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
				c.Close()
				return
			}
			c.Close()
		}()
	}
}

// writePluginCA writes an Istio plug-in cacerts directory (a root and one
// intermediate made now) that the replicas share.
func writePluginCA(t *testing.T) string {
	t.Helper()
	now := time.Now()
	mk := func(cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		sn, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
		tmpl := &x509.Certificate{SerialNumber: sn, Subject: pkix.Name{CommonName: cn, Organization: []string{"vmesh test"}},
			NotBefore: now, NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature}
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(der)
		return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	root, rootKey, rootPEM := mk("mesh root", nil, nil)
	_, midKey, midPEM := mk("replicas intermediate", root, rootKey)
	keyDER, err := x509.MarshalECPrivateKey(midKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		ca.PluginCACertFile: midPEM, ca.PluginCAKeyFile: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		ca.PluginCertChainFile: append(append([]byte{}, midPEM...), rootPEM...), ca.PluginRootCertFile: rootPEM,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type ledgerApp struct {
	testpb.UnimplementedTestServiceServer
}

func (ledgerApp) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{ServerId: "ledger-vm"}, nil
}

// outage records the longest time a condition, once true, was false.
type outage struct {
	mu      sync.Mutex
	seen    bool
	since   time.Time
	longest time.Duration
}

func (o *outage) observe(ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	switch {
	case ok && o.seen && !o.since.IsZero():
		o.longest = max(o.longest, now.Sub(o.since))
		o.since = time.Time{}
	case ok:
		o.seen = true
	case o.seen && o.since.IsZero():
		o.since = now
	}
}

func (o *outage) max() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.since.IsZero() {
		return max(o.longest, time.Since(o.since))
	}
	return o.longest
}

func testReplicas(t *testing.T, spec sharedstate.Spec, target string) {
	appLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, appPort, _ := net.SplitHostPort(appLis.Addr().String())
	app := grpc.NewServer()
	testpb.RegisterTestServiceServer(app, ledgerApp{})
	go func() { _ = app.Serve(appLis) }()
	t.Cleanup(app.Stop)

	configDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(configDir, "ledger.yaml"), []byte(fmt.Sprintf(replicasMesh, appPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	cacerts := writePluginCA(t)
	a := startTestReplica(t, "A", configDir, cacerts, spec, target)
	b := startTestReplica(t, "B", configDir, cacerts, spec, target)
	c := startTestReplica(t, "C", configDir, cacerts, spec, target)

	// Clients: one on each replica; the one on A reaches it through a front
	// for the three (one name, several addresses), as the agent does.
	xdsFront := startFront(t, a.cp.XDSAddr(), b.cp.XDSAddr(), c.cp.XDSAddr())
	clients := map[string]testpb.TestServiceClient{
		"A": xdstest.Dial(t, xdsFront.Addr, xdstest.Node{ID: "teller-a", Namespace: "fin"}, "ledger.fin.internal:7070"),
		"B": xdstest.Dial(t, b.cp.XDSAddr(), xdstest.Node{ID: "teller-b", Namespace: "fin"}, "ledger.fin.internal:7070"),
		"C": xdstest.Dial(t, c.cp.XDSAddr(), xdstest.Node{ID: "teller-c", Namespace: "fin"}, "ledger.fin.internal:7070"),
	}

	// The VM's agent, onboarded by A: its bundle lists A's secure port,
	// then B's and C's to fail over to.
	bundleDir := filepath.Join(t.TempDir(), "bundle")
	if _, err := a.cp.CA().WriteVMBundle(bundleDir, ca.VMBundleRequest{Namespace: "fin", ServiceAccount: "ledger", WorkloadGroup: "ledger", DiscoveryAddress: a.cp.SecureAddr(), FailoverAddresses: []string{b.cp.SecureAddr(), c.cp.SecureAddr()}}); err != nil {
		t.Fatal(err)
	}
	probe := health.Probe{TCP: &health.TCPSocket{Port: int(mustPort(t, appPort))}, Period: 200 * time.Millisecond, Timeout: time.Second, SuccessThreshold: 1, FailureThreshold: 1}
	agentCtx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- agent.Run(agentCtx, agent.Config{
			BundleDir: bundleDir, OutDir: t.TempDir(), SocketDir: shortDir(t), IPs: []string{"127.0.0.1"},
			WorkloadName: "ledger-vm-1", DisableEnvoy: true, Probe: &probe,
			RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	}()
	t.Cleanup(func() { stopAgent(); <-agentDone })

	key := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: "ledger-127.0.0.1"}
	endpoint := func(r *testReplica, source string) bool {
		o := r.cp.Store().Snapshot().Get(key)
		return o != nil && o.Healthy != nil && *o.Healthy && (source == "" || o.Origin.Source == source)
	}
	waitUntil(t, 30*time.Second, "the VM registered through A and healthy", func() bool { return endpoint(a, sharedstate.LocalSource) })
	registered := time.Now()

	// A VM registered through A is an endpoint for a client on C within 2s.
	reachC := xdstest.CallUntil(t, clients["C"], 2*time.Second)
	if took := time.Since(registered); reachC != "ledger-vm" || took > 2*time.Second {
		t.Fatalf("client on C reached %q after %s", reachC, took)
	} else {
		t.Logf("registered through A → endpoint for a client on C: %s", took)
	}
	if o := c.cp.Store().Snapshot().Get(key); o.Origin.Source != sharedstate.Source.Name || !strings.HasPrefix(o.Origin.Registry, "replica A: ") {
		t.Fatalf("C's entry does not name replica A: %+v", o.Origin)
	}
	for _, id := range []string{"A", "B"} {
		if got := xdstest.CallUntil(t, clients[id], 10*time.Second); got != "ledger-vm" {
			t.Fatalf("client on %s reached %q", id, got)
		}
	}

	// From here on, watch every client and B's and C's endpoint.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var watchers sync.WaitGroup
	outages := map[string]*outage{}
	watch := func(name string, every time.Duration, ok func() bool) {
		o := &outage{}
		outages[name] = o
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			for watchCtx.Err() == nil {
				o.observe(ok())
				time.Sleep(every)
			}
		}()
	}
	for _, r := range []*testReplica{b, c} {
		watch("endpoint on "+r.id, 10*time.Millisecond, func() bool { return endpoint(r, "") })
	}
	for id, cl := range clients {
		watch("client on "+id, 50*time.Millisecond, func() bool {
			ctx, cancel := context.WithTimeout(watchCtx, time.Second)
			defer cancel()
			resp, err := cl.UnaryCall(ctx, &testpb.SimpleRequest{})
			return err == nil && resp.GetServerId() == "ledger-vm"
		})
	}
	defer stopWatch()

	// A token revoked through the shared state (vmesh ca revoke --state)
	// is refused by A and C within 5s.
	directSpec := spec
	directSpec.Address = target
	tok, claims, err := b.cp.CA().CreateToken(ca.TokenRequest{Namespace: "fin", ServiceAccount: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*testReplica{a, c} {
		if _, err := r.cp.CA().VerifyToken(tok); err != nil {
			t.Fatalf("replica %s refuses the shared CA's token before revocation: %v", r.id, err)
		}
	}
	if out, code := runVMesh(t, "ca", "revoke", "--state", directSpec.String(), "--cacerts-dir", cacerts, "--token", claims.ID, "--reason", "lost laptop"); code != 0 || !strings.Contains(out, "revoked token") {
		t.Fatalf("vmesh ca revoke --state: exit %d: %s", code, out)
	}
	revoked := time.Now()
	for _, r := range []*testReplica{a, c} {
		waitUntil(t, 5*time.Second, "replica "+r.id+" refuses the revoked token", func() bool {
			_, err := r.cp.CA().VerifyToken(tok)
			return err != nil && strings.Contains(err.Error(), "revoked")
		})
	}
	t.Logf("token revoked through the shared state → refused by A and C: %s", time.Since(revoked))
	if out, code := runVMesh(t, "ca", "revocations", "--state", directSpec.String(), "--cacerts-dir", cacerts, "-o", "json"); code != 0 || !strings.Contains(out, claims.ID) {
		t.Fatalf("vmesh ca revocations --state: exit %d: %s", code, out)
	}
	// A token revoked through B itself (vmesh ca revoke on B's data dir):
	// refused by A and C within 5s.
	tok2, claims2, err := b.cp.CA().CreateToken(ca.TokenRequest{Namespace: "fin", ServiceAccount: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	if out, code := runVMesh(t, "ca", "revoke", "--data-dir", b.dataDir, "--cacerts-dir", cacerts, "--token", claims2.ID); code != 0 {
		t.Fatalf("vmesh ca revoke --data-dir B: exit %d: %s", code, out)
	}
	revoked = time.Now()
	for _, r := range []*testReplica{a, c} {
		waitUntil(t, 5*time.Second, "replica "+r.id+" refuses the token revoked through B", func() bool {
			_, err := r.cp.CA().VerifyToken(tok2)
			return err != nil && strings.Contains(err.Error(), "revoked")
		})
	}
	t.Logf("token revoked through B → refused by A and C: %s", time.Since(revoked))

	// A certificate issued through A renews on B; its serial revoked
	// through the shared state is refused by B within 5s.
	roots := x509.NewCertPool()
	rootPEM, err := os.ReadFile(filepath.Join(cacerts, ca.PluginRootCertFile))
	if err != nil || !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("root: %v", err)
	}
	fetch := func(addr string, client *tls.Certificate, token string) (*caclient.KeyPair, error) {
		cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
		if client != nil {
			cfg.Certificates = []tls.Certificate{*client}
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return caclient.Fetch(ctx, conn, caclient.Request{Token: token})
	}
	certTok, _, err := b.cp.CA().CreateToken(ca.TokenRequest{Namespace: "fin", ServiceAccount: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	fromA, err := fetch(a.cp.SecureAddr(), nil, certTok)
	if err != nil {
		t.Fatalf("certificate from A: %v", err)
	}
	if _, err := fetch(b.cp.SecureAddr(), &fromA.Certificate, ""); err != nil {
		t.Fatalf("renewal on B of a certificate A issued: %v", err)
	}
	if out, code := runVMesh(t, "ca", "revoke", "--state", directSpec.String(), "--cacerts-dir", cacerts, "--serial", fromA.Leaf.SerialNumber.Text(16)); code != 0 {
		t.Fatalf("vmesh ca revoke --serial: exit %d: %s", code, out)
	}
	waitUntil(t, 5*time.Second, "B refuses renewing the revoked certificate", func() bool {
		_, err := fetch(b.cp.SecureAddr(), &fromA.Certificate, "")
		return err != nil && strings.Contains(err.Error(), "revoked")
	})

	// /debug/replicas on B lists the three.
	waitUntil(t, 10*time.Second, "B's /debug/replicas lists A, B and C", func() bool {
		var st sharedstate.Status
		return getJSON(b.cp.HTTPAddr(), "/debug/replicas", &st) == nil && len(st.Replicas) == 3 && st.Self == "B" &&
			st.Replicas[0].ID == "A" && st.Replicas[0].XDSAddr == a.cp.XDSAddr()
	})

	// A dies. Its agent registers through B; the client on A moves.
	aHTTP := a.cp.HTTPAddr()
	killed := time.Now()
	a.kill()
	waitUntil(t, 15*time.Second, "the agent re-registered through B", func() bool { return endpoint(b, sharedstate.LocalSource) })
	t.Logf("A killed → the agent registered through B: %s", time.Since(killed))
	waitUntil(t, 10*time.Second-time.Since(killed), "the client that was on A served by B or C", func() bool {
		for _, r := range []*testReplica{b, c} {
			st, err := syncz(r.cp.HTTPAddr())
			if err != nil {
				continue
			}
			for _, s := range st {
				if s.ID == "teller-a" {
					return true
				}
			}
		}
		return false
	})
	t.Logf("A killed → its client served by another replica: %s", time.Since(killed))
	// A's session expires: its record leaves the shared state.
	waitUntil(t, 2*spec.TTL+10*time.Second, "A's record expired", func() bool {
		var st sharedstate.Status
		return getJSON(c.cp.HTTPAddr(), "/debug/replicas", &st) == nil && len(st.Replicas) == 2
	})
	t.Logf("A killed → its session expired: %s", time.Since(killed))
	// A little longer, with C now serving B's entry only.
	waitUntil(t, 10*time.Second, "C serves B's registration", func() bool {
		o := c.cp.Store().Snapshot().Get(key)
		return o != nil && strings.HasPrefix(o.Origin.Registry, "replica B: ")
	})
	time.Sleep(500 * time.Millisecond)
	stopWatch()
	watchers.Wait()
	for name, o := range outages {
		t.Logf("%s: longest outage %s", name, o.max())
		if o.max() > grace {
			t.Errorf("%s lost the VM for %s, longer than the grace period %s", name, o.max(), grace)
		}
	}

	// vmesh status over the three: A named unreachable, B and C listed.
	out, code := runVMesh(t, "status", "--server", aHTTP, "--server", b.cp.HTTPAddr(), "--server", c.cp.HTTPAddr(), "-o", "json")
	var report statusReport
	if err := json.Unmarshal([]byte(out), &report); err != nil || code != 1 {
		t.Fatalf("status: exit %d, %v\n%s", code, err, out)
	}
	if len(report.Replicas) != 3 || report.Replicas[0].Error == "" || report.Replicas[1].ID != "B" || report.Replicas[2].ID != "C" ||
		report.Replicas[1].Error != "" || report.Replicas[2].Error != "" {
		t.Fatalf("status over A (dead), B, C: %s", out)
	}
	table, _ := runVMesh(t, "status", "--server", aHTTP, "--server", b.cp.HTTPAddr(), "--server", c.cp.HTTPAddr())
	if !strings.Contains(table, aHTTP+"\tunreachable") && !strings.Contains(table, "unreachable: ") {
		t.Fatalf("status table does not name A unreachable:\n%s", table)
	}
	t.Logf("vmesh status with A dead:\n%s", table)
	// Asked about B alone, status still names C, which the shared state knows.
	out, code = runVMesh(t, "status", "--server", b.cp.HTTPAddr(), "-o", "json")
	report = statusReport{}
	if err := json.Unmarshal([]byte(out), &report); err != nil || code != 0 || len(report.Unlisted) != 1 ||
		report.Unlisted[0].ID != "C" || report.Unlisted[0].HTTPAddr != c.cp.HTTPAddr() {
		t.Fatalf("status --server B: exit %d, %v\n%s", code, err, out)
	}
	// C loses its shared state: status says so on C's line.
	c.state.Cut()
	out, _ = runVMesh(t, "status", "--server", c.cp.HTTPAddr(), "-o", "json")
	report = statusReport{}
	if err := json.Unmarshal([]byte(out), &report); err != nil || len(report.Replicas) != 1 || report.Replicas[0].StateError == "" {
		t.Fatalf("status of a replica cut from its shared state: %v\n%s", err, out)
	}
	if table, _ := runVMesh(t, "status", "--server", c.cp.HTTPAddr()); !strings.Contains(table, "shared state failing: ") {
		t.Fatalf("the table does not say the shared state fails:\n%s", table)
	}
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustPort(t *testing.T, s string) uint32 {
	var n uint32
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// shortDir is a temp dir short enough for Unix socket paths.
func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("/tmp", "vm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
