package xds

import (
	"context"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/gen/gentest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"
)

// moveEndpoint returns objs with WorkloadEntry name at a new address.
func moveEndpoint(objs []*store.Object, name, addr string) []*store.Object {
	out := append([]*store.Object(nil), objs...)
	for i, o := range out {
		if o.Kind == store.KindWorkloadEntry && o.Name == name {
			n := *o
			n.Spec = &networking.WorkloadEntry{Address: addr, Labels: o.Spec.(*networking.WorkloadEntry).GetLabels()}
			out[i] = &n
		}
	}
	return out
}

func assignmentNames(t *testing.T, rs []*anypb.Any) []string {
	t.Helper()
	var out []string
	for _, a := range rs {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		out = append(out, cla.GetClusterName())
	}
	return out
}

// TestSotWStreamIsRecognisedAcrossRequests runs a state-of-the-world ADS
// stream against the real go-control-plane server and checks that the
// cache sees the stream's requests as one stream: the answer a push sends
// is recorded under the same key as the answer before it, so the ACK that
// follows starts from what the stream holds. (go-control-plane's default
// SotW mode makes a new response channel per request; the cache would
// then never find a stream's last answer and would recompute every ACK
// from scratch.)
func TestSotWStreamIsRecognisedAcrossRequests(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	objs := modeltest.Objects(modeltest.Size{Services: 4, EndpointsPerService: 2, Routes: 1, Namespaces: 1})
	cs := store.NewStore()
	src := store.Source{Name: "t", Class: store.ClassConfig}
	if err := cs.Replace(src, objs); err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(Options{Logger: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := model.NewFeed(cs, model.FeedSettings{DebounceQuiet: 5 * time.Millisecond, DebounceMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Run(ctx, feed) }()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ctx, lis) }()
	<-s.Ready()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": "ns-0"})
	a, b := ClusterName(7070, "", modeltest.Host(0)), ClusterName(7070, "", modeltest.Host(1))
	names := []string{a, b}
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "p", Metadata: md}, TypeUrl: resourcev3.EndpointType, ResourceNames: names}
	exchange := func() []string {
		t.Helper()
		if err := ads.Send(req); err != nil {
			t.Fatal(err)
		}
		r, err := ads.Recv()
		if err != nil {
			t.Fatal(err)
		}
		req = &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}
		return assignmentNames(t, r.GetResources())
	}
	if got := exchange(); len(got) != 2 {
		t.Fatalf("first answer %v, want both assignments", got)
	}
	// ACK, then an endpoint of service 0 moves.
	if err := ads.Send(req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ACK's watch", func() bool { return s.openWatches() == 1 })
	if err := cs.Replace(src, moveEndpoint(objs, "svc-0000-0", "10.77.0.1")); err != nil {
		t.Fatal(err)
	}
	r, err := ads.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := assignmentNames(t, r.GetResources()); len(got) != 1 || got[0] != a {
		t.Fatalf("after the endpoint change: %v, want [%s]", got, a)
	}
	req = &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}
	if err := ads.Send(req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second ACK's watch", func() bool { return s.openWatches() == 1 })
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	if len(s.cache.sent) != 1 {
		t.Fatalf("the cache keeps %d answers for one stream's one type, want 1: it does not recognise the stream across requests", len(s.cache.sent))
	}
	for w := range s.cache.watches {
		if s.cache.heldGeneration(w) == nil {
			t.Fatal("the ACK of the push is not recognised as holding the pushed generation")
		}
	}
}

func (s *Server) openWatches() int {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	return len(s.cache.watches)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestDroppedAnswerIsSentAgain covers go-control-plane's ordered ADS mode
// dropping an answer that is still queued when the stream's next request
// of the same type arrives: the answer changes what the stream holds only
// once sent, so the next watch answers the change again.
func TestDroppedAnswerIsSentAgain(t *testing.T) {
	objs := modeltest.Objects(modeltest.Size{Services: 4, EndpointsPerService: 2, Routes: 1, Namespaces: 1})
	st := store.NewStore()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(testLog(t), m)
	c.push(gentest.Snapshot(t, st, objs), time.Time{})
	a, b := ClusterName(7070, "", modeltest.Host(0)), ClusterName(7070, "", modeltest.Host(1))
	names := []string{a, b}
	sub := newSotwSubscription(names, false)
	ch := make(chan cachev3.Response, 4)
	p := &Proxy{ID: "p", Kind: KindGRPC, Namespace: "ns-0"}
	open := func(nonce string) {
		t.Helper()
		w := &watch{proxy: p, typeURL: resourcev3.EndpointType, sub: sub, req: &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names, ResponseNonce: nonce}, sotw: ch}
		if _, err := c.open(w, nonce == ""); err != nil {
			t.Fatal(err)
		}
	}
	sent := func() []string { // what go-control-plane does when it sends an answer
		t.Helper()
		select {
		case r := <-ch:
			sub.deliver(r.(heldAnswer))
			dr, _ := r.GetDiscoveryResponse()
			return assignmentNames(t, dr.GetResources())
		default:
			t.Fatal("no answer")
		}
		return nil
	}
	open("")
	sent()
	open("1")
	// The endpoint moves; the answer is queued, then dropped by a request
	// of the same type before it is sent.
	c.push(gentest.Snapshot(t, st, moveEndpoint(objs, "svc-0000-0", "10.77.0.1")), time.Time{})
	select {
	case <-ch:
	default:
		t.Fatal("the push did not answer")
	}
	open("1")
	if got := sent(); len(got) != 1 || got[0] != a {
		t.Fatalf("after a dropped answer: %v, want [%s] again", got, a)
	}
	// Sent this time: the ACK has nothing new.
	open("2")
	if len(ch) != 0 {
		t.Fatal("the ACK of a sent answer was answered again")
	}
	// A second move is answered from the changed names.
	c.push(gentest.Snapshot(t, st, moveEndpoint(objs, "svc-0000-0", "10.77.0.2")), time.Time{})
	if got := sent(); len(got) != 1 || got[0] != a {
		t.Fatalf("after the second move: %v, want [%s]", got, a)
	}
	if held := sub.ReturnedResources(); len(held) != 2 || held[a] != lookup(c.generationFor(p), resourcev3.EndpointType, a).Hash {
		t.Fatalf("held after the second move: %v", held)
	}
}
