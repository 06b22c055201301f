package xds

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestSubscriptionReadsItsNodeOnce: the requests of a stream carry its
// first node (the servers fill it in), which a subscription reads into a
// Proxy once; a request with another node is read again, and a node that
// does not parse is an error that keeps the last Proxy from being reused
// for it.
func TestSubscriptionReadsItsNodeOnce(t *testing.T) {
	node := func(ns string) *corev3.Node {
		md, err := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": ns})
		if err != nil {
			t.Fatal(err)
		}
		return &corev3.Node{Id: "p-1", Metadata: md}
	}
	s := newSotwSubscription(nil, true)
	first := node("ns-a")
	p1, err := s.proxyOf(first)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.proxyOf(first)
	if err != nil {
		t.Fatal(err)
	}
	if p1 != p2 || p1.Namespace != "ns-a" || p1.Kind != KindGRPC {
		t.Errorf("the same node: proxies %p (%s, %s) and %p, want one proxy of ns-a, gRPC", p1, p1.Namespace, p1.Kind, p2)
	}
	p3, err := s.proxyOf(node("ns-b"))
	if err != nil {
		t.Fatal(err)
	}
	if p3 == p1 || p3.Namespace != "ns-b" {
		t.Errorf("another node: proxy %p of %s, want a new one of ns-b", p3, p3.Namespace)
	}
	if _, err := s.proxyOf(&corev3.Node{}); err == nil {
		t.Error("a node without an id: no error")
	}
}

// The subscription rules of the xDS protocol, as go-control-plane v0.14's
// stream.Subscription has them, on vmesh's own subscription: what a stream
// holds after each request, and which requests change it (seq).
func TestSubscriptionRules(t *testing.T) {
	held := func(s *subscription) map[string]string { return maps.Clone(s.ReturnedResources()) }

	// State of the world: the names of each request replace the last ones;
	// what is no longer named is no longer held, unless "*" is named.
	s := newSotwSubscription(nil, true)
	if !s.IsWildcard() {
		t.Fatal("an empty first SotW request is not the legacy wildcard")
	}
	s.deliver(plainAnswer{"a": "1", "b": "1"})
	s.setNames(nil)
	if !s.IsWildcard() || len(held(s)) != 2 {
		t.Fatalf("an empty request left the legacy wildcard: wildcard %v, held %v", s.IsWildcard(), held(s))
	}
	seq := s.seq
	s.setNames([]string{"a"})
	if s.IsWildcard() || !maps.Equal(held(s), map[string]string{"a": "1"}) || s.seq == seq {
		t.Fatalf("naming a: wildcard %v, held %v, seq %d→%d", s.IsWildcard(), held(s), seq, s.seq)
	}
	s.setNames([]string{"*", "c"})
	if !s.IsWildcard() || !maps.Equal(held(s), map[string]string{"a": "1"}) {
		t.Fatalf(`naming "*": wildcard %v, held %v`, s.IsWildcard(), held(s))
	}
	seq = s.seq
	s.setNames([]string{"*", "c"})
	if s.seq != seq {
		t.Fatal("repeating the names changed what the stream holds")
	}

	// Delta: the client's initial versions are held; unsubscribing drops a
	// name, or marks it "" under a wildcard so it is answered again.
	d := newDeltaSubscription([]string{"a", "b"}, nil, map[string]string{"a": "1", "b": "1"}, true)
	if d.IsWildcard() || !maps.Equal(held(d), map[string]string{"a": "1", "b": "1"}) {
		t.Fatalf("first delta request: wildcard %v, held %v", d.IsWildcard(), held(d))
	}
	seq = d.seq
	d.update(nil, nil)
	if d.seq != seq {
		t.Fatal("an ACK changed what the stream holds")
	}
	d.update(nil, []string{"b"})
	if !maps.Equal(held(d), map[string]string{"a": "1"}) || d.seq == seq {
		t.Fatalf("unsubscribing b: held %v", held(d))
	}
	d.update([]string{"*"}, nil)
	d.update(nil, []string{"a"})
	if !d.IsWildcard() || !maps.Equal(held(d), map[string]string{"a": ""}) {
		t.Fatalf("unsubscribing a under a wildcard: wildcard %v, held %v, want a held at version \"\"", d.IsWildcard(), held(d))
	}
	d.update(nil, []string{"*"})
	if d.IsWildcard() {
		t.Fatal(`unsubscribing "*" left the wildcard`)
	}
	legacy := newDeltaSubscription(nil, nil, nil, true)
	legacy.update(nil, []string{"x"})
	if !legacy.IsWildcard() {
		t.Fatal("an empty delta request left the legacy wildcard")
	}
	legacy.update([]string{"x"}, nil)
	if !legacy.IsWildcard() || len(legacy.SubscribedResources()) != 1 {
		t.Fatal("naming a resource after the legacy wildcard dropped the wildcard (only \"*\" unsubscribed ends it)")
	}
}

// fakeDeltaADS is an in-memory delta ADS stream.
type fakeDeltaADS struct {
	grpc.ServerStream
	ctx context.Context
	in  chan *discoveryv3.DeltaDiscoveryRequest
	out chan *discoveryv3.DeltaDiscoveryResponse
}

func (f *fakeDeltaADS) Context() context.Context     { return f.ctx }
func (f *fakeDeltaADS) SetHeader(metadata.MD) error  { return nil }
func (f *fakeDeltaADS) SendHeader(metadata.MD) error { return nil }
func (f *fakeDeltaADS) SetTrailer(metadata.MD)       {}
func (f *fakeDeltaADS) Send(r *discoveryv3.DeltaDiscoveryResponse) error {
	f.out <- r
	return nil
}
func (f *fakeDeltaADS) Recv() (*discoveryv3.DeltaDiscoveryRequest, error) {
	r, ok := <-f.in
	if !ok {
		return nil, errors.New("closed")
	}
	return r, nil
}

// deltaRecorder records the delta watches deltaADS opens.
type deltaRecorder struct {
	opened chan deltaRecorded
}

type deltaRecorded struct {
	req *discoveryv3.DeltaDiscoveryRequest
	sub *subscription
	ch  chan cachev3.DeltaResponse
}

func (r *deltaRecorder) CreateWatch(*cachev3.Request, cachev3.Subscription, chan cachev3.Response) (func(), error) {
	return nil, errors.New("not used")
}

func (r *deltaRecorder) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	r.opened <- deltaRecorded{req: req, sub: sub.(*subscription), ch: ch}
	return func() {}, nil
}

func (r *deltaRecorder) next(t *testing.T) deltaRecorded {
	t.Helper()
	select {
	case w := <-r.opened:
		return w
	case <-time.After(5 * time.Second):
		t.Fatal("no delta watch opened")
		return deltaRecorded{}
	}
}

// TestDeltaADSStreamRules: vmesh's delta server keeps go-control-plane's
// stream rules (the node carried to later requests, a type URL required,
// nonces counted per stream) and records what the stream holds in its own
// subscription once an answer is sent, so the next request's watch sees it.
func TestDeltaADSStreamRules(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &deltaRecorder{opened: make(chan deltaRecorded, 4)}
	srv := &deltaADS{ctx: ctx, cache: rec, callbacks: serverv3.CallbackFuncs{}}
	st := &fakeDeltaADS{ctx: ctx, in: make(chan *discoveryv3.DeltaDiscoveryRequest), out: make(chan *discoveryv3.DeltaDiscoveryResponse, 4)}
	done := make(chan error, 1)
	go func() { done <- srv.DeltaStreamHandler(st, resourcev3.AnyType) }()

	node := &corev3.Node{Id: "p1"}
	st.in <- &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"a", "b"}}
	first := rec.next(t)
	first.ch <- &deltaResponse{req: first.req, version: "v1", resources: []*discoveryv3.Resource{{Name: "a", Version: "1"}}, next: map[string]string{"a": "1"}, delivered: new(atomic.Bool)}
	r1 := <-st.out
	if r1.GetNonce() != "1" || r1.GetSystemVersionInfo() != "v1" {
		t.Fatalf("first response %v", r1)
	}
	st.in <- &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: r1.GetNonce(), ResourceNamesUnsubscribe: []string{"b"}}
	ack := rec.next(t)
	if ack.req.GetNode().GetId() != "p1" {
		t.Errorf("the node was not carried to a later request: %v", ack.req.GetNode())
	}
	if ack.sub != first.sub || !maps.Equal(ack.sub.ReturnedResources(), map[string]string{"a": "1"}) {
		t.Errorf("after the answer the stream holds %v, want a at 1", ack.sub.ReturnedResources())
	}
	if _, ok := ack.sub.SubscribedResources()["b"]; ok {
		t.Error("b is still subscribed after its unsubscription")
	}
	st.in <- &discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"x"}}
	select {
	case err := <-done:
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a request without a type URL ended the stream with %v, want InvalidArgument", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a request without a type URL was accepted")
	}
}
