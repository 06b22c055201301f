package xds

import (
	"context"
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// Staged rollout serves two config versions at once (rollout.go): the last
// good one, in the base cache, and a candidate commit, in the candidate
// cache. arms is the one cache the stream loops see: it serves each stream
// from one of the two, by its proxy's rollout membership, and moves a
// stream, with its open watches and its make-before-break state, when the
// membership changes (a commit goes to the canaries, is held or promoted).
// A moved stream is answered by its new cache from what it holds (its
// subscriptions), so it gets exactly what differs between the versions.

// arms dispatches the streams between the base and candidate caches.
type arms struct {
	base, cand *cache
	// mu is taken for writing to move streams between the caches, and for
	// reading to open or cancel a watch, so that a watch is always open in
	// its stream's cache.
	mu sync.RWMutex
	// smu guards the fields below.
	smu sync.Mutex
	// streams are the open streams and the cache each is served from.
	streams map[streamRef]*armStream
	// deltaReqs names the stream of a delta request between
	// OnStreamDeltaRequest and CreateDeltaWatch; deltaIDs the stream of
	// each delta stream id.
	deltaReqs map[*discoveryv3.DeltaDiscoveryRequest]int64
	deltaIDs  map[int64]streamRef
	// canary, when set, says which proxies the candidate cache serves.
	canary func(*Proxy) bool
}

// armStream is one open stream.
type armStream struct {
	proxy *Proxy
	arm   *cache
}

func newArms(base, cand *cache) *arms {
	return &arms{base: base, cand: cand, streams: map[streamRef]*armStream{},
		deltaReqs: map[*discoveryv3.DeltaDiscoveryRequest]int64{}, deltaIDs: map[int64]streamRef{}}
}

var _ cachev3.Cache = (*arms)(nil)

// armFor returns the cache of w's stream, choosing it on the stream's
// first watch. Callers hold a.mu (either way).
func (a *arms) armFor(w *watch) *cache {
	a.smu.Lock()
	defer a.smu.Unlock()
	ref := w.ref()
	st := a.streams[ref]
	if st == nil {
		st = &armStream{proxy: w.proxy, arm: a.base}
		if a.canary != nil && a.canary(w.proxy) {
			st.arm = a.cand
		}
		a.streams[ref] = st
	}
	return st.arm
}

// armOf returns the cache serving stream ref (the base cache for a stream
// it does not know). Callers hold a.mu (either way).
func (a *arms) armOf(ref streamRef) *cache {
	a.smu.Lock()
	defer a.smu.Unlock()
	if st := a.streams[ref]; st != nil {
		return st.arm
	}
	return a.base
}

// openIn opens w in its stream's cache and returns its cancel.
func (a *arms) openIn(w *watch, first bool) (func(), error) {
	if !served(w.typeURL) {
		// Unknown types (e.g. SDS) stay open without answers.
		return func() {}, nil
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if _, err := a.armFor(w).open(w, first); err != nil {
		return nil, err
	}
	return func() {
		a.mu.RLock()
		defer a.mu.RUnlock()
		a.armOf(w.ref()).cancelWatch(w)
	}, nil
}

// CreateWatch implements cachev3.ConfigWatcher for state-of-the-world
// streams.
func (a *arms) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	w, err := sotwWatchOf(req, sub, ch)
	if err != nil {
		return nil, err
	}
	return a.openIn(w, req.GetResponseNonce() == "")
}

// CreateDeltaWatch implements cachev3.ConfigWatcher for delta streams.
func (a *arms) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	a.smu.Lock()
	id, known := a.deltaReqs[req]
	delete(a.deltaReqs, req)
	if known {
		a.deltaIDs[id] = streamRef{delta: ch}
	}
	a.smu.Unlock()
	w, err := deltaWatchOf(req, sub, ch, id, known)
	if err != nil {
		return nil, err
	}
	return a.openIn(w, false)
}

// Fetch implements cachev3.ConfigFetcher; vmesh serves streams only.
func (a *arms) Fetch(ctx context.Context, req *cachev3.Request) (cachev3.Response, error) {
	return a.base.Fetch(ctx, req)
}

// deltaRequest notes the stream a delta request came on.
func (a *arms) deltaRequest(id int64, req *discoveryv3.DeltaDiscoveryRequest) {
	a.smu.Lock()
	a.deltaReqs[req] = id
	a.smu.Unlock()
}

// deltaStreamClosed forgets a delta stream.
func (a *arms) deltaStreamClosed(id int64) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	a.smu.Lock()
	ref, ok := a.deltaIDs[id]
	delete(a.deltaIDs, id)
	arm := a.base
	if st := a.streams[ref]; ok && st != nil {
		arm = st.arm
		delete(a.streams, ref)
	}
	a.smu.Unlock()
	arm.deltaStreamClosed(id)
}

// streamClosed forgets a SotW stream.
func (a *arms) streamClosed(ch chan cachev3.Response) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	ref := streamRef{sotw: ch}
	a.smu.Lock()
	arm := a.base
	if st := a.streams[ref]; st != nil {
		arm = st.arm
		delete(a.streams, ref)
	}
	a.smu.Unlock()
	arm.streamClosed(ch)
}

// setCanary makes canary say which proxies the candidate cache serves
// (nil: none) and moves every stream whose cache changes.
func (a *arms) setCanary(canary func(*Proxy) bool) (moved int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	type move struct {
		ref      streamRef
		from, to *cache
	}
	var moves []move
	a.smu.Lock()
	a.canary = canary
	for ref, st := range a.streams {
		to := a.base
		if canary != nil && canary(st.proxy) {
			to = a.cand
		}
		if st.arm != to {
			moves = append(moves, move{ref: ref, from: st.arm, to: to})
			st.arm = to
		}
	}
	a.smu.Unlock()
	for _, m := range moves {
		m.to.adoptStream(m.ref, m.from.takeStream(m.ref))
	}
	return len(moves)
}

// armOfProxy returns the cache serving the proxy with id, for debug
// output: the cache of one of its streams, else the base cache.
func (a *arms) armOfProxy(id string) *cache {
	a.smu.Lock()
	defer a.smu.Unlock()
	for _, st := range a.streams {
		if st.proxy.ID == id {
			return st.arm
		}
	}
	return a.base
}

// onCandidate counts the streams the candidate cache serves.
func (a *arms) onCandidate() (ids []string) {
	a.smu.Lock()
	defer a.smu.Unlock()
	for _, st := range a.streams {
		if st.arm == a.cand {
			ids = append(ids, st.proxy.ID)
		}
	}
	return ids
}

// movedStream is what a cache gives the other of a stream it served.
type movedStream struct {
	proxy *Proxy
	// watches are the stream's open watches, staged its make-before-break
	// state, subs its subscription of every type it watched.
	watches []*watch
	staged  *stagedStream
	subs    map[string]*subscription
	deltaID int64
	isDelta bool
}

// takeStream removes stream ref from the cache: its open watches, its
// make-before-break state and its subscriptions, returned to be adopted
// by the other cache, and everything else the cache keeps of it.
func (c *cache) takeStream(ref streamRef) *movedStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	mv := &movedStream{}
	if m := c.members[ref]; m != nil {
		mv.proxy, mv.subs = m.proxy, m.subs
	}
	var ws []*watch
	for w := range c.watches {
		if w.ref() == ref {
			ws = append(ws, w)
		}
	}
	var st *stagedStream
	if ref.sotw != nil {
		st = c.staged[ref.sotw]
	}
	c.closeStreamLocked(ref)
	for _, w := range ws {
		delete(c.watches, w)
		w.seen, w.groupSnap = nil, nil
	}
	if ref.delta != nil {
		for id, ch := range c.deltaStreams {
			if ch == ref.delta {
				delete(c.deltaStreams, id)
				mv.deltaID, mv.isDelta = id, true
			}
		}
	}
	if st != nil {
		clear(st.open)
		clear(st.waiting)
	}
	mv.watches, mv.staged = ws, st
	return mv
}

// adoptStream makes a stream taken from the other cache (takeStream) a
// member of this one, with its make-before-break state, and opens its
// watches: each is answered with what differs between what the stream
// holds and this cache's config.
func (c *cache) adoptStream(ref streamRef, mv *movedStream) {
	c.mu.Lock()
	if mv.staged != nil {
		c.staged[ref.sotw] = mv.staged
	}
	if mv.proxy != nil {
		key := ""
		if c.snap != nil {
			key = GroupKey(c.snap, mv.proxy)
		}
		m := &member{proxy: mv.proxy, key: key, keySnap: c.snap, subs: map[string]*subscription{}}
		for t, sub := range mv.subs {
			m.subs[t] = sub
		}
		c.members[ref] = m
		c.groupStreams[key]++
		if mv.isDelta {
			c.deltaStreams[mv.deltaID] = ref.delta
		}
	}
	c.mu.Unlock()
	for _, w := range mv.watches {
		_, _ = c.open(w, false)
	}
}

// settled reports whether every stream of the cache holds its group's
// current config: for every type it watches, the proxy answered the last
// response (its watch is open) and the watch was examined against the
// current generation with nothing held back. Else it names a stream and
// type that has not.
func (c *cache) settled() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	open := make(map[streamKey]*watch, len(c.watches))
	for w := range c.watches {
		open[w.key()] = w
	}
	for ref, m := range c.members {
		if c.snap == nil {
			return false, m.proxy.ID + ": no config yet"
		}
		g := c.gens[m.key]
		for t := range m.subs {
			if !served(t) {
				continue
			}
			w := open[streamKey{sotw: ref.sotw, delta: ref.delta, typeURL: t}]
			if w == nil || g == nil || w.seen != g {
				return false, m.proxy.ID + " " + shortType(t)
			}
		}
	}
	return true, ""
}
