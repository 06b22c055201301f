package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/maphash"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/go-zookeeper/zk"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/registries/zookeeper"
	"github.com/vmesh/vmesh/store"
)

// TestMain lets the test binary act as a server child, as the vmesh-load
// binary does, so the end-to-end test runs real child processes, and as
// BenchmarkLoopbackSendFloor's reader.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == loopbackReaderCommand {
		if err := loopbackReader(os.Args[2:]); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == ChildCommand {
		if err := ChildMain(os.Args[2:]); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name string
		in   []time.Duration
		want Latency
	}{
		{name: "empty", in: nil, want: Latency{}},
		{name: "one", in: []time.Duration{7 * ms}, want: Latency{N: 1, P50: 7 * ms, P99: 7 * ms, Max: 7 * ms}},
		{name: "unsorted four", in: []time.Duration{4 * ms, 1 * ms, 3 * ms, 2 * ms}, want: Latency{N: 4, P50: 2 * ms, P99: 4 * ms, Max: 4 * ms}},
	}
	// 1..200 ms: nearest rank p50 is the 100th value, p99 the 198th.
	var hundreds []time.Duration
	for i := 200; i >= 1; i-- {
		hundreds = append(hundreds, time.Duration(i)*ms)
	}
	cases = append(cases, struct {
		name string
		in   []time.Duration
		want Latency
	}{name: "1..200", in: hundreds, want: Latency{N: 200, P50: 100 * ms, P99: 198 * ms, Max: 200 * ms}})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			orig := append([]time.Duration(nil), c.in...)
			if got := Summarize(c.in); got != c.want {
				t.Errorf("Summarize = %+v, want %+v", got, c.want)
			}
			for i := range orig {
				if orig[i] != c.in[i] {
					t.Fatal("Summarize modified its input")
				}
			}
		})
	}
}

func TestWriteDecodes(t *testing.T) {
	dir := t.TempDir()
	sz := Size{Services: 12, Endpoints: 3, VirtualServices: 4, Namespaces: 3}
	if err := Write(dir, sz, SourceDir); err != nil {
		t.Fatal(err)
	}
	objs, errs, err := filestore.LoadPath(dir)
	if err != nil || len(errs) > 0 {
		t.Fatalf("LoadPath: %v %v", err, errs)
	}
	count := map[store.Kind]int{}
	for _, o := range objs {
		count[o.Kind]++
	}
	want := map[store.Kind]int{
		store.KindServiceEntry: 12, store.KindWorkloadEntry: 36,
		store.KindVirtualService: 4, store.KindDestinationRule: 4, store.KindSidecar: 3,
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%s: %d objects, want %d", k, count[k], n)
		}
	}
	// Each file decodes on its own too (vmesh reads them one by one).
	files, _ := filepath.Glob(filepath.Join(dir, "ns-1", "*.yaml"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, errs := filestore.Decode(f, b); len(errs) > 0 {
			t.Errorf("%s: %v", f, errs)
		}
	}
}

func TestChangesAlterWhatTheySay(t *testing.T) {
	dir := t.TempDir()
	sz := Size{Services: 4, Endpoints: 3, VirtualServices: 2, Namespaces: 2}
	if err := Write(dir, sz, SourceDir); err != nil {
		t.Fatal(err)
	}
	load := func() map[store.Key]*store.Object {
		objs, errs, err := filestore.LoadPath(dir)
		if err != nil || len(errs) > 0 {
			t.Fatalf("LoadPath: %v %v", err, errs)
		}
		m := map[store.Key]*store.Object{}
		for _, o := range objs {
			m[o.Key] = o
		}
		return m
	}
	vsKey := store.Key{Kind: store.KindVirtualService, Namespace: "ns-1", Name: ServiceName(1)}
	weEKey := store.Key{Kind: store.KindWorkloadEntry, Namespace: "ns-1", Name: ServiceName(1) + "-0"}
	prevWeight, prevAddr := int32(-1), ""
	for gen := range 45 {
		if err := WriteRouting(dir, sz, SourceDir, 1, gen); err != nil {
			t.Fatal(err)
		}
		if err := WriteEndpoints(dir, sz, SourceDir, 1, gen); err != nil {
			t.Fatal(err)
		}
		m := load()
		vs := m[vsKey].Spec.(*networking.VirtualService)
		w := vs.GetHttp()[0].GetRoute()
		if w[0].GetWeight()+w[1].GetWeight() != 100 {
			t.Fatalf("gen %d: weights %d+%d", gen, w[0].GetWeight(), w[1].GetWeight())
		}
		if w[0].GetWeight() == prevWeight {
			t.Fatalf("gen %d: VirtualService weight did not change", gen)
		}
		addr := m[weEKey].Spec.(*networking.WorkloadEntry).GetAddress()
		if addr == prevAddr {
			t.Fatalf("gen %d: endpoint 0 did not move", gen)
		}
		if m[weEKey].Spec.(*networking.WorkloadEntry).GetLabels()["version"] != "v1" {
			t.Fatal("endpoint 0 must be in subset v1 (ChangedEndpointClusters)")
		}
		prevWeight, prevAddr = w[0].GetWeight(), addr
	}
}

func TestSpecsMix(t *testing.T) {
	o := DefaultOptions()
	o.Proxies = 400
	specs := Specs(o)
	var delta, envoy, batch int
	ns := map[string]bool{}
	for _, s := range specs {
		if s.Delta {
			delta++
		}
		if s.Style == StyleEnvoy {
			envoy++
			if len(s.Listeners) != 0 {
				t.Errorf("%s: Envoy-like proxy with listener names", s.ID)
			}
		} else {
			if len(s.Listeners) != o.ListenersPerProxy || s.Listeners[0] != o.Source.RouteName(0) || s.Listeners[1] != o.Source.RouteName(1) {
				t.Errorf("%s: listeners %v", s.ID, s.Listeners)
			}
		}
		if s.Labels["tier"] == "batch" {
			batch++
		}
		ns[s.Namespace] = true
	}
	if delta < 190 || delta > 210 || envoy < 190 || envoy > 210 || batch != 100 || len(ns) != 10 {
		t.Errorf("mix: %d delta, %d envoy, %d batch of 400, %d namespaces", delta, envoy, batch, len(ns))
	}
}

func TestSharedRefsConcurrentAskersGetTheFirstDecode(t *testing.T) {
	// Proxies of a group ask for the same bytes at once: every one gets the
	// clusters, and the shared entry holds one answer.
	rc := &routev3.RouteConfiguration{Name: "7070", VirtualHosts: []*routev3.VirtualHost{{Routes: []*routev3.Route{{
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "c2"}}},
	}, {
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "c1"}}},
	}}}}}
	b, err := proto.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	s := NewShared()
	h := maphash.Bytes(s.seed, b)
	got := make([][]string, 16)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = s.refs(resourcev3.RouteType, h, b) })
	}
	wg.Wait()
	for i, g := range got {
		if !slices.Equal(g, []string{"c1", "c2"}) {
			t.Errorf("asker %d: refs = %q, want [c1 c2]", i, g)
		}
	}
	if len(s.deps) != 1 {
		t.Errorf("%d shared entries for one resource, want 1", len(s.deps))
	}
}

func TestResourceName(t *testing.T) {
	// Field 1 is found behind other fields and a bad input gives "".
	b := []byte{0x10, 0x05, 0x0a, 0x03, 'a', 'b', 'c'}
	if got := resourceName(b); got != "abc" {
		t.Errorf("resourceName = %q", got)
	}
	if got := resourceName([]byte{0x0a, 0x09, 'x'}); got != "" {
		t.Errorf("truncated: %q", got)
	}
}

func TestReadProcStatsSelf(t *testing.T) {
	st, err := ReadProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.RSS <= 0 || st.PeakRSS < st.RSS || st.Threads < 1 {
		t.Errorf("stats %+v", st)
	}
	// Burn some CPU and see it counted.
	deadline := time.Now().Add(150 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	st2, err := ReadProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st2.CPU-st.CPU < 50*time.Millisecond {
		t.Errorf("CPU went from %s to %s after 150ms of spinning (%d)", st.CPU, st2.CPU, x)
	}
}

// TestReadProcStatsCountsWaitedChildren: the CPU of a process's reaped
// children (vmesh's git commands) is part of its CPU.
func TestReadProcStatsCountsWaitedChildren(t *testing.T) {
	st, err := ReadProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatalf("sh: %v", err)
	}
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if child < 50*time.Millisecond {
		t.Fatalf("the child used only %s of CPU", child)
	}
	st2, err := ReadProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got := st2.CPU - st.CPU; got < child-20*time.Millisecond {
		t.Errorf("CPU grew by %s while a waited child used %s", got, child)
	}
}

func testSpawner(t *testing.T) Spawner {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return func(args []string) *exec.Cmd { return exec.Command(exe, args...) }
}

// TestRunSmall runs the whole harness: both servers as child processes, a
// few proxies of every kind, two changes of each kind.
func TestRunSmall(t *testing.T) {
	o := DefaultOptions()
	o.Size = Size{Services: 20, Endpoints: 3, VirtualServices: 4, Namespaces: 2}
	o.Proxies = 16
	o.Changes = 2
	o.Burst = 10
	o.DebounceQuiet = 20 * time.Millisecond
	o.ChangeTimeout = 20 * time.Second
	o.ConnectTimeout = 60 * time.Second
	o.Spawn = testSpawner(t)
	o.WorkDir = t.TempDir()
	var progress bytes.Buffer
	o.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	if len(rep.Servers) != 2 {
		t.Fatalf("%d server reports", len(rep.Servers))
	}
	for _, s := range rep.Servers {
		if len(s.Errors) > 0 {
			t.Errorf("%s: proxy errors: %v", s.Server, s.Errors)
		}
		if s.Connect.Bytes <= 0 || s.ConnectedRSS <= 0 || s.PeakRSS < s.ConnectedRSS || s.CPU <= 0 {
			t.Errorf("%s: implausible resource figures %+v", s.Server, s)
		}
		// Envoy-like proxies hold every listener: at least the 20 listeners.
		if s.ResourcesPerProxy < 10 {
			t.Errorf("%s: %.1f resources per proxy", s.Server, s.ResourcesPerProxy)
		}
		if len(s.Changes) != 2 {
			t.Fatalf("%s: %d change reports", s.Server, len(s.Changes))
		}
		if b := s.Burst; b == nil || b.Changes != 10 || b.CPUPerChange <= 0 || b.BytesPerChange <= 0 {
			t.Errorf("%s: burst %+v: no CPU or bytes", s.Server, b)
		}
		for _, c := range s.Changes {
			// With two namespaces every proxy, batch ones included, can
			// reach services 0 (ns-0) and 1 (ns-1) and holds what changes.
			if c.Expected < o.Proxies || c.Missing != 0 || c.Latency.N != c.Expected {
				t.Errorf("%s %s: expected %d ACKs, missing %d, got %d", s.Server, c.Kind, c.Expected, c.Missing, c.Latency.N)
			}
			if c.Latency.Max <= 0 || c.Latency.P50 > c.Latency.P99 || c.Latency.P99 > c.Latency.Max || c.BytesPerChange <= 0 {
				t.Errorf("%s %s: implausible %+v", s.Server, c.Kind, c)
			}
			if s.Server == ServerVmesh && c.Latency.P50 < DirSettle {
				t.Errorf("vmesh %s: p50 %s is below the directory source's settle window: latency not measured from the write", c.Kind, c.Latency.P50)
			}
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vmesh/baseline", "virtualservice x2", "endpoint x2", "connect", "endpoint burst x10 in 1s"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Servers) != 2 || back.Servers[0].Changes[0].Latency != rep.Servers[0].Changes[0].Latency {
		t.Errorf("JSON round trip: %v", err)
	}
	if !strings.Contains(progress.String(), "proxies synced") {
		t.Errorf("no connect progress:\n%s", progress.String())
	}
	t.Logf("\n%s", table.String())
}

func TestProxyFollowsReferencesAndFiresProbes(t *testing.T) {
	anyOf := func(m proto.Message) *anypb.Any {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	hcm := anyOf(&hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: "r1"}}})
	lis := &listenerv3.Listener{Name: "l1", ApiListener: &listenerv3.ApiListener{ApiListener: hcm}}
	route := func(w uint32) *routev3.RouteConfiguration {
		return &routev3.RouteConfiguration{Name: "r1", VirtualHosts: []*routev3.VirtualHost{{Routes: []*routev3.Route{{
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{
				WeightedClusters: &routev3.WeightedCluster{Clusters: []*routev3.WeightedCluster_ClusterWeight{
					{Name: "c1", Weight: wrapperspb.UInt32(w)}, {Name: "c2", Weight: wrapperspb.UInt32(100 - w)}}}}}}}}}}}
	}
	cluster := func(n string) *clusterv3.Cluster {
		return &clusterv3.Cluster{Name: n, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: n}}
	}
	res := func(name string, m proto.Message) *discoveryv3.Resource {
		return &discoveryv3.Resource{Name: name, Resource: anyOf(m)}
	}
	for _, delta := range []bool{false, true} {
		p := NewProxy(ProxySpec{ID: "p", Namespace: "ns-0", Delta: delta, Style: StyleGRPC, Listeners: []string{"l1"}}, NewShared())
		respond := func(typeURL string, rs ...*discoveryv3.Resource) []*Probe {
			if delta {
				fire, _ := p.applyDelta(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: typeURL, Resources: rs, Nonce: "n"})
				return fire
			}
			var anys []*anypb.Any
			for _, r := range rs {
				anys = append(anys, r.GetResource())
			}
			fire, _ := p.applySotW(&discoveryv3.DiscoveryResponse{TypeUrl: typeURL, Resources: anys, Nonce: "n", VersionInfo: "v"})
			return fire
		}
		respond(resourcev3.ListenerType, res("l1", lis))
		if !p.types[resourcev3.RouteType].subscribed["r1"] {
			t.Fatalf("delta=%v: listener's route not subscribed", delta)
		}
		respond(resourcev3.RouteType, res("r1", route(90)))
		if got := p.types[resourcev3.ClusterType].subscribed; !got["c1"] || !got["c2"] || len(got) != 2 {
			t.Fatalf("delta=%v: clusters subscribed %v", delta, got)
		}
		respond(resourcev3.ClusterType, res("c1", cluster("c1")), res("c2", cluster("c2")))
		if got := p.types[resourcev3.EndpointType].subscribed; !got["c1"] || !got["c2"] {
			t.Fatalf("delta=%v: endpoints subscribed %v", delta, got)
		}
		cla := &endpointv3.ClusterLoadAssignment{ClusterName: "c1"}
		respond(resourcev3.EndpointType, res("c1", cla), res("c2", &endpointv3.ClusterLoadAssignment{ClusterName: "c2"}))
		p.checkSynced()
		select {
		case <-p.Synced():
		default:
			t.Fatalf("delta=%v: not synced", delta)
		}

		pr := NewProbe(resourcev3.RouteType, "r1")
		if !p.Watch(pr) {
			t.Fatal("proxy holds r1 but did not watch")
		}
		if p.Watch(NewProbe(resourcev3.RouteType, "r9")) {
			t.Fatal("proxy watched a route it does not hold")
		}
		if fire := respond(resourcev3.RouteType, res("r1", route(90))); len(fire) != 0 {
			t.Fatalf("delta=%v: an unchanged route fired the probe", delta)
		}
		if fire := respond(resourcev3.RouteType, res("r1", route(80))); len(fire) != 1 || fire[0] != pr {
			t.Fatalf("delta=%v: a changed route fired %d probes", delta, len(fire))
		}
		if fire := respond(resourcev3.RouteType, res("r1", route(70))); len(fire) != 0 {
			t.Fatalf("delta=%v: the probe fired twice", delta)
		}
	}
}

// smallRun returns the options of a small end-to-end run: one change of
// each kind after the warm-up.
func smallRun(t *testing.T, src Source) Options {
	o := DefaultOptions()
	o.Size = Size{Services: 20, Endpoints: 3, VirtualServices: 4, Namespaces: 2}
	o.Proxies = 16
	o.Changes = 1
	o.DebounceQuiet = 20 * time.Millisecond
	o.ChangeTimeout = 20 * time.Second
	o.ConnectTimeout = 60 * time.Second
	o.Spawn = testSpawner(t)
	o.WorkDir = t.TempDir()
	o.Source = src
	return o
}

// checkSmallRun asserts that every expected ACK of every change arrived,
// with plausible latencies, and returns vmesh's report.
func checkSmallRun(t *testing.T, o Options, rep *Report) *ServerReport {
	t.Helper()
	if len(rep.Servers) != len(o.Servers) {
		t.Fatalf("%d server reports, want %d", len(rep.Servers), len(o.Servers))
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	if !strings.Contains(table.String(), "source: "+string(o.Source)) {
		t.Errorf("table does not name the source %s", o.Source)
	}
	for _, s := range rep.Servers {
		if len(s.Errors) > 0 {
			t.Errorf("%s: proxy errors: %v", s.Server, s.Errors)
		}
		if s.ResourcesPerProxy < 10 {
			t.Errorf("%s: %.1f resources per proxy: the proxies did not find the services", s.Server, s.ResourcesPerProxy)
		}
		if len(s.Changes) != 2 {
			t.Fatalf("%s: %d change reports", s.Server, len(s.Changes))
		}
		// Every proxy is affected by a change, but for sidecars that do
		// not see the changed service.
		least := o.Proxies
		if o.Shape.sidecarShape() {
			least = 1
		}
		for _, c := range s.Changes {
			if c.Expected < least || c.Missing != 0 || c.Latency.N != c.Expected {
				t.Errorf("%s %s: expected %d ACKs, missing %d, got %d", s.Server, c.Kind, c.Expected, c.Missing, c.Latency.N)
			}
			if c.Latency.P50 <= 0 || c.Latency.P50 > c.Latency.P99 || c.Latency.P99 > c.Latency.Max || c.BytesPerChange <= 0 || c.ApplyPerChange <= 0 {
				t.Errorf("%s %s: implausible %+v", s.Server, c.Kind, c)
			}
		}
	}
	return rep.server(ServerVmesh)
}

// TestRunGit runs the harness with vmesh on a git repository: changes are
// commits pushed to a bare repository and announced by a signed webhook
// call; the child polls only hourly, so every ACK proves the webhook path.
func TestRunGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git not found (Debian package git)")
	}
	o := smallRun(t, SourceGit)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	o.Progress = &progress
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	v := checkSmallRun(t, o, rep)
	for _, c := range v.Changes {
		if c.Debounce != 0 {
			t.Errorf("git %s change: debounce %s, want none (leading-edge pushes)", c.Kind, c.Debounce)
		}
	}
	// The initial commit, one warm-up and one measured change of each kind.
	out, err := exec.Command("git", "-C", filepath.Join(o.WorkDir, ServerVmesh, "git", "bare.git"), "rev-list", "--count", gitBranch).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "5" {
		t.Errorf("bare repository has %s commits on %s, want 5", got, gitBranch)
	}
	// The child never watched a directory: the config only lives in git.
	if _, err := os.Stat(filepath.Join(o.WorkDir, ServerVmesh, "config", "ns-0")); !os.IsNotExist(err) {
		t.Errorf("vmesh's config directory was written (%v)", err)
	}
}

// TestRunZooKeeper runs the harness with the services' endpoints as Dubbo
// providers in a real ZooKeeper: the proxies must find the hosts the
// adapter generates, endpoint changes are ZooKeeper writes, and the harness
// deletes its nodes at the end.
func TestRunZooKeeper(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	o := smallRun(t, SourceZooKeeper)
	o.ZooKeeper = z.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	o.Progress = &progress
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	v := checkSmallRun(t, o, rep)
	for _, c := range v.Changes {
		var want time.Duration
		if c.Kind == ChangeRouting {
			want = DirSettle // still a file write
		}
		if c.Debounce != want {
			t.Errorf("zookeeper %s change: debounce %s, want %s", c.Kind, c.Debounce, want)
		}
	}
	if !strings.Contains(progress.String(), "registered 60 Dubbo providers") {
		t.Errorf("no registration progress:\n%s", progress.String())
	}
	// No ServiceEntry or WorkloadEntry file for vmesh: they came from ZooKeeper.
	if files, _ := filepath.Glob(filepath.Join(o.WorkDir, ServerVmesh, "config", "ns-0", "*-endpoints.yaml")); len(files) > 0 {
		t.Errorf("vmesh's config directory holds endpoint files: %v", files)
	}
	conn, _, err := zk.Connect([]string{z.Addr}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	children, _, err := conn.Children("/")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range children {
		if strings.HasPrefix(c, "vmesh-load-") {
			t.Errorf("the harness left /%s behind", c)
		}
	}
}

func TestZooKeeperHostsAndProviders(t *testing.T) {
	sz := Size{Services: 4, Endpoints: 3, VirtualServices: 2, Namespaces: 2}
	if got, want := SourceZooKeeper.Host(3), "com.vmesh.load.service00003"; got != want {
		t.Errorf("Host = %q, want %q", got, want)
	}
	if SourceDir.Host(3) != "svc-00003.mesh.internal" || Source("").Host(3) != SourceDir.Host(3) {
		t.Errorf("dir host naming changed: %q", SourceDir.Host(3))
	}
	for j := range sz.Endpoints {
		p, err := zookeeper.ParseProviderURL(url.QueryEscape(ProviderURL(sz, 3, j, 0)))
		if err != nil {
			t.Fatal(err)
		}
		if h := zookeeper.InterfaceHost(p.Interface, p.Group, p.Version, ""); h != SourceZooKeeper.Host(3) {
			t.Errorf("provider %d: adapter host %q, harness host %q", j, h, SourceZooKeeper.Host(3))
		}
		if p.Port != ServicePort || p.Protocol != "tri" || p.Labels()["release"] != endpointSubset(j) {
			t.Errorf("provider %d: %+v labels %v", j, p, p.Labels())
		}
	}
	if ProviderURL(sz, 3, 0, 1) == ProviderURL(sz, 3, 0, 2) || ProviderURL(sz, 3, 1, 1) != ProviderURL(sz, 3, 1, 2) {
		t.Error("only endpoint 0 moves between generations")
	}
	// The baseline's files for this source decode and use the same hosts
	// and subset label.
	dir := t.TempDir()
	if err := Write(dir, sz, SourceZooKeeper); err != nil {
		t.Fatal(err)
	}
	objs, errs, err := filestore.LoadPath(dir)
	if err != nil || len(errs) > 0 {
		t.Fatalf("LoadPath: %v %v", err, errs)
	}
	var dr *networking.DestinationRule
	for _, o := range objs {
		if o.Kind == store.KindDestinationRule && o.Name == ServiceName(1) {
			dr = o.Spec.(*networking.DestinationRule)
		}
	}
	if dr == nil || dr.GetHost() != SourceZooKeeper.Host(1) || dr.GetSubsets()[0].GetLabels()["release"] != "v1" {
		t.Errorf("DestinationRule %v", dr)
	}
}

// TestDebouncePerSource: the deliberate waiting counted per source and
// change: for vmesh (leading-edge pushes) the directory source's settle
// window only where the change reaches vmesh as a file write; for Istio its
// push debounce.
func TestDebouncePerSource(t *testing.T) {
	quiet := 30 * time.Millisecond
	for _, tc := range []struct {
		server   string
		src      Source
		kind     string
		debounce time.Duration
	}{
		{server: ServerVmesh, src: SourceDir, kind: ChangeRouting, debounce: DirSettle},
		{server: ServerVmesh, src: SourceDir, kind: ChangeEndpoint, debounce: DirSettle},
		{server: ServerVmesh, src: SourceGit, kind: ChangeRouting, debounce: 0},
		{server: ServerVmesh, src: SourceGit, kind: ChangeEndpoint, debounce: 0},
		{server: ServerVmesh, src: SourceZooKeeper, kind: ChangeRouting, debounce: DirSettle},
		{server: ServerVmesh, src: SourceZooKeeper, kind: ChangeEndpoint, debounce: 0},
		{server: ServerIstio, src: SourceDir, kind: ChangeRouting, debounce: quiet},
		{server: ServerBaseline, src: SourceZooKeeper, kind: ChangeEndpoint, debounce: 0},
		{server: ServerBaseline, src: SourceDir, kind: ChangeRouting, debounce: 0},
	} {
		c := changer{server: tc.server, src: tc.src}
		if tc.server == ServerVmesh || tc.server == ServerIstio {
			c.quiet = quiet
		}
		if got := c.Debounce(tc.kind); got != tc.debounce {
			t.Errorf("%s %s %s: debounce %s, want %s", tc.server, tc.src, tc.kind, got, tc.debounce)
		}
	}
}

// TestRunLinearWithSidecars runs vmesh and the LinearCache + MuxCache
// baseline with Envoy-like proxies that are Envoy sidecars with distinct
// IPs, connecting from several loopback source addresses: every expected
// ACK of every change must arrive from both.
func TestRunLinearWithSidecars(t *testing.T) {
	o := smallRun(t, SourceDir)
	o.Servers = []string{ServerVmesh, ServerLinear}
	o.Shape = ShapeSidecarVM
	o.ConnsPerSourceAddr = 5 // 16 connections from 127.0.0.1 to 127.0.0.4
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkSmallRun(t, o, rep)
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vmesh/linear", "shape: sidecar-vm"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	ips, sidecars := map[string]bool{}, 0
	for _, s := range Specs(o) {
		if s.Style == StyleEnvoy != s.Sidecar {
			t.Errorf("%s: style %s, sidecar %v", s.ID, s.Style, s.Sidecar)
		}
		if s.Sidecar {
			sidecars++
			ips[s.IPs[0]] = true
		}
	}
	if sidecars == 0 || len(ips) != sidecars {
		t.Errorf("%d distinct IPs for %d sidecars", len(ips), sidecars)
	}
}
