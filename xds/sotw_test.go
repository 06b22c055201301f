package xds

import (
	"context"
	"errors"
	"reflect"
	"sync"
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
)

// fakeADS is an in-memory ADS stream.
type fakeADS struct {
	grpc.ServerStream
	ctx context.Context
	in  chan *discoveryv3.DiscoveryRequest
	out chan *discoveryv3.DiscoveryResponse
}

func (f *fakeADS) Context() context.Context                    { return f.ctx }
func (f *fakeADS) SetHeader(metadata.MD) error                 { return nil }
func (f *fakeADS) SendHeader(metadata.MD) error                { return nil }
func (f *fakeADS) SetTrailer(metadata.MD)                      {}
func (f *fakeADS) Send(r *discoveryv3.DiscoveryResponse) error { f.out <- r; return nil }
func (f *fakeADS) Recv() (*discoveryv3.DiscoveryRequest, error) {
	r, ok := <-f.in
	if !ok {
		return nil, errors.New("closed")
	}
	return r, nil
}

// recordingWatcher records the watches sotwADS opens and lets the test
// answer them.
type recordingWatcher struct {
	mu      sync.Mutex
	watches []recordedWatch
}

type recordedWatch struct {
	req       *discoveryv3.DiscoveryRequest
	sub       cachev3.Subscription
	ch        chan cachev3.Response
	cancelled *bool
}

func (r *recordingWatcher) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cancelled := new(bool)
	r.watches = append(r.watches, recordedWatch{req: req, sub: sub, ch: ch, cancelled: cancelled})
	return func() { r.mu.Lock(); *cancelled = true; r.mu.Unlock() }, nil
}

func (r *recordingWatcher) CreateDeltaWatch(*cachev3.DeltaRequest, cachev3.Subscription, chan cachev3.DeltaResponse) (func(), error) {
	return nil, errors.New("not used")
}

func (r *recordingWatcher) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.watches)
}

func (r *recordingWatcher) last() recordedWatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.watches[len(r.watches)-1]
}

// TestSotWADSStreamRules checks sotwADS against the xDS stream rules it
// shares with go-control-plane's ordered ADS mode (stale nonces ignored,
// a queued answer superseded by a request of its type when it is still
// queued, the node carried
// to later requests, a type URL required) and its one difference: a
// request that repeats the subscription keeps the subscription's name set.
func TestSotWADSStreamRules(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &recordingWatcher{}
	var closed sync.WaitGroup
	closed.Add(1)
	srv := &sotwADS{ctx: ctx, cache: w, callbacks: serverv3.CallbackFuncs{StreamClosedFunc: func(int64, *corev3.Node) { closed.Done() }}}
	st := &fakeADS{ctx: ctx, in: make(chan *discoveryv3.DiscoveryRequest), out: make(chan *discoveryv3.DiscoveryResponse, 4)}
	done := make(chan error, 1)
	go func() { done <- srv.StreamHandler(st, resourcev3.AnyType) }()
	waitWatches := func(n int) recordedWatch {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); w.count() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d watches, want %d", w.count(), n)
			}
		}
		return w.last()
	}
	answer := func(rw recordedWatch, version string) *discoveryv3.DiscoveryResponse {
		t.Helper()
		rw.ch <- &cachev3.RawResponse{Request: rw.req, Version: version}
		select {
		case r := <-st.out:
			return r
		case <-time.After(5 * time.Second):
			t.Fatal("no response sent")
		}
		return nil
	}
	names := []string{"a", "b"}
	node := &corev3.Node{Id: "p1"}
	st.in <- &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: names}
	first := waitWatches(1)
	r1 := answer(first, "v1")
	if r1.GetNonce() == "" || r1.GetVersionInfo() != "v1" {
		t.Fatalf("response %v", r1)
	}

	// A stale nonce is ignored: no new watch.
	st.in <- &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names, ResponseNonce: "stale"}
	// The ACK repeats the subscription: same name set, node carried over.
	st.in <- &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"a", "b"}, ResponseNonce: r1.GetNonce()}
	ack := waitWatches(2)
	if w.count() != 2 || !*first.cancelled {
		t.Fatalf("%d watches after a stale request and an ACK (first cancelled: %v)", w.count(), *first.cancelled)
	}
	if ack.req.GetNode().GetId() != "p1" {
		t.Fatalf("node not carried to the ACK: %v", ack.req.GetNode())
	}
	if reflect.ValueOf(ack.sub.SubscribedResources()).UnsafePointer() != reflect.ValueOf(first.sub.SubscribedResources()).UnsafePointer() {
		t.Fatal("an ACK that repeats the subscription rebuilt its name set")
	}

	// A queued answer is superseded by a new request of its type, which
	// also changes the subscription.
	ack.ch <- &cachev3.RawResponse{Request: ack.req, Version: "v2"}
	time.Sleep(20 * time.Millisecond) // the answer may already be sent: then the request below is stale
	sent := len(st.out)
	var nonceNow string
	if sent == 1 {
		nonceNow = (<-st.out).GetNonce()
	} else {
		nonceNow = r1.GetNonce()
	}
	st.in <- &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"a"}, ResponseNonce: nonceNow}
	changed := waitWatches(3)
	if subs := changed.sub.SubscribedResources(); len(subs) != 1 {
		t.Fatalf("subscription after dropping b: %v", subs)
	}
	select {
	case r := <-st.out:
		t.Fatalf("a superseded answer was sent: %v", r)
	case <-time.After(20 * time.Millisecond):
	}

	// A request without a type URL ends the stream.
	st.in <- &discoveryv3.DiscoveryRequest{}
	if err := <-done; status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stream ended with %v, want InvalidArgument", err)
	}
	closed.Wait()
	if !*changed.cancelled {
		t.Fatal("the open watch was not cancelled when the stream ended")
	}
}
