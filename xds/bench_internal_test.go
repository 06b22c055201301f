package xds

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
)

var benchSize = modeltest.Size{Services: 1000, EndpointsPerService: 10, Routes: 100, Namespaces: 10}

func benchSnapshot(b *testing.B, objs []*store.Object, st *store.Store) *model.Snapshot {
	b.Helper()
	if err := st.Replace(store.Source{Name: "bench", Class: store.ClassConfig}, objs); err != nil {
		b.Fatal(err)
	}
	return model.Build(st.Snapshot())
}

// BenchmarkGenerateOneProxy generates and serialises the full config (LDS,
// RDS, CDS, EDS) one proxy sees: 1,000 services, 10,000 endpoints.
func BenchmarkGenerateOneProxy(b *testing.B) {
	s := benchSnapshot(b, modeltest.Objects(benchSize), store.NewStore())
	p := &Proxy{ID: "p", Kind: KindGRPC, Namespace: "ns-0"}
	b.ReportAllocs()
	for b.Loop() {
		g, err := generate(s, p, "k")
		if err != nil {
			b.Fatal(err)
		}
		if g.Count(resourcev3.ClusterType) != 1200 {
			b.Fatal(g.Count(resourcev3.ClusterType))
		}
	}
}

// BenchmarkGenerateOneSidecar generates and serialises the full config of
// one Envoy sidecar on a VM (its scope's outbound part and its own inbound
// part, every reference checked): 1,000 services, 10,000 endpoints. It is
// the server's work when a VM connects.
func BenchmarkGenerateOneSidecar(b *testing.B) {
	s := benchSnapshot(b, modeltest.Objects(benchSize), store.NewStore())
	p := &Proxy{ID: "vm", Kind: KindSidecar, Namespace: "ns-0", IPs: []string{"10.200.0.1"}, WorkloadName: "vm"}
	b.ReportAllocs()
	for b.Loop() {
		g, err := generate(s, p, "k")
		if err != nil {
			b.Fatal(err)
		}
		if g.Count(resourcev3.ListenerType) == 0 || g.Count(resourcev3.ClusterType) == 0 {
			b.Fatal("no listeners or clusters")
		}
	}
}

// benchWatcher is a proxy that keeps one open SotW watch per type, as a
// proxy that ACKs at once would.
type benchWatcher struct {
	proxy *Proxy
	subs  map[string]*subscription
	chans map[string]chan cachev3.Response
}

func newBenchWatchers(c *cache, n, groups int, names map[string][]string) []*benchWatcher {
	var out []*benchWatcher
	for i := range n {
		w := &benchWatcher{
			proxy: &Proxy{ID: fmt.Sprintf("p%d", i), Kind: KindGRPC, Namespace: fmt.Sprintf("ns-%d", i%groups)},
			subs:  map[string]*subscription{}, chans: map[string]chan cachev3.Response{},
		}
		for t, ns := range names {
			w.subs[t] = newSotwSubscription(ns, false)
			w.chans[t] = make(chan cachev3.Response, 1)
		}
		out = append(out, w)
	}
	return out
}

// drain takes any answers and reopens the watches (the proxy's ACK).
func (w *benchWatcher) drain(b testing.TB, c *cache) int {
	n := 0
	for t, ch := range w.chans {
		select {
		case r := <-ch:
			n++
			w.subs[t].deliver(r.(heldAnswer))
			w.open(b, c, t, "1")
		default:
		}
	}
	return n
}

func (w *benchWatcher) open(b testing.TB, c *cache, t, nonce string) {
	req := &discoveryv3.DiscoveryRequest{TypeUrl: t, ResponseNonce: nonce}
	if _, err := c.open(&watch{proxy: w.proxy, typeURL: t, sub: w.subs[t], req: req, sotw: w.chans[t]}, nonce == ""); err != nil {
		b.Fatal(err)
	}
}

func newBenchCache(b *testing.B) *cache {
	m, err := newMetrics(nil)
	if err != nil {
		b.Fatal(err)
	}
	return newCache(slog.New(slog.NewTextHandler(io.Discard, nil)), m)
}

// subscriptions returns what each benchmark proxy watches: 10 services' LDS,
// RDS, CDS and EDS (service 0 always among them).
func subscriptions() map[string][]string {
	out := map[string][]string{}
	for i := range 10 {
		h := modeltest.Host(i * 97)
		out[resourcev3.ListenerType] = append(out[resourcev3.ListenerType], ListenerName(h, 7070))
		out[resourcev3.RouteType] = append(out[resourcev3.RouteType], ListenerName(h, 7070))
		out[resourcev3.ClusterType] = append(out[resourcev3.ClusterType], ClusterName(7070, "", h))
		out[resourcev3.EndpointType] = append(out[resourcev3.EndpointType], ClusterName(7070, "", h))
	}
	return out
}

// BenchmarkFullPush1000Proxies10Groups pushes a change that touches every
// proxy's routes (a VirtualService used by all of them is edited) to 1,000
// connected proxies in 10 groups: 10 generations, 1,000 RDS answers.
func BenchmarkFullPush1000Proxies10Groups(b *testing.B) {
	objs := modeltest.Objects(benchSize)
	st := store.NewStore()
	c := newBenchCache(b)
	c.push(benchSnapshot(b, objs, st), time.Time{})
	ws := newBenchWatchers(c, 1000, 10, subscriptions())
	for _, w := range ws {
		for t := range w.subs {
			w.open(b, c, t, "")
		}
		w.drain(b, c)
	}
	// Find service 0's VirtualService to flip its weights each iteration.
	var vsIdx int
	for i, o := range objs {
		if o.Kind == store.KindVirtualService && o.Name == "svc-0000" {
			vsIdx = i
		}
	}
	orig := objs[vsIdx]
	alt := modeltest.Objects(modeltest.Size{Services: 1, Routes: 1})[1]
	alt.Namespace = orig.Namespace
	alt.Spec.(interface{ Reset() }).Reset()
	variants := []*store.Object{orig, alt}
	snaps := make([]*model.Snapshot, 2)
	for i, v := range variants {
		objs[vsIdx] = v
		snaps[i] = benchSnapshot(b, objs, st)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		stats := c.push(snaps[i%2], time.Time{})
		if stats.responses != 1000 || stats.groups != 10 {
			b.Fatalf("push: %+v, want 1000 responses in 10 groups", stats)
		}
		b.StopTimer()
		for _, w := range ws {
			w.drain(b, c)
		}
		b.StartTimer()
	}
}

// BenchmarkEDSPush1000Proxies changes one endpoint of a service that 1,000
// proxies watch: an EDS-only push (no LDS/RDS/CDS regeneration) answering
// 1,000 EDS watches with the one changed resource.
func BenchmarkEDSPush1000Proxies(b *testing.B) {
	objs := modeltest.Objects(benchSize)
	st := store.NewStore()
	c := newBenchCache(b)
	c.push(benchSnapshot(b, objs, st), time.Time{})
	ws := newBenchWatchers(c, 1000, 10, subscriptions())
	for _, w := range ws {
		for t := range w.subs {
			w.open(b, c, t, "")
		}
		w.drain(b, c)
	}
	var weIdx int
	for i, o := range objs {
		if o.Kind == store.KindWorkloadEntry && o.Name == "svc-0000-0" {
			weIdx = i
		}
	}
	snaps := make([]*model.Snapshot, 2)
	for i := range snaps {
		objs[weIdx] = modeltest.WorkloadEntry(objs[weIdx].Namespace, "svc-0000", 0, fmt.Sprintf("10.255.0.%d", i+1))
		snaps[i] = benchSnapshot(b, objs, st)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		stats := c.push(snaps[i%2], time.Time{})
		if stats.responses != 1000 {
			b.Fatalf("push: %+v, want 1000 EDS responses", stats)
		}
		b.StopTimer()
		for _, w := range ws {
			if n := w.drain(b, c); n != 1 {
				b.Fatalf("proxy got %d answers, want 1 (EDS)", n)
			}
		}
		b.StartTimer()
	}
}

// BenchmarkSidecarPush1000VMs pushes a VirtualService change to 1,000
// connected Envoy sidecars, one VM each (distinct IPs, so 1,000 groups)
// over 10 namespaces, each watching its listeners and clusters (wildcard)
// and its route configuration of port 7070: 10 scope parts brought
// forward, 1,000 groups composed, 1,000 RDS answers (each the port's
// ~1,000 virtual hosts). Without the split into scope and VM parts this
// was 1,000 full generations.
func BenchmarkSidecarPush1000VMs(b *testing.B) {
	objs := modeltest.Objects(benchSize)
	st := store.NewStore()
	c := newBenchCache(b)
	c.push(benchSnapshot(b, objs, st), time.Time{})
	var ws []*benchWatcher
	for i := range 1000 {
		w := &benchWatcher{
			proxy: &Proxy{ID: fmt.Sprintf("vm-%d", i), Kind: KindSidecar, Namespace: fmt.Sprintf("ns-%d", i%10),
				IPs: []string{fmt.Sprintf("10.200.%d.%d", i/250, i%250)}, WorkloadName: fmt.Sprintf("vm-%d", i)},
			subs: map[string]*subscription{
				resourcev3.ListenerType: newSotwSubscription(nil, true),
				resourcev3.ClusterType:  newSotwSubscription(nil, true),
				resourcev3.RouteType:    newSotwSubscription([]string{"7070"}, false),
			},
			chans: map[string]chan cachev3.Response{},
		}
		for t := range w.subs {
			w.chans[t] = make(chan cachev3.Response, 1)
			w.open(b, c, t, "")
		}
		w.drain(b, c)
		ws = append(ws, w)
	}
	var vsIdx int
	for i, o := range objs {
		if o.Kind == store.KindVirtualService && o.Name == "svc-0000" {
			vsIdx = i
		}
	}
	orig := objs[vsIdx]
	alt := modeltest.Objects(modeltest.Size{Services: 1, Routes: 1})[1]
	alt.Namespace = orig.Namespace
	alt.Spec.(interface{ Reset() }).Reset()
	snaps := make([]*model.Snapshot, 2)
	for i, v := range []*store.Object{orig, alt} {
		objs[vsIdx] = v
		snaps[i] = benchSnapshot(b, objs, st)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		stats := c.push(snaps[i%2], time.Time{})
		if stats.responses != 1000 || stats.groups != 1000 {
			b.Fatalf("push: %+v, want 1000 responses in 1000 groups", stats)
		}
		b.StopTimer()
		for _, w := range ws {
			w.drain(b, c)
		}
		b.StartTimer()
	}
}
