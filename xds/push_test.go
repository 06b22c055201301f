package xds_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestProxyFromNode(t *testing.T) {
	md, _ := structpb.NewStruct(map[string]any{
		"GENERATOR": "grpc", "NAMESPACE": "shop", "LABELS": map[string]any{"app": "cart", "version": "v1"},
		"SERVICE_ACCOUNT": "cart-sa", "WORKLOAD_NAME": "cart-1", "INSTANCE_IPS": "10.0.0.1, 10.0.0.2",
	})
	p, err := xds.ProxyFromNode(&corev3.Node{Id: "cart-1.shop", Metadata: md})
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != xds.KindGRPC || p.Namespace != "shop" || p.Labels["version"] != "v1" || p.ServiceAccount != "cart-sa" ||
		p.WorkloadName != "cart-1" || len(p.IPs) != 2 || p.IPs[1] != "10.0.0.2" {
		t.Errorf("proxy = %+v", p)
	}
	p, err = xds.ProxyFromNode(&corev3.Node{Id: "envoy-1"})
	if err != nil || p.Kind != xds.KindSidecar || p.Namespace != "default" {
		t.Errorf("bare node = %+v, %v; want a sidecar in default", p, err)
	}
	p, err = xds.ProxyFromNode(&corev3.Node{Id: "router~10.0.0.9~ingress-1~edge.svc.cluster.local"})
	if err != nil || p.Kind != xds.KindRouter || p.Namespace != "edge" || !p.RunsEnvoy() {
		t.Errorf("Istio gateway node = %+v, %v; want a router in edge", p, err)
	}
	p, err = xds.ProxyFromNode(&corev3.Node{Id: "sidecar~10.0.0.9~web-1~edge.svc.cluster.local"})
	if err != nil || p.Kind != xds.KindSidecar {
		t.Errorf("Istio sidecar node = %+v, %v; want a sidecar", p, err)
	}
	if _, err := xds.ProxyFromNode(&corev3.Node{}); err == nil {
		t.Error("node without id accepted")
	}
	bad, _ := structpb.NewStruct(map[string]any{"LABELS": "app=x"})
	if _, err := xds.ProxyFromNode(&corev3.Node{Id: "x", Metadata: bad}); err == nil {
		t.Error("LABELS as a string accepted")
	}
}

func TestFeedSettingsValidate(t *testing.T) {
	if err := model.DefaultFeedSettings().Validate(); err != nil {
		t.Fatal(err)
	}
	if d := model.DefaultFeedSettings(); d.DebounceQuiet != 100*time.Millisecond || d.DebounceMax != time.Second {
		t.Errorf("defaults = %+v", d)
	}
	if err := (model.FeedSettings{DebounceQuiet: time.Second, DebounceMax: time.Millisecond}).Validate(); err == nil {
		t.Error("max < quiet accepted")
	}
	if _, err := model.NewFeed(store.NewStore(), model.FeedSettings{DebounceQuiet: -1}); err == nil {
		t.Error("negative quiet accepted")
	}
}

// histogramCount returns a histogram's sample count.
func (m *mesh) histogramCount(name string) uint64 {
	m.t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		m.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func (m *mesh) gauge(name string) float64 {
	m.t.Helper()
	mfs, _ := m.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

func newDeltaClientNS(t *testing.T, ctx context.Context, addr, id, ns string, labels map[string]any) *deltaClient {
	c := newDeltaClient(t, ctx, addr, id)
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": ns, "LABELS": labels})
	c.node = &corev3.Node{Id: id, Metadata: md}
	return c
}

func TestProxiesWithIdenticalInputsShareOneGeneration(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := store.NewStore()
	objs := []*store.Object{seObj("a", "a.internal", "a"), weObj("a1", "a", "10.0.0.1")}
	if err := cs.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, ctx, cs)
	var clients []*deltaClient
	for i := range 4 {
		ns := "default"
		if i == 3 {
			ns = "other"
		}
		c := newDeltaClientNS(t, ctx, m.addr, fmt.Sprintf("p%d", i), ns, map[string]any{"pod": fmt.Sprint(i)})
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"*"}})
		c.next()
		clients = append(clients, c)
	}
	if got := m.counter("vmesh_xds_generations_total", ""); got != 2 {
		t.Errorf("generations for 4 proxies in 2 namespaces = %v, want 2", got)
	}
	groups := map[string]string{}
	for _, st := range m.syncz() {
		groups[st.ID] = st.Group
	}
	if groups["p0"] != groups["p1"] || groups["p1"] != groups["p2"] || groups["p0"] == groups["p3"] || groups["p0"] == "" {
		t.Errorf("groups = %v, want p0-p2 together and p3 apart", groups)
	}

	// A change regenerates once per group, not once per proxy.
	objs = append(objs, seObj("b", "b.internal", "b"))
	if err := cs.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	for _, c := range clients {
		if r := c.next(); len(r.GetResources()) != 1 {
			t.Fatalf("after adding b: %v, want the new cluster only", names(r))
		}
	}
	if got := m.counter("vmesh_xds_generations_total", ""); got != 4 {
		t.Errorf("generations after one change = %v, want 4 (2 groups x 2 snapshots)", got)
	}
	if got := m.gauge("vmesh_xds_connected_proxies"); got != 4 {
		t.Errorf("connected proxies = %v, want 4", got)
	}
}

func TestDebounceCoalescesBursts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := store.NewStore()
	reg := prometheus.NewRegistry()
	srv, err := xds.NewServer(xds.Options{Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := model.NewFeed(cs, model.FeedSettings{DebounceQuiet: 500 * time.Millisecond, DebounceMax: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx, feed) }()
	<-srv.Ready()
	m := &mesh{t: t, reg: reg}
	for i := range 50 {
		if err := cs.Replace(testSource, []*store.Object{seObj("a", "a.internal", "a"), weObj("a1", "a", fmt.Sprintf("10.0.0.%d", i+1))}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "one debounced push", func() bool { return m.histogramCount("vmesh_xds_model_build_seconds") >= 2 })
	time.Sleep(700 * time.Millisecond) // longer than quiet: a second push would have happened by now
	if got := m.histogramCount("vmesh_xds_model_build_seconds"); got != 2 {
		t.Errorf("model builds = %d, want 2 (initial + one for the burst of 50 changes)", got)
	}
	cancel()
	<-done
}
