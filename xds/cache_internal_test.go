package xds

import (
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"
	"weak"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/gen/gentest"
)

// TestAckStartsFromHeldState checks the cache's bookkeeping across a
// stream's requests: an ACK with an unchanged subscription starts from the
// generation the stream holds (no answer, nothing recomputed), a push then
// answers it from the changed names only, a request that changes the
// subscription is answered in full, and answers of departed streams are
// forgotten.
func TestAckStartsFromHeldState(t *testing.T) {
	objs := modeltest.Objects(modeltest.Size{Services: 6, EndpointsPerService: 2, Routes: 2, Namespaces: 1})
	st := store.NewStore()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(testLog(t), m)
	c.push(gentest.Snapshot(t, st, objs), time.Time{})
	a, b := ClusterName(7070, "", modeltest.Host(0)), ClusterName(7070, "", modeltest.Host(1))
	sub := newSotwSubscription([]string{a, b}, false)
	ch := make(chan cachev3.Response, 1)
	p := &Proxy{ID: "p", Kind: KindGRPC, Namespace: "ns-0"}
	var lastCancel func()
	open := func(names []string, nonce string) *watch {
		t.Helper()
		w := &watch{proxy: p, typeURL: resourcev3.EndpointType, sub: sub, req: &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names, ResponseNonce: nonce}, sotw: ch}
		cancel, err := c.open(w, nonce == "")
		if err != nil {
			t.Fatal(err)
		}
		lastCancel = cancel
		return w
	}
	receive := func() []string {
		t.Helper()
		select {
		case r := <-ch:
			sub.deliver(r.(heldAnswer))
			dr, _ := r.GetDiscoveryResponse()
			var out []string
			for _, a := range dr.GetResources() {
				cla := &endpointv3.ClusterLoadAssignment{}
				if err := a.UnmarshalTo(cla); err != nil {
					t.Fatal(err)
				}
				out = append(out, cla.GetClusterName())
			}
			return out
		default:
			t.Fatal("no answer")
		}
		return nil
	}
	open([]string{a, b}, "")
	if got := receive(); len(got) != 2 {
		t.Fatalf("first answer %v, want both assignments", got)
	}
	g := c.generationFor(p)
	w := open([]string{a, b}, "1")
	if w.seen != g || len(ch) != 0 {
		t.Fatalf("ACK: seen %p, want the held generation %p; %d answers", w.seen, g, len(ch))
	}
	if c.heldGeneration(w) != g {
		t.Fatal("ACK with the same subscription not recognised")
	}

	// An endpoint of service 0 moves: the push answers with a's assignment.
	objs = moveEndpoint(objs, "svc-0000-0", "10.77.0.1")
	c.push(gentest.Snapshot(t, st, objs), time.Time{})
	if got := receive(); len(got) != 1 || got[0] != a {
		t.Fatalf("after the endpoint change: %v, want [%s]", got, a)
	}
	open([]string{a, b}, "2")
	if len(ch) != 0 {
		t.Fatal("the ACK of the push was answered")
	}
	// A changed subscription is not the held state: b is dropped from the
	// returned resources by go-control-plane, then asked for again.
	sub.setNames([]string{a})
	open([]string{a}, "2")
	sub.setNames([]string{a, b})
	open([]string{a, b}, "2")
	if got := receive(); len(got) != 1 || got[0] != b {
		t.Fatalf("after subscribing to b again: %v, want [%s]", got, b)
	}
	// The stream goes away with its watch open: cancelling the watch
	// forgets the stream's answer.
	open([]string{a, b}, "3")
	lastCancel()
	if len(c.sent) != 0 {
		t.Fatalf("%d answers kept after the stream's watch was cancelled", len(c.sent))
	}
	// A stream that vanished between an answer and its ACK is forgotten
	// two pushes later.
	open([]string{a, b}, "")
	receive()
	for w := range c.watches {
		delete(c.watches, w)
	}
	for range 3 {
		c.push(gentest.Snapshot(t, st, objs), time.Time{})
	}
	if len(c.sent) != 0 {
		t.Fatalf("%d answers of departed streams kept", len(c.sent))
	}
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestSentAnswersAreNotKept checks that the cache's record of a delivered
// answer does not keep the answer itself (its resource list, one entry per
// resource a sidecar holds) alive: only whether it was delivered.
func TestSentAnswersAreNotKept(t *testing.T) {
	objs := modeltest.Objects(modeltest.Size{Services: 6, EndpointsPerService: 2, Routes: 2, Namespaces: 1})
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(testLog(t), m)
	c.push(gentest.Snapshot(t, store.NewStore(), objs), time.Time{})
	names := []string{ClusterName(7070, "", modeltest.Host(0)), ClusterName(7070, "", modeltest.Host(1))}
	p := &Proxy{ID: "p", Kind: KindGRPC, Namespace: "ns-0"}
	for _, delta := range []bool{false, true} {
		w := &watch{proxy: p, typeURL: resourcev3.EndpointType}
		sotw, dch := make(chan cachev3.Response, 1), make(chan cachev3.DeltaResponse, 1)
		if delta {
			w.sub = newDeltaSubscription(names, nil, nil, false)
			w.dreq = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: names}
			w.delta = dch
		} else {
			w.sub = newSotwSubscription(names, false)
			w.req = &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names}
			w.sotw = sotw
		}
		if _, err := c.open(w, true); err != nil {
			t.Fatal(err)
		}
		// reachable reports whether the answer is still reachable after a
		// collection; the test's own reference is the weak pointer.
		var reachable func() bool
		select {
		case r := <-sotw:
			a := r.(*sotwResponse)
			w.sub.deliver(a)
			kept := weak.Make(a)
			reachable = func() bool { runtime.GC(); return kept.Value() != nil }
		case r := <-dch:
			a := r.(*deltaResponse)
			w.sub.deliver(a)
			kept := weak.Make(a)
			reachable = func() bool { runtime.GC(); return kept.Value() != nil }
		default:
			t.Fatalf("delta %v: no answer", delta)
		}
		if reachable() {
			t.Errorf("delta %v: the delivered answer is still reachable", delta)
		}
		st := c.sent[w.key()]
		if st == nil || !st.delivered.Load() {
			t.Errorf("delta %v: the cache lost that the answer was delivered: %+v", delta, st)
		}
	}
}
