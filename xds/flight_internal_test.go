package xds

import (
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/gen/gentest"
	networking "istio.io/api/networking/v1alpha3"
)

// TestNewGroupGeneratedOutsideTheLock: while a new Envoy sidecar group is
// being generated for a connecting stream (the generator blocked in a
// hook), another stream's ACK is taken and a push answers that stream, ACKed
// again; neither waits for the new group. Once released, the connecting
// stream is answered from the snapshot the push installed (its generation
// for the older one is not kept), and the groups gauge counts both groups.
// With the generation under the cache's lock, the ACK and the push would
// wait for the hook, which waits for them: the test fails at its deadline.
func TestNewGroupGeneratedOutsideTheLock(t *testing.T) {
	base := gentest.Base()
	st := store.NewStore()
	s0 := gentest.Snapshot(t, st, base)
	s1 := gentest.Snapshot(t, st, gentest.Edit(base, store.KindVirtualService, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
		v := gentest.Clone(o.Spec.(*networking.VirtualService))
		v.Http[0].Route[0].Weight, v.Http[0].Route[1].Weight = 10, 90
		o.Spec = v
		return o
	}))
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(testLog(t), m)
	c.push(s0, time.Time{})

	// Stream A, proxyless, holds service 0's routes.
	route := ListenerName(modeltest.Host(0), 7070)
	a := &benchWatcher{proxy: &Proxy{ID: "a", Kind: KindGRPC, Namespace: "ns-0"},
		subs:  map[string]*subscription{resourcev3.RouteType: newSotwSubscription([]string{route}, false)},
		chans: map[string]chan cachev3.Response{resourcev3.RouteType: make(chan cachev3.Response, 1)}}
	a.open(t, c, resourcev3.RouteType, "")
	if n := a.drain(t, c); n != 1 {
		t.Fatalf("stream a: %d answers on connect, want 1", n)
	}

	// Stream B, an Envoy sidecar of a new group: its generation blocks
	// until released.
	b := &Proxy{ID: "b", Kind: KindSidecar, Namespace: "ns-1", IPs: []string{"10.7.7.7"}}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var calls []string
	var mu sync.Mutex
	c.generating = func(key string) {
		mu.Lock()
		calls = append(calls, key)
		mu.Unlock()
		if key == GroupKey(s0, b) {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
	}
	bch := make(chan cachev3.Response, 1)
	bsub := newSotwSubscription(nil, true)
	opened := make(chan error, 1)
	go func() {
		_, err := c.open(&watch{proxy: b, typeURL: resourcev3.ListenerType, sub: bsub, req: &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ListenerType}, sotw: bch}, true)
		opened <- err
	}()
	deadline := time.After(30 * time.Second)
	select {
	case <-entered:
	case <-deadline:
		t.Fatal("the new group's generation never started")
	}

	// Meanwhile: stream A's ACK, then a push that changes its routes.
	done := make(chan pushStats, 1)
	acked := make(chan error, 1)
	go func() {
		// The ACK of the connect answer.
		req := &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.RouteType, ResponseNonce: "1"}
		_, err := c.open(&watch{proxy: a.proxy, typeURL: resourcev3.RouteType, sub: a.subs[resourcev3.RouteType], req: req, sotw: a.chans[resourcev3.RouteType]}, false)
		acked <- err
		done <- c.push(s1, time.Time{})
	}()
	select {
	case err := <-acked:
		if err != nil {
			t.Fatal(err)
		}
	case <-deadline:
		close(release)
		t.Fatal("stream a's ACK waited for another group's generation")
	}
	select {
	case st := <-done:
		if st.responses != 1 {
			t.Fatalf("push: %+v, want 1 response (stream a's routes)", st)
		}
	case <-deadline:
		close(release)
		t.Fatal("a push waited for another group's generation")
	}
	select {
	case r := <-a.chans[resourcev3.RouteType]:
		a.subs[resourcev3.RouteType].deliver(r.(heldAnswer))
		if v, _ := r.GetVersion(); v != Version(s1) {
			t.Fatalf("stream a got version %s, want %s", v, Version(s1))
		}
		a.open(t, c, resourcev3.RouteType, "2") // its ACK, still during b's generation
	default:
		t.Fatal("stream a was not answered by the push")
	}

	close(release)
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stream b's watch never opened")
	}
	select {
	case r := <-bch:
		if v, _ := r.GetVersion(); v != Version(s1) {
			t.Fatalf("stream b got version %s, want %s (the snapshot installed during its generation)", v, Version(s1))
		}
		dr, _ := r.GetDiscoveryResponse()
		if len(dr.GetResources()) < 2 {
			t.Fatalf("stream b got %d listeners, want virtualOutbound, virtualInbound and the outbound ones", len(dr.GetResources()))
		}
	default:
		t.Fatal("stream b was not answered")
	}
	mu.Lock()
	if len(calls) != 2 {
		t.Errorf("group generations %v, want b's twice (for each snapshot)", calls)
	}
	mu.Unlock()
	c.mu.Lock()
	held := len(c.gens)
	c.mu.Unlock()
	if got := gaugeValue(t, m); got != 2 || held != 2 {
		t.Errorf("vmesh_xds_proxy_groups %v with %d groups held, want 2", got, held)
	}
}

// gaugeValue reads vmesh_xds_proxy_groups.
func gaugeValue(t *testing.T, m *metrics) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.groups.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetGauge().GetValue()
}
