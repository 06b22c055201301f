package xds_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"github.com/vmesh/vmesh/xds/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	mcpv1alpha1 "istio.io/api/mcp/v1alpha1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// istiodInitialRequests are the type URLs istiod's configSources client
// asks for, in its order (pkg/adsc ConfigInitialRequests: MeshConfig, then
// every collection of collections.Pilot, Istio 1.31).
var istiodInitialRequests = []string{
	"core/v1alpha1/MeshConfig",
	"security.istio.io/v1/AuthorizationPolicy",
	"networking.istio.io/v1/DestinationRule",
	"networking.istio.io/v1alpha3/EnvoyFilter",
	"networking.istio.io/v1/Gateway",
	"security.istio.io/v1/PeerAuthentication",
	"networking.istio.io/v1beta1/ProxyConfig",
	"security.istio.io/v1/RequestAuthentication",
	"networking.istio.io/v1/ServiceEntry",
	"networking.istio.io/v1/Sidecar",
	"telemetry.istio.io/v1/Telemetry",
	"extensions.istio.io/v1alpha1/TrafficExtension",
	"networking.istio.io/v1/VirtualService",
	"extensions.istio.io/v1alpha1/WasmPlugin",
	"networking.istio.io/v1/WorkloadEntry",
	"networking.istio.io/v1/WorkloadGroup",
}

// mcpMesh is a running xDS server whose MCP clients Authorize lets in.
type mcpMesh struct {
	srv   *xds.Server
	addr  string
	debug *httptest.Server
	store *store.Store
}

func startMCPMesh(t *testing.T, ctx context.Context, st *store.Store, authorize mcp.Authorize) *mcpMesh {
	t.Helper()
	srv, err := xds.NewServer(xds.Options{Logger: testLogger(t), MCPAuthorize: authorize})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := model.NewFeed(st, model.FeedSettings{DebounceQuiet: 20 * time.Millisecond, DebounceMax: 200 * time.Millisecond})
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
	mux.Handle("/debug/config", filestore.DebugHandler(st, func(*store.Snapshot) []store.ConfigError { return nil }))
	debug := httptest.NewServer(mux)
	t.Cleanup(func() { debug.Close(); cancel(); wg.Wait() })
	return &mcpMesh{srv: srv, addr: lis.Addr().String(), debug: debug, store: st}
}

func (m *mcpMesh) get(t *testing.T, path string, into any) {
	t.Helper()
	resp, err := http.Get(m.debug.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatal(err)
	}
}

// mcpStream is an ADS stream opened as istiod's configSources client opens
// it: node metadata GENERATOR=api, one request per type URL.
type mcpStream struct {
	t      *testing.T
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
}

func openMCP(t *testing.T, ctx context.Context, addr string, types []string) *mcpStream {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := structpb.NewStruct(map[string]any{"GENERATOR": "api", "ISTIO_VERSION": "1.31.0"})
	node := &corev3.Node{Id: "sidecar~10.0.0.1~istiod-1.istio-system~istio-system.svc.cluster.local", Metadata: meta}
	for i, typ := range types {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: typ}
		if i == 0 {
			req.Node = node
		}
		if err := stream.Send(req); errors.Is(err, io.EOF) {
			break // the server ended the stream: Recv says why
		} else if err != nil {
			t.Fatal(err)
		}
	}
	return &mcpStream{t: t, stream: stream}
}

// next receives one response and ACKs it (NACKs it with nack, when set).
func (s *mcpStream) next(nack string) *discoveryv3.DiscoveryResponse {
	s.t.Helper()
	resp, err := s.stream.Recv()
	if err != nil {
		s.t.Fatal(err)
	}
	req := &discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(), VersionInfo: resp.GetVersionInfo()}
	if nack != "" {
		req.ErrorDetail = status.New(codes.InvalidArgument, nack).Proto()
	}
	if err := s.stream.Send(req); err != nil {
		s.t.Fatal(err)
	}
	return resp
}

// mcpObject is one object as an MCP client decodes it: the resource's
// name, labels, annotations and its body's spec as canonical JSON (the
// form tools/istio-mcp-client saves what Istio's own client decoded in).
type mcpObject struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Spec        json.RawMessage   `json:"spec"`
}

// canonicalJSON re-encodes JSON with sorted keys and no spaces.
func canonicalJSON(t *testing.T, b []byte) json.RawMessage {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// decodeMCP decodes a response's resources with vmesh's type mapping.
func decodeMCP(t *testing.T, resp *discoveryv3.DiscoveryResponse) []mcpObject {
	t.Helper()
	out := []mcpObject{}
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() != mcp.ResourceType {
			t.Fatalf("%s: a resource of type %s, want %s", resp.GetTypeUrl(), a.GetTypeUrl(), mcp.ResourceType)
		}
		var r mcpv1alpha1.Resource
		if err := a.UnmarshalTo(&r); err != nil {
			t.Fatal(err)
		}
		o, err := mcp.Decode(resp.GetTypeUrl(), a)
		if err != nil {
			t.Fatal(err)
		}
		if r.GetMetadata().GetVersion() == "" {
			t.Errorf("%s %s: no resource version", resp.GetTypeUrl(), r.GetMetadata().GetName())
		}
		spec, err := protojson.Marshal(o.Spec)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, mcpObject{Name: o.Namespace + "/" + o.Name, Labels: o.Labels, Annotations: o.Annotations, Spec: canonicalJSON(t, spec)})
	}
	return out
}

// debugConfigByType returns /debug/config's objects as MCP would carry
// them, by canonical type URL (the kinds vmesh serves over MCP).
func debugConfigByType(t *testing.T, m *mcpMesh) (map[string][]mcpObject, filestore.DebugConfig) {
	t.Helper()
	var dc filestore.DebugConfig
	m.get(t, "/debug/config", &dc)
	var doc struct {
		Objects []struct {
			Kind        store.Kind        `json:"kind"`
			Namespace   string            `json:"namespace"`
			Name        string            `json:"name"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
			Spec        json.RawMessage   `json:"spec"`
		} `json:"objects"`
	}
	m.get(t, "/debug/config", &doc)
	out := map[string][]mcpObject{}
	for _, k := range mcp.Kinds() {
		u, _ := mcp.TypeURL(k)
		out[u] = []mcpObject{}
	}
	for _, o := range doc.Objects {
		u, ok := mcp.TypeURL(o.Kind)
		if !ok {
			t.Errorf("/debug/config holds %s %s/%s, a kind not served over MCP", o.Kind, o.Namespace, o.Name)
			continue
		}
		out[u] = append(out[u], mcpObject{Name: o.Namespace + "/" + o.Name, Labels: o.Labels, Annotations: o.Annotations, Spec: canonicalJSON(t, o.Spec)})
	}
	for _, l := range out {
		slices.SortFunc(l, func(a, b mcpObject) int { return strings.Compare(a.Name, b.Name) })
	}
	return out, dc
}

func loadStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	objs, errs, err := filestore.LoadPath(dir)
	if err != nil || len(errs) > 0 {
		t.Fatalf("%s: %v %v", dir, err, errs)
	}
	cs := store.NewStore()
	if err := cs.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestMCPServesTheStore: a client asking for the type URLs istiod's
// configSources client asks for gets every object /debug/config shows, by
// Istio's config type URLs, one response per type (the types vmesh has no
// kind for answered empty); a change resends only the type that changed,
// at the new version; ACKs and NACKs show in /debug/syncz under kind
// "mcp", beside the proxies.
func TestMCPServesTheStore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := loadStore(t, "../examples/quickstart/config")
	// A Telemetry beside the quickstart: vmesh reads the kind, so it serves it.
	tel := &store.Object{APIVersion: "telemetry.istio.io/v1", Origin: store.Origin{File: "telemetry.yaml", Line: 1},
		Spec: &telemetry.Telemetry{AccessLogging: []*telemetry.AccessLogging{{Providers: []*telemetry.ProviderRef{{Name: "envoy"}}}}}}
	tel.Kind, tel.Namespace, tel.Name = store.KindTelemetry, "istio-system", "mesh-default"
	if err := cs.Update(testSource, []*store.Object{tel}, nil); err != nil {
		t.Fatal(err)
	}
	m := startMCPMesh(t, ctx, cs, func(context.Context) (string, error) { return "test", nil })
	<-m.srv.Ready()
	c := openMCP(t, ctx, m.addr, istiodInitialRequests)

	got := map[string][]mcpObject{}
	versions := map[string]string{}
	for range istiodInitialRequests {
		resp := c.next("")
		if _, dup := got[resp.GetTypeUrl()]; dup {
			t.Fatalf("%s sent twice before every type was sent once", resp.GetTypeUrl())
		}
		got[resp.GetTypeUrl()] = decodeMCP(t, resp)
		versions[resp.GetTypeUrl()] = resp.GetVersionInfo()
	}
	want, dc := debugConfigByType(t, m)
	total := 0
	for _, typ := range istiodInitialRequests {
		w, served := want[typ]
		if !served {
			w = []mcpObject{}
		}
		total += len(w)
		if diff := cmp.Diff(w, got[typ]); diff != "" {
			t.Errorf("%s: MCP differs from /debug/config (-debug/config +mcp):\n%s", typ, diff)
		}
		if v := versions[typ]; !strings.HasPrefix(v, "r") {
			t.Errorf("%s: version %q, want r<revision>", typ, v)
		}
	}
	if total != len(dc.Objects) || total < 6 {
		t.Errorf("served %d objects, /debug/config shows %d", total, len(dc.Objects))
	}

	// A VirtualService change: only VirtualServices are sent again. The
	// response after it is the next change's DestinationRules: nothing
	// else came between.
	vs := cs.Snapshot().List(store.KindVirtualService)[0]
	changed := *vs
	changed.Labels = map[string]string{"changed": "yes"}
	replaceObject(t, cs, &changed)
	resp := c.next("")
	if resp.GetTypeUrl() != "networking.istio.io/v1/VirtualService" || resp.GetVersionInfo() == versions[resp.GetTypeUrl()] {
		t.Fatalf("after a VirtualService change: %s at %s, want the VirtualServices at a new version", resp.GetTypeUrl(), resp.GetVersionInfo())
	}
	if objs := decodeMCP(t, resp); len(objs) != len(want[resp.GetTypeUrl()]) || objs[0].Labels["changed"] != "yes" {
		t.Errorf("changed VirtualServices: %+v", objs)
	}
	dr := cs.Snapshot().List(store.KindDestinationRule)[0]
	changedDR := *dr
	changedDR.Annotations = map[string]string{"changed": "yes"}
	replaceObject(t, cs, &changedDR)
	resp = c.next("bad DestinationRule")
	if resp.GetTypeUrl() != "networking.istio.io/v1/DestinationRule" {
		t.Fatalf("after a DestinationRule change: %s, want only the DestinationRules (the VirtualService change sent other types too?)", resp.GetTypeUrl())
	}

	// /debug/syncz lists the client as kind mcp: every type ACKed but the
	// DestinationRules, NACKed with the client's reason.
	eventually(t, "syncz shows the MCP client's ACKs and NACK", func() bool {
		var st []xds.SyncStatus
		m.get(t, "/debug/syncz", &st)
		if len(st) != 1 || st[0].Kind != xds.KindMCP || st[0].Identity != "test" || st[0].Namespace != "istio-system" || len(st[0].Types) != len(istiodInitialRequests) {
			return false
		}
		for typ, ts := range st[0].Types {
			if typ == "DestinationRule" {
				if ts.Nack != "bad DestinationRule" || ts.NackVersion != resp.GetVersionInfo() {
					return false
				}
			} else if ts.Acked == "" || ts.Acked != ts.Sent || ts.Nack != "" {
				return false
			}
		}
		return st[0].Types["VirtualService"] != nil
	})
}

// replaceObject puts o in place of the object with its key in the test
// source.
func replaceObject(t *testing.T, cs *store.Store, o *store.Object) {
	t.Helper()
	var objs []*store.Object
	snap := cs.Snapshot()
	for _, k := range store.Kinds {
		for _, x := range snap.List(k) {
			if x.Key == o.Key {
				x = o
			}
			objs = append(objs, x)
		}
	}
	if err := cs.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
}

// TestMCPRefusedWithoutAuthorization: a server given no MCPAuthorize
// serves config to no MCP client (the stream ends PermissionDenied), and
// an Authorize refusal ends the stream with its status; proxies on the
// same port are served as before.
func TestMCPRefusedWithoutAuthorization(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := loadStore(t, "../examples/quickstart/config")
	for _, tc := range []struct {
		name      string
		authorize mcp.Authorize
		code      codes.Code
	}{
		{"none", nil, codes.PermissionDenied},
		{"refused", func(context.Context) (string, error) {
			return "", status.Error(codes.Unauthenticated, "no mesh certificate")
		}, codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMCPMesh(t, ctx, cs, tc.authorize)
			<-m.srv.Ready()
			c := openMCP(t, ctx, m.addr, istiodInitialRequests)
			_, err := c.stream.Recv()
			if status.Code(err) != tc.code || errors.Is(err, io.EOF) {
				t.Fatalf("MCP stream: %v, want %v", err, tc.code)
			}
			var st []xds.SyncStatus
			m.get(t, "/debug/syncz", &st)
			if len(st) != 0 {
				t.Errorf("syncz lists a refused client: %+v", st)
			}
		})
	}
}

// istioRefuses lists what vmesh serves of the quickstart that Istio's own
// configSources client receives but its config store refuses (Istio's
// validation on Create), by "TYPE-URL namespace/name": the substring of
// Istio's error, and why it is a difference vmesh keeps.
var istioRefuses = map[string]struct{ reason, because string }{
	"networking.istio.io/v1/WorkloadGroup demo/greeter": {
		reason: "unknown health check method *v1alpha3.ReadinessProbe_Grpc",
		because: "istio.io/api defines the grpc readiness probe and vmesh's agent runs it; Istio 1.31's WorkloadGroup " +
			"validation knows only httpGet, tcpSocket and exec (its webhook refuses the same object)",
	},
}

// TestMCPMatchesIstioClient: what vmesh's MCP server serves for the
// quickstart, decoded by vmesh's type mapping, equals what Istio's own
// configSources client (pkg/adsc, run by tools/istio-mcp-client against
// vmesh serve) decoded from it, saved in testdata/istio-mcp/quickstart.json,
// type by type (the 15 types istiod asks for), and equals /debug/config;
// what Istio's config store then refused is exactly istioRefuses.
func TestMCPMatchesIstioClient(t *testing.T) {
	b, err := os.ReadFile("testdata/istio-mcp/quickstart.json")
	if err != nil {
		t.Fatal(err)
	}
	var istio struct {
		Types   map[string][]mcpObject `json:"types"`
		Refused []struct {
			Object string `json:"object"`
			Reason string `json:"reason"`
		} `json:"refused"`
	}
	if err := json.Unmarshal(b, &istio); err != nil {
		t.Fatal(err)
	}
	// What Istio's config store refused of what it received: only the
	// listed differences, each for its reason.
	refused := map[string]string{}
	for _, r := range istio.Refused {
		refused[r.Object] = r.Reason
	}
	for object, reason := range refused {
		why, known := istioRefuses[object]
		if !known || !strings.Contains(reason, why.reason) {
			t.Errorf("Istio's config store refused %s (%s): not a known difference", object, reason)
		}
	}
	for object, why := range istioRefuses {
		if _, ok := refused[object]; !ok {
			t.Errorf("known difference %s (%s) is not in the saved run: Istio now holds it? Remove it from istioRefuses", object, why.because)
		}
	}
	for _, l := range istio.Types {
		for i := range l {
			l[i].Spec = canonicalJSON(t, l[i].Spec) // saved indented
		}
	}
	if len(istio.Types) != len(istiodInitialRequests)-1 {
		t.Fatalf("the saved decode has %d types, want %d", len(istio.Types), len(istiodInitialRequests)-1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := startMCPMesh(t, ctx, loadStore(t, "../examples/quickstart/config"), func(context.Context) (string, error) { return "test", nil })
	<-m.srv.Ready()
	c := openMCP(t, ctx, m.addr, istiodInitialRequests)
	got := map[string][]mcpObject{}
	for range istiodInitialRequests {
		resp := c.next("")
		if resp.GetTypeUrl() != mcp.MeshConfigType {
			got[resp.GetTypeUrl()] = decodeMCP(t, resp)
		}
	}
	for _, l := range got {
		slices.SortFunc(l, func(a, b mcpObject) int { return strings.Compare(a.Name, b.Name) })
	}
	n := 0
	for typ, want := range istio.Types {
		n += len(want)
		if diff := cmp.Diff(want, got[typ]); diff != "" {
			t.Errorf("%s: vmesh serves other than Istio's client decoded (-istio +vmesh):\n%s", typ, diff)
		}
	}
	debug, _ := debugConfigByType(t, m)
	for typ, want := range debug {
		if diff := cmp.Diff(want, istio.Types[typ]); diff != "" {
			t.Errorf("%s: Istio's client decoded other than /debug/config shows (-debug/config +istio):\n%s", typ, diff)
		}
	}
	if n != 6 {
		t.Errorf("Istio's client decoded %d objects, the quickstart has 6", n)
	}
}

// TestMCPVersionNamesTheCommit: with the quickstart in a git repository,
// every type's version_info names the commit it was read at
// (r<revision>@<12-char SHA>), and a commit changing the VirtualService's
// weights is sent as the VirtualServices at a version naming the new
// commit, with the new weights: what Istio's own client held after the same
// commits (testdata/istio-mcp/git-change.json).
func TestMCPVersionNamesTheCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	files := map[string]string{}
	for _, name := range []string{"greeter.yaml", "workloads.yaml"} {
		b, err := os.ReadFile(filepath.Join("../examples/quickstart/config", name))
		if err != nil {
			t.Fatal(err)
		}
		files["mesh/"+name] = string(b)
	}
	w := &gitWriter{t: t, dir: t.TempDir()}
	w.git("init", "--quiet", "--initial-branch=main")
	w.git("config", "user.email", "test@vmesh.io")
	w.git("config", "user.name", "vmesh test")
	w.write(files)
	first := w.commit
	cs := store.NewStore()
	src, err := filestore.NewGitSource(filestore.GitConfig{
		Repo: w.dir, Ref: "main", Path: "mesh", Interval: time.Hour, WorkDir: filepath.Join(t.TempDir(), "clone"),
	}, cs, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	w.src = src
	go func() { _ = src.Run(ctx) }()
	<-src.Ready()
	m := startMCPMesh(t, ctx, cs, func(context.Context) (string, error) { return "test", nil })
	<-m.srv.Ready()
	c := openMCP(t, ctx, m.addr, istiodInitialRequests)
	held := map[string][]mcpObject{}
	for range istiodInitialRequests {
		resp := c.next("")
		if v := resp.GetVersionInfo(); !strings.HasPrefix(v, "r") || !strings.HasSuffix(v, "@"+first[:12]) {
			t.Errorf("%s at version %q, want r<revision>@%.12s (the commit)", resp.GetTypeUrl(), v, first)
		}
		if resp.GetTypeUrl() != mcp.MeshConfigType {
			held[resp.GetTypeUrl()] = decodeMCP(t, resp)
		}
	}

	vs := files["mesh/greeter.yaml"]
	changed := strings.Replace(strings.Replace(vs, "weight: 80", "weight: 70", 1), "weight: 20", "weight: 30", 1)
	if changed == vs {
		t.Fatal("greeter.yaml: no weights 80/20 to change")
	}
	w.write(map[string]string{"mesh/greeter.yaml": changed})
	resp := c.next("")
	if resp.GetTypeUrl() != "networking.istio.io/v1/VirtualService" || !strings.HasSuffix(resp.GetVersionInfo(), "@"+w.commit[:12]) {
		t.Fatalf("after commit %.12s: %s at %q, want the VirtualServices at r<revision>@%.12s", w.commit, resp.GetTypeUrl(), resp.GetVersionInfo(), w.commit)
	}
	objs := decodeMCP(t, resp)
	if len(objs) != 1 || !strings.Contains(string(objs[0].Spec), `"weight":70`) || !strings.Contains(string(objs[0].Spec), `"weight":30`) {
		t.Errorf("VirtualServices at commit %.12s: %+v, want weights 70/30", w.commit, objs)
	}
	held[resp.GetTypeUrl()] = objs

	// Istio's own configSources client, given the same two commits by
	// vmesh serve (tools/istio-mcp-client, saved in git-change.json), held
	// the VirtualServices at versions naming each commit, and after the
	// change what this client now holds.
	b, err := os.ReadFile("testdata/istio-mcp/git-change.json")
	if err != nil {
		t.Fatal(err)
	}
	var istio struct {
		Commits  []string               `json:"commits"`
		Versions []string               `json:"versions"`
		Types    map[string][]mcpObject `json:"types"`
	}
	if err := json.Unmarshal(b, &istio); err != nil {
		t.Fatal(err)
	}
	if len(istio.Commits) != 2 || len(istio.Versions) != 2 {
		t.Fatalf("git-change.json: commits %v, versions %v", istio.Commits, istio.Versions)
	}
	for i, v := range istio.Versions {
		_, commit, _ := strings.Cut(v, "@")
		if !regexp.MustCompile(`^r[0-9]+@[0-9a-f]{12}$`).MatchString(v) || !strings.HasPrefix(istio.Commits[i], commit) {
			t.Errorf("Istio's client held the VirtualServices of commit %.12s at version %q, not naming it", istio.Commits[i], v)
		}
	}
	if len(istio.Types) != len(istiodInitialRequests)-1 {
		t.Fatalf("git-change.json has %d types, want %d", len(istio.Types), len(istiodInitialRequests)-1)
	}
	for typ, want := range istio.Types {
		for i := range want {
			want[i].Spec = canonicalJSON(t, want[i].Spec)
		}
		got := held[typ]
		slices.SortFunc(got, func(a, b mcpObject) int { return strings.Compare(a.Name, b.Name) })
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s after the commit: vmesh serves other than Istio's client held (-istio +vmesh):\n%s", typ, diff)
		}
	}
}

// TestMCPDeltaRefused: config over MCP is SotW only (istiod's
// configSources client, adsc.New, is SotW): a delta stream whose first
// request asks for one of Istio's config type URLs ends Unimplemented,
// saying so, instead of hanging; the MCP server lists no client.
func TestMCPDeltaRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := startMCPMesh(t, ctx, loadStore(t, "../examples/quickstart/config"), func(context.Context) (string, error) { return "test", nil })
	<-m.srv.Ready()
	conn, err := grpc.NewClient(m.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := structpb.NewStruct(map[string]any{"GENERATOR": "api"})
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "istiod-1.istio-system", Metadata: meta},
		TypeUrl: "networking.istio.io/v1/VirtualService"}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "state-of-the-world") {
		t.Fatalf("a delta MCP stream: %v, want Unimplemented naming state-of-the-world ADS", err)
	}
	var st []xds.SyncStatus
	m.get(t, "/debug/syncz", &st)
	if len(st) != 0 {
		t.Errorf("syncz lists the refused delta stream: %+v", st)
	}
}
