package xds

import (
	"context"
	"maps"
	"testing"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
)

// This file pins what vmesh relies on in go-control-plane (v0.14), so that
// an upgrade that changes any of it fails here, loudly, instead of
// changing vmesh's behaviour or speed quietly:
//   - NewServerAdvanced hands every ADS stream to vmesh's own SotW and
//     delta stream loops, with the ADS type URL;
//   - vmesh's subscriptions follow the protocol rules go-control-plane's
//     stream.Subscription implements (checked step by step against it);
//   - vmesh's responses are go-control-plane cache responses.
// vmesh no longer hands go-control-plane a map it keeps using, nor reads one
// of its maps: its stream loops own every subscription (subscription.go).

var (
	_ cachev3.Cache         = (*cache)(nil)
	_ cachev3.Response      = (*sotwResponse)(nil)
	_ cachev3.DeltaResponse = (*deltaResponse)(nil)
	_ cachev3.Subscription  = (*subscription)(nil)
)

// dispatchRecorder is a SotW and delta server that records the type URL
// each stream was handed with.
type dispatchRecorder struct{ sotw, delta chan string }

func (d dispatchRecorder) StreamHandler(_ stream.Stream, typeURL string) error {
	d.sotw <- typeURL
	return nil
}

func (d dispatchRecorder) DeltaStreamHandler(_ stream.DeltaStream, typeURL string) error {
	d.delta <- typeURL
	return nil
}

func TestGoControlPlaneHandsADSStreamsToVmesh(t *testing.T) {
	rec := dispatchRecorder{sotw: make(chan string, 1), delta: make(chan string, 1)}
	srv := serverv3.NewServerAdvanced(nil, rec, rec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.StreamAggregatedResources(&fakeADS{ctx: ctx}); err != nil {
		t.Fatal(err)
	}
	if got := <-rec.sotw; got != resourcev3.AnyType {
		t.Errorf("SotW ADS stream handed with type %q, want %q", got, resourcev3.AnyType)
	}
	if err := srv.DeltaAggregatedResources(&fakeDeltaADS{ctx: ctx}); err != nil {
		t.Fatal(err)
	}
	if got := <-rec.delta; got != resourcev3.AnyType {
		t.Errorf("delta ADS stream handed with type %q, want %q", got, resourcev3.AnyType)
	}
}

// subStep is one delta request (or delivered answer) applied to both
// implementations.
type subStep struct {
	subscribe, unsubscribe []string
	deliver                map[string]string
}

func TestSubscriptionsFollowGoControlPlane(t *testing.T) {
	sotwCases := map[string][][]string{
		"legacy wildcard, then names":   {nil, nil, {"a"}, {"a", "b"}, {"b"}},
		"names, then explicit wildcard": {{"a", "b"}, {"*"}, {"*", "a"}, {"a"}},
		"names, then none":              {{"a"}, {}, {"b"}},
	}
	for name, reqs := range sotwCases {
		t.Run("sotw "+name, func(t *testing.T) {
			theirs := stream.NewSotwSubscription(reqs[0], true)
			ours := newSotwSubscription(reqs[0], true)
			for i, names := range reqs {
				if i > 0 {
					theirs.SetResourceSubscription(names)
					ours.setNames(names)
				}
				compareSubs(t, i, &theirs, ours)
				// Hold what the stream asks for (or a and b under a wildcard).
				held := map[string]string{"a": "1", "b": "1"}
				if !ours.IsWildcard() {
					held = map[string]string{}
					for n := range ours.SubscribedResources() {
						held[n] = "1"
					}
				}
				theirs.SetReturnedResources(maps.Clone(held))
				ours.deliver(plainAnswer(maps.Clone(held)))
			}
		})
	}
	deltaCases := map[string][]subStep{
		"legacy wildcard": {
			{}, {deliver: map[string]string{"a": "1", "b": "1"}}, {unsubscribe: []string{"a"}}, {subscribe: []string{"a"}},
			{unsubscribe: []string{"a"}}, {unsubscribe: []string{"*"}}, {unsubscribe: []string{"b"}},
		},
		"named, then wildcard": {
			{subscribe: []string{"a", "b"}}, {deliver: map[string]string{"a": "1", "b": "1"}}, {unsubscribe: []string{"b"}},
			{subscribe: []string{"*"}}, {unsubscribe: []string{"a"}}, {subscribe: []string{"c"}, unsubscribe: []string{"*", "c"}},
		},
	}
	for name, steps := range deltaCases {
		t.Run("delta "+name, func(t *testing.T) {
			initial := map[string]string{"z": "9"}
			theirs := stream.NewDeltaSubscription(steps[0].subscribe, steps[0].unsubscribe, maps.Clone(initial), true)
			ours := newDeltaSubscription(steps[0].subscribe, steps[0].unsubscribe, maps.Clone(initial), true)
			compareSubs(t, 0, &theirs, ours)
			for i, st := range steps[1:] {
				if st.deliver != nil {
					theirs.SetReturnedResources(maps.Clone(st.deliver))
					ours.deliver(plainAnswer(maps.Clone(st.deliver)))
				} else {
					theirs.UpdateResourceSubscriptions(st.subscribe, st.unsubscribe)
					ours.update(st.subscribe, st.unsubscribe)
				}
				compareSubs(t, i+1, &theirs, ours)
			}
		})
	}
}

func compareSubs(t *testing.T, step int, theirs *stream.Subscription, ours *subscription) {
	t.Helper()
	if theirs.IsWildcard() != ours.IsWildcard() {
		t.Errorf("step %d: wildcard %v, go-control-plane's %v", step, ours.IsWildcard(), theirs.IsWildcard())
	}
	if !maps.Equal(theirs.SubscribedResources(), ours.SubscribedResources()) {
		t.Errorf("step %d: subscribed %v, go-control-plane's %v", step, ours.SubscribedResources(), theirs.SubscribedResources())
	}
	if !maps.Equal(theirs.ReturnedResources(), ours.ReturnedResources()) {
		t.Errorf("step %d: held %v, go-control-plane's %v", step, ours.ReturnedResources(), theirs.ReturnedResources())
	}
}
