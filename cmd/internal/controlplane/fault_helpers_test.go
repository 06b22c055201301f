package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	zk "github.com/go-zookeeper/zk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// runPlane runs a control plane from cfg until stop or the end of the test,
// on ports of the kernel's choosing: xdsAddr, when not empty, is the xDS
// address (a restart passes the first run's). Its DataDir is a fresh
// folder; a nil logger records quietly.
func runPlane(t *testing.T, cfg controlplane.Config, xdsAddr string, logger *slog.Logger) (*controlplane.ControlPlane, func()) {
	t.Helper()
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	if xdsAddr != "" {
		cfg.XDSAddr = xdsAddr
	}
	cfg.DataDir = t.TempDir()
	if logger == nil {
		_, logger = newLogRecorder()
	}
	cfg.DebounceQuiet, cfg.DebounceMax = 20*time.Millisecond, 200*time.Millisecond
	return runUntilCleanup(t, cfg, logger)
}

// runUntilCleanup starts a control plane of cfg and returns it with a stop
// function that waits (up to 10 s) for Run to end; the test's cleanup
// stops it too.
func runUntilCleanup(t *testing.T, cfg controlplane.Config, logger *slog.Logger) (*controlplane.ControlPlane, func()) {
	t.Helper()
	cp, err := controlplane.New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("the control plane did not stop within 10 s")
			}
		})
	}
	t.Cleanup(stop)
	return cp, stop
}

// logRecorder is a slog handler counting messages, so a test can wait on a
// log line; it writes them to stderr too when VMESH_TEST_DEBUG is set (a
// NACK storm logs thousands).
type logRecorder struct {
	mu   sync.Mutex
	msgs map[string]int
	out  slog.Handler
}

func newLogRecorder() (*logRecorder, *slog.Logger) {
	r := &logRecorder{msgs: map[string]int{}}
	if os.Getenv("VMESH_TEST_DEBUG") != "" {
		r.out = slog.NewTextHandler(os.Stderr, nil)
	}
	return r, slog.New(r)
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(ctx context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs[rec.Message]++
	r.mu.Unlock()
	if r.out != nil && rec.Level >= slog.LevelInfo {
		return r.out.Handle(ctx, rec)
	}
	return nil
}

// count returns how often msg was logged.
func (r *logRecorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msgs[msg]
}

// waitUntil polls cond until it holds or timeout passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// caller makes a unary call every few milliseconds, as an application
// would, and counts what succeeded, what failed and who answered.
type caller struct {
	name   string
	mu     sync.Mutex
	ok     int
	failed int
	errs   []string // the first few failures
	by     map[string]int
	stop   context.CancelFunc
	done   chan struct{}
}

// startCaller calls c until the test ends; every call must succeed.
func startCaller(t *testing.T, name string, c testpb.TestServiceClient) *caller {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cl := &caller{name: name, by: map[string]int{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(cl.done)
		tick := time.NewTicker(5 * time.Millisecond) // pacing, not synchronisation
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := c.UnaryCall(cctx, &testpb.SimpleRequest{})
			ccancel()
			if ctx.Err() != nil {
				return // cancelled by stop: not the data plane's failure
			}
			cl.mu.Lock()
			if err != nil {
				cl.failed++
				if len(cl.errs) < 5 {
					cl.errs = append(cl.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
				}
			} else {
				cl.ok++
				cl.by[resp.GetServerId()]++
			}
			cl.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cl.stop(); <-cl.done })
	return cl
}

func (c *caller) counts() (ok int, by map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	by = make(map[string]int, len(c.by))
	for k, v := range c.by {
		by[k] = v
	}
	return c.ok, by
}

// waitCalls waits until n more calls have succeeded.
func (c *caller) waitCalls(t *testing.T, n int, what string) {
	t.Helper()
	start, _ := c.counts()
	waitUntil(t, 30*time.Second, fmt.Sprintf("%d more successful calls of %s %s", n, c.name, what), func() bool {
		ok, _ := c.counts()
		return ok >= start+n
	})
}

// waitServer waits until backend id has answered n more calls.
func (c *caller) waitServer(t *testing.T, id string, n int, what string) {
	t.Helper()
	_, by := c.counts()
	start := by[id]
	waitUntil(t, 30*time.Second, fmt.Sprintf("%s answering %d calls of %s %s", id, n, c.name, what), func() bool {
		_, by := c.counts()
		return by[id] >= start+n
	})
}

// checkNoneFailed stops the caller and fails the test if a call failed.
func (c *caller) checkNoneFailed(t *testing.T) {
	t.Helper()
	c.stop()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed > 0 {
		t.Errorf("%s: %d of %d calls failed, first: %v", c.name, c.failed, c.ok+c.failed, c.errs)
	}
	if c.ok == 0 {
		t.Errorf("%s: no call succeeded", c.name)
	}
	t.Logf("%s: %d calls, none failed, answered by %v", c.name, c.ok, c.by)
}

// syncz reads the control plane's /debug/syncz.
func syncz(t *testing.T, cp *controlplane.ControlPlane) []xds.SyncStatus {
	t.Helper()
	resp, err := http.Get("http://" + cp.HTTPAddr() + "/debug/syncz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []xds.SyncStatus
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// inSync reports whether proxy id is connected and has ACKed the last
// response of every type in types, with no NACK outstanding.
func inSync(st []xds.SyncStatus, id string, types ...string) bool {
	for _, s := range st {
		if s.ID != id {
			continue
		}
		for _, typ := range types {
			ts := s.Types[typ]
			if ts == nil || ts.Sent == "" || ts.Acked != ts.Sent || ts.Nack != "" {
				return false
			}
		}
		return true
	}
	return false
}

// edsAcked returns the EDS version connected proxy id last ACKed.
func edsAcked(t *testing.T, cp *controlplane.ControlPlane, id string) string {
	t.Helper()
	for _, s := range syncz(t, cp) {
		if s.ID == id && s.Types["EDS"] != nil && s.Types["EDS"].Acked != "" {
			return s.Types["EDS"].Acked
		}
	}
	t.Fatalf("%s is not connected or has ACKed no EDS", id)
	return ""
}

// echoConfig writes the ServiceEntry echo.fault.internal:50051 and one
// WorkloadEntry per backend into dir, atomically.
func echoConfig(t *testing.T, dir string, backends ...*xdstest.Backend) {
	t.Helper()
	var b strings.Builder
	b.WriteString(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.fault.internal]
  location: MESH_INTERNAL
  ports: [{number: 50051, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
`)
	for _, be := range backends {
		fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: %s, namespace: default}\nspec: {address: 127.0.0.1, ports: {grpc: %d}, labels: {app: echo}}\n", be.ID, be.Port)
	}
	tmp := filepath.Join(dir, ".echo.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "echo.yaml")); err != nil {
		t.Fatal(err)
	}
}

const echoTarget = "echo.fault.internal:50051"

// node is a proxyless gRPC node in namespace default.
func node(id string) *corev3.Node {
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": "default"})
	return &corev3.Node{Id: id, Metadata: md}
}

// adsStream opens a raw ADS stream to addr, closed when the test ends.
func adsStream(t *testing.T, addr string) (discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, func()) {
	t.Helper()
	stream, closeFn, err := dialADS(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return stream, closeFn
}

// dialADS opens a raw ADS stream on a connection of its own; the caller
// closes both with the returned function. It holds nothing once closed, so a
// test opening thousands leaves nothing behind itself.
func dialADS(addr string) (discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, func(), error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		cc.Close()
		return nil, nil, err
	}
	var once sync.Once
	return stream, func() { once.Do(func() { cancel(); cc.Close() }) }, nil
}

// recvWithin receives one response or fails the test after timeout.
func recvWithin(t *testing.T, stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, timeout time.Duration) (*discoveryv3.DiscoveryResponse, error) {
	t.Helper()
	type result struct {
		resp *discoveryv3.DiscoveryResponse
		err  error
	}
	c := make(chan result, 1)
	go func() { r, err := stream.Recv(); c <- result{r, err} }()
	select {
	case r := <-c:
		return r.resp, r.err
	case <-time.After(timeout):
		t.Fatalf("no response within %s", timeout) // the caller names what it waited for
		return nil, nil
	}
}

// liveHeap returns the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// settleGoroutines waits until at most max goroutines run, and prints the
// goroutines left if they do not settle.
func settleGoroutines(t *testing.T, max int, what string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= max {
			return n
		}
		if time.Now().After(deadline) {
			var buf bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
			out := buf.String()
			if len(out) > 12000 {
				out = out[:12000]
			}
			t.Fatalf("%s: %d goroutines after 20 s, want <= %d:\n%s", what, n, max, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const mib = 1 << 20

// registryConnected reads /debug/registries: whether every registry
// answers.
func registryConnected(t *testing.T, cp *controlplane.ControlPlane) bool {
	t.Helper()
	resp, err := http.Get("http://" + cp.HTTPAddr() + "/debug/registries")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Registries []adapter.Status `json:"registries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Registries {
		if !r.Connected {
			return false
		}
	}
	return len(out.Registries) > 0
}

// zkSessions returns ZooKeeper's count of open sessions (mntr's
// zk_global_sessions), -1 when it does not answer.
func zkSessions(addr string) int {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return -1
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("mntr")); err != nil {
		return -1
	}
	out, _ := io.ReadAll(c)
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "zk_global_sessions\t"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	return -1
}

// dubboWriter registers Dubbo providers of one interface in ZooKeeper, as
// the providers' own Dubbo runtime would (as persistent nodes, so that the
// writer's own sessions do not matter).
type dubboWriter struct {
	addr  string
	iface string
}

const dubboEcho = "org.vmesh.fault.Echo"

// zkQuiet drops the ZooKeeper client's log lines: the writer's reconnects
// while a test kills the server are expected.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// newDubboWriter creates the interface's nodes in the ZooKeeper at addr.
func newDubboWriter(t *testing.T, addr string) *dubboWriter {
	t.Helper()
	w := &dubboWriter{addr: addr, iface: dubboEcho}
	w.create(t, "/dubbo", "/dubbo/"+w.iface, "/dubbo/"+w.iface+"/providers")
	return w
}

// session returns a connection with a session. A server that accepts the
// connection but does not answer the session request (seen now and then
// right after ZooKeeper starts on a loaded machine) would hold the client
// for ten receive timeouts: a connection without a session after 8 s is
// dropped for a new one.
func (w *dubboWriter) session(t *testing.T) *zk.Conn {
	t.Helper()
	var tried []string
	for range 4 {
		var mu sync.Mutex
		var states []string
		c, _, err := zk.Connect([]string{w.addr}, 4*time.Second, zk.WithLogger(zkQuiet{}), zk.WithEventCallback(func(ev zk.Event) {
			mu.Lock()
			states = append(states, ev.State.String())
			mu.Unlock()
		}))
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(8 * time.Second)
		for c.State() != zk.StateHasSession && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if c.State() == zk.StateHasSession {
			return c
		}
		c.Close()
		// The client may still report states while it closes: read them
		// under the callback's lock.
		mu.Lock()
		seen := fmt.Sprint(states)
		mu.Unlock()
		tried = append(tried, seen)
		t.Logf("no ZooKeeper session with %s within 8 s (states %s); connecting again", w.addr, seen)
	}
	t.Fatalf("no ZooKeeper session with %s: states seen %v", w.addr, tried)
	return nil
}

// create makes persistent nodes in a session of their own.
func (w *dubboWriter) create(t *testing.T, paths ...string) {
	t.Helper()
	conn := w.session(t)
	defer conn.Close()
	for _, p := range paths {
		var last error
		waitUntil(t, 20*time.Second, "creating "+p, func() bool {
			_, last = conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
			return last == nil || errors.Is(last, zk.ErrNodeExists)
		})
	}
}

// provide registers backend b as a Dubbo triple (gRPC) provider.
func (w *dubboWriter) provide(t *testing.T, b *xdstest.Backend) {
	t.Helper()
	u := fmt.Sprintf("tri://127.0.0.1:%d/%s?interface=%s&application=echo&side=provider", b.Port, w.iface, w.iface)
	w.create(t, "/dubbo/"+w.iface+"/providers/"+url.QueryEscape(u))
}

// dubboTarget is the xDS target of the Dubbo echo interface served on
// port (its first provider's).
func dubboTarget(port int) string {
	return fmt.Sprintf("%s:%d", strings.ToLower(dubboEcho), port)
}

// dumpOnFailure logs, when the test fails, what the control plane knows:
// its registries, WorkloadEntries and proxies' sync state.
func dumpOnFailure(t *testing.T, cp *controlplane.ControlPlane) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if _, body := get(t, "http://"+cp.HTTPAddr()+"/debug/registries"); body != "" {
			t.Logf("/debug/registries:\n%s", body)
		}
		for _, o := range cp.Store().Snapshot().List(store.KindWorkloadEntry) {
			t.Logf("WorkloadEntry %s healthy=%v %v", o.Key, o.Healthy, o.Spec)
		}
		b, _ := json.Marshal(syncz(t, cp))
		t.Logf("/debug/syncz: %s", b)
	})
}
