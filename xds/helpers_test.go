package xds_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"
)

// testLogger logs to the test when -v, else discards.
func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// mesh is a running vmesh xDS server over a Store.
type mesh struct {
	t     *testing.T
	store *store.Store
	srv   *xds.Server
	addr  string
	reg   *prometheus.Registry
	debug *httptest.Server
}

// startMesh serves store over xDS on a loopback port until the test ends.
func startMesh(t *testing.T, ctx context.Context, store *store.Store) *mesh {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv, err := xds.NewServer(xds.Options{Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := model.NewFeed(store, model.FeedSettings{DebounceQuiet: 20 * time.Millisecond, DebounceMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Run(ctx, feed) }()
	go func() { defer wg.Done(); _ = srv.Serve(ctx, lis) }()
	mux := http.NewServeMux()
	mux.Handle("/debug/syncz", srv.SynczHandler())
	mux.Handle("/debug/config_dump", srv.ConfigDumpHandler())
	debug := httptest.NewServer(mux)
	t.Cleanup(func() { debug.Close(); cancel(); wg.Wait() })
	return &mesh{t: t, store: store, srv: srv, addr: lis.Addr().String(), reg: reg, debug: debug}
}

// holds reports whether /debug/config_dump says proxy holds resource name
// of short type typ (e.g. "EDS") on any of its streams.
func (m *mesh) holds(proxy, typ, name string) bool {
	m.t.Helper()
	resp, err := http.Get(m.debug.URL + "/debug/config_dump?proxy=" + proxy)
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	var dump xds.ConfigDump
	if err := json.NewDecoder(resp.Body).Decode(&dump); err != nil {
		m.t.Fatal(err)
	}
	for _, st := range dump.Streams {
		if _, ok := st.Versions[typ][name]; ok {
			return true
		}
	}
	return false
}

// syncz fetches /debug/syncz over HTTP.
func (m *mesh) syncz() []xds.SyncStatus {
	m.t.Helper()
	resp, err := http.Get(m.debug.URL + "/debug/syncz")
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []xds.SyncStatus
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		m.t.Fatal(err)
	}
	return out
}

// bootstrap returns grpc-go bootstrap JSON for a proxyless gRPC node.
func bootstrap(xdsAddr, nodeID, ns string, labels map[string]string) []byte {
	b, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      xdsAddr,
			"channel_creds":   []any{map[string]any{"type": "insecure"}},
			"server_features": []string{"xds_v3"},
		}},
		"node": map[string]any{
			"id": nodeID,
			"metadata": map[string]any{
				"GENERATOR": "grpc",
				"NAMESPACE": ns,
				"LABELS":    labels,
			},
		},
		"server_listener_resource_name_template": xds.InboundListenerPrefix + "%s",
	})
	if err != nil {
		panic(err)
	}
	return b
}

// failOnce makes the first call carrying a token fail with UNAVAILABLE, on
// whichever backend it lands: a transient error a retry recovers from.
type failOnce struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (f *failOnce) fail(token string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen[token] {
		return false
	}
	f.seen[token] = true
	return true
}

// backend is a real xDS-enabled gRPC server answering with its id.
type backend struct {
	testpb.UnimplementedTestServiceServer
	id    string
	port  uint32
	flaky *failOnce
}

func (b *backend) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if tok := md.Get("fail-once"); len(tok) > 0 && b.flaky.fail(tok[0]) {
		return nil, status.Error(codes.Unavailable, "transient failure")
	}
	return &testpb.SimpleResponse{ServerId: b.id}, nil
}

// startBackend starts an xds.NewGRPCServer on a loopback port and waits
// until vmesh has made it SERVING.
func startBackend(t *testing.T, xdsAddr, id string, flaky *failOnce) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{})
	var once sync.Once
	gs, err := grpcxds.NewGRPCServer(
		grpc.Creds(insecure.NewCredentials()),
		grpcxds.BootstrapContentsForTesting(bootstrap(xdsAddr, id, "default", map[string]string{"app": "echo"})),
		grpcxds.ServingModeCallback(func(_ net.Addr, args grpcxds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				once.Do(func() { close(serving) })
			}
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{id: id, port: uint32(lis.Addr().(*net.TCPAddr).Port), flaky: flaky}
	testpb.RegisterTestServiceServer(gs, b)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	select {
	case <-serving:
	case <-time.After(20 * time.Second):
		t.Fatalf("backend %s never became SERVING", id)
	}
	return b
}

// dial returns a client for xds:///target through vmesh.
func dial(t *testing.T, xdsAddr, nodeID, target string) testpb.TestServiceClient {
	t.Helper()
	res, err := grpcxds.NewXDSResolverWithConfigForTesting(bootstrap(xdsAddr, nodeID, "default", map[string]string{"app": "client"}))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(res))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// call makes one RPC and returns the backend id or the status code.
func call(client testpb.TestServiceClient, md ...string) (string, codes.Code) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
	if err != nil {
		return "", status.Code(err)
	}
	return resp.GetServerId(), codes.OK
}

// eventually polls cond every 20ms for up to 20s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// configWriter changes the config a mesh reads: files in a directory, or
// commits in a git repository.
type configWriter interface {
	// write sets files (relative path -> YAML; "" deletes) and applies them.
	write(files map[string]string)
}

type dirWriter struct {
	t   *testing.T
	dir string
}

func (d *dirWriter) write(files map[string]string) {
	d.t.Helper()
	for p, content := range files {
		full := filepath.Join(d.dir, p)
		if content == "" {
			if err := os.Remove(full); err != nil {
				d.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			d.t.Fatal(err)
		}
		tmp := full + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			d.t.Fatal(err)
		}
		if err := os.Rename(tmp, full); err != nil {
			d.t.Fatal(err)
		}
	}
}

type gitWriter struct {
	t      *testing.T
	dir    string
	src    *filestore.GitSource
	commit string
}

func (g *gitWriter) git(args ...string) string {
	g.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = g.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		g.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (g *gitWriter) write(files map[string]string) {
	g.t.Helper()
	(&dirWriter{t: g.t, dir: g.dir}).write(files)
	g.git("add", "-A")
	g.git("commit", "--quiet", "--allow-empty", "-m", fmt.Sprintf("change %d files", len(files)))
	g.commit = g.git("rev-parse", "HEAD")
	if g.src != nil {
		g.src.Trigger()
	}
}

// counter returns a counter's value for one label value, 0 when absent.
func (m *mesh) counter(name, label string) float64 {
	m.t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		m.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if label == "" && len(mt.GetLabel()) == 0 {
				return mt.GetCounter().GetValue()
			}
			for _, l := range mt.GetLabel() {
				if l.GetValue() == label {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
