package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
	"google.golang.org/protobuf/types/known/anypb"
)

// cache is vmesh's go-control-plane cache. Unlike SnapshotCache it keeps one
// generation per proxy group rather than per node, answers each watch with
// exactly the resources the proxy subscribed to, and compares per-resource
// hashes with what the stream already holds, so a push reaches only the
// proxies whose subscribed resources changed (an endpoint change reaches only
// watchers of that cluster's EDS resource). It serves SotW and delta alike.
//
// Watches are one-shot, as go-control-plane expects: a watch is answered at
// most once and then forgotten; the proxy's next request opens the next one.
type cache struct {
	logger  *slog.Logger
	metrics *metrics
	// controlPlane, when set, goes into every response; set once, before
	// any watch.
	controlPlane *corev3.ControlPlane

	mu sync.Mutex
	// groups is the generation side (groups.go): what is served, by group.
	// The rest is the stream side: what each stream watches, was sent and
	// holds. Both are guarded by mu.
	groups
	watches map[*watch]struct{}
	// sent records, per stream and type, the last answer: the request that
	// follows it (an ACK or NACK with an unchanged subscription) then
	// starts from what the stream holds instead of recomputing it.
	sent map[streamKey]*sentState
	// staged is what the cache knows of each proxyless SotW stream, for
	// make-before-break (staging.go).
	staged  map[chan cachev3.Response]*stagedStream
	pushSeq uint64
	// members are the open streams, and groupStreams how many of them
	// each group key of snap has (members.go).
	members      map[streamRef]*member
	groupStreams map[string]int
	// deltaRequests names the stream of a delta request between
	// OnStreamDeltaRequest and CreateDeltaWatch; deltaStreams the response
	// channel of each delta stream by id, for its close.
	deltaRequests map[*discoveryv3.DeltaDiscoveryRequest]int64
	deltaStreams  map[int64]chan cachev3.DeltaResponse
}

// streamKey names one type of one ADS stream: go-control-plane gives each
// stream one response channel.
type streamKey struct {
	sotw    chan cachev3.Response
	delta   chan cachev3.DeltaResponse
	typeURL string
}

// sentState is the last answer on a stream's type.
type sentState struct {
	gen *gen.Generation
	// sub is the stream's subscription of the type and seq its change
	// count when the answer was sent: the stream holds what the answer
	// says once it was delivered (delivered) and the subscription changed
	// only by that delivery since (seq+1). A state-of-the-world answer
	// superseded by the proxy's next request of its type is dropped
	// undelivered.
	sub       *subscription
	seq       uint64
	delivered *atomic.Bool
	// names are the SotW request's resource names the answer was for.
	names []string
	push  uint64
}

func (w *watch) key() streamKey { return streamKey{sotw: w.sotw, delta: w.delta, typeURL: w.typeURL} }

// heldGeneration returns the generation whose view of w's resources the
// stream holds, when every request since the cache's last answer on the
// stream (w's included) kept the subscription; else nil, and the answer
// is forgotten.
func (c *cache) heldGeneration(w *watch) *gen.Generation {
	k := w.key()
	st := c.sent[k]
	if st == nil {
		return nil
	}
	same := st.sub == w.sub && st.delivered.Load() && w.sub.seq == st.seq+1
	if w.sotw != nil {
		same = same && slices.Equal(st.names, w.req.GetResourceNames())
	} else {
		same = same && w.dreq.GetResponseNonce() != "" && len(w.dreq.GetResourceNamesSubscribe()) == 0 && len(w.dreq.GetResourceNamesUnsubscribe()) == 0
	}
	if !same {
		delete(c.sent, k)
		return nil
	}
	return st.gen
}

// covers reports whether d's changed names are all a watch last examined
// against d.Prev can find new in the next generation.
func covers(d *gen.Diff, w *watch) bool {
	return d != nil && w.seen == d.Prev && (d.InboundSame || w.typeURL != resourcev3.ListenerType)
}

// unaffected reports whether a watch last examined against d.prev has
// nothing new in next: none of the names it sees changed. It costs the
// smaller of the changed set and the subscription.
func unaffected(d *gen.Diff, w *watch, next *gen.Generation) bool {
	if d == nil || w.seen != d.Prev {
		return false
	}
	ch := d.Changed[w.typeURL]
	if !covers(d, w) {
		// Server listeners and short-name listeners are made on demand:
		// compare them directly.
		for n := range w.sub.SubscribedResources() {
			if ch[n] {
				return false
			}
			if next.Get(w.typeURL, n) == nil && w.typeURL == resourcev3.ListenerType {
				a, b := lookup(d.Prev, w.typeURL, n), lookup(next, w.typeURL, n)
				if (a == nil) != (b == nil) || a != nil && a.Hash != b.Hash {
					return false
				}
			}
		}
		return !w.sub.IsWildcard() || len(ch) == 0
	}
	if len(ch) == 0 {
		return true
	}
	if w.sub.IsWildcard() {
		return false
	}
	subs := w.sub.SubscribedResources()
	if len(ch) <= len(subs) {
		for n := range ch {
			if _, ok := subs[n]; ok {
				return false
			}
		}
		return true
	}
	for n := range subs {
		if ch[n] {
			return false
		}
	}
	return true
}

var _ cachev3.Cache = (*cache)(nil)

type watch struct {
	proxy   *Proxy
	typeURL string
	sub     *subscription

	req   *discoveryv3.DiscoveryRequest
	sotw  chan cachev3.Response
	dreq  *discoveryv3.DeltaDiscoveryRequest
	delta chan cachev3.DeltaResponse
	// deltaID is the delta stream's id when deltaKnown (members.go).
	deltaID    int64
	deltaKnown bool

	// seen is the generation this watch was last examined against (it had
	// nothing to send then). Guarded by cache.mu.
	seen *gen.Generation
	// group is the proxy's group key at snapshot groupSnap, so a push
	// computes it once per watch. Guarded by cache.mu.
	group     string
	groupSnap *model.Snapshot
}

// groupKey returns the watch's proxy's group key at s, computing it once
// per snapshot. Callers hold c.mu.
func (w *watch) groupKey(s *model.Snapshot) string {
	if w.groupSnap != s {
		w.group, w.groupSnap = GroupKey(s, w.proxy), s
	}
	return w.group
}

// watchKeyLocked is w.groupKey(s), taken from its stream's membership when
// that is keyed at s (a push keys every stream once, rather than each of
// its watches). Callers hold c.mu.
func (c *cache) watchKeyLocked(w *watch, s *model.Snapshot) string {
	if w.groupSnap != s {
		if m := c.members[w.ref()]; m != nil && m.keySnap == s {
			w.group, w.groupSnap = m.key, s
		}
	}
	return w.groupKey(s)
}

func newCache(logger *slog.Logger, m *metrics) *cache {
	c := &cache{logger: logger, metrics: m, groups: groups{gens: map[string]*gen.Generation{}, genErrs: map[string]error{}}, watches: map[*watch]struct{}{}, sent: map[streamKey]*sentState{}, staged: map[chan cachev3.Response]*stagedStream{},
		members: map[streamRef]*member{}, groupStreams: map[string]int{}, deltaRequests: map[*discoveryv3.DeltaDiscoveryRequest]int64{}, deltaStreams: map[int64]chan cachev3.DeltaResponse{}}
	c.kinds = map[model.ProxyKind]*cacheKind{}
	env := gen.Env{Logger: logger, Generated: func(start time.Time) {
		m.generations.Inc()
		m.generateSeconds.Observe(time.Since(start).Seconds())
	}}
	for _, row := range kindTable() {
		c.kinds[row.name] = &cacheKind{row: row, cache: row.kind.NewCache(env)}
	}
	return c
}

// CreateWatch implements cachev3.ConfigWatcher for state-of-the-world streams.
func (c *cache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	w, err := sotwWatchOf(req, sub, ch)
	if err != nil {
		return nil, err
	}
	return c.open(w, req.GetResponseNonce() == "")
}

// sotwWatchOf makes the watch of a state-of-the-world request.
func sotwWatchOf(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (*watch, error) {
	own, ok := sub.(*subscription)
	if !ok {
		return nil, fmt.Errorf("xds: a subscription of type %T, not of vmesh's servers", sub)
	}
	p, err := own.proxyOf(req.GetNode())
	if err != nil {
		return nil, err
	}
	return &watch{proxy: p, typeURL: req.GetTypeUrl(), sub: own, req: req, sotw: ch}, nil
}

// deltaWatchOf makes the watch of a delta request of stream id (known
// says the id is).
func deltaWatchOf(req *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse, id int64, known bool) (*watch, error) {
	own, ok := sub.(*subscription)
	if !ok {
		return nil, fmt.Errorf("xds: a subscription of type %T, not of vmesh's servers", sub)
	}
	p, err := own.proxyOf(req.GetNode())
	if err != nil {
		return nil, err
	}
	return &watch{proxy: p, typeURL: req.GetTypeUrl(), sub: own, dreq: req, delta: ch, deltaID: id, deltaKnown: known}, nil
}

// CreateDeltaWatch implements cachev3.ConfigWatcher for delta streams.
func (c *cache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	c.mu.Lock()
	id, known := c.deltaRequests[req]
	delete(c.deltaRequests, req)
	c.mu.Unlock()
	w, err := deltaWatchOf(req, sub, ch, id, known)
	if err != nil {
		return nil, err
	}
	return c.open(w, false)
}

// Fetch implements cachev3.ConfigFetcher; vmesh serves streams only.
func (c *cache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("xds: REST fetch is not supported; use ADS")
}

func (c *cache) open(w *watch, first bool) (func(), error) {
	if !served(w.typeURL) {
		// Unknown types (e.g. SDS) stay open without answers.
		return func() {}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.joinLocked(w)
	st := c.stagedFor(w, true)
	if st != nil {
		switch w.typeURL {
		case resourcev3.RouteType:
			st.settle(w.sub.ReturnedResources())
		case resourcev3.ClusterType:
			st.asked(w.sub.SubscribedResources())
		}
	}
	if c.snap != nil {
		if g := c.ensureGenerationLocked(w); g != nil {
			if !first {
				w.seen = c.heldGeneration(w)
			}
			if (w.seen != g || first) && c.respondLocked(w, g, c.diffs[g], first, time.Time{}) {
				if st != nil {
					c.retryStagedLocked(st, w)
				}
				return func() {}, nil
			}
			if w.seen != nil || st == nil || !st.waiting[w.typeURL] {
				w.seen = g // else it held something back: every push examines it again
			}
		}
	}
	c.watches[w] = struct{}{}
	if st != nil {
		st.open[w.typeURL] = w
		c.retryStagedLocked(st, w)
	}
	return func() { c.cancelWatch(w) }, nil
}

// cancelWatch forgets w when it is still open (unanswered).
func (c *cache) cancelWatch(w *watch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, open := c.watches[w]; open {
		// Cancelled unanswered: the stream ended or sent a request
		// that replaces this one; either way its last answer is no
		// longer the state to start from.
		c.closeWatchLocked(w)
		delete(c.sent, w.key())
	}
}

// closeWatchLocked forgets an open watch, answered or cancelled. Callers
// hold c.mu.
func (c *cache) closeWatchLocked(w *watch) {
	delete(c.watches, w)
	if st := c.stagedFor(w, false); st != nil && st.open[w.typeURL] == w {
		delete(st.open, w.typeURL)
	}
}

// respondLocked answers w from g when the proxy's view of the subscribed
// resources differs from g (or when force is set: the first request of a
// stream, which gets an answer even when empty). It reports whether it
// answered. With d covering the watch (its last examination was against
// d.prev), only d's changed names are looked at. State-of-the-world RDS
// and EDS answers carry only what differs from what the stream holds: the
// xDS protocol groups every type but listeners and clusters as the
// incremental variants do (a resource missing from such a response is not
// deleted; grpc-go's xdsclient and Envoy treat them so). Callers hold
// c.mu; sends never block (each watch's channel has room for its one
// answer).
func (c *cache) respondLocked(w *watch, g *gen.Generation, d *gen.Diff, force bool, changed time.Time) bool {
	if w.typeURL == resourcev3.RouteType || w.typeURL == resourcev3.EndpointType {
		if st := c.stagedFor(w, false); st != nil {
			return c.respondStagedLocked(w, g, st, force, changed)
		}
	}
	partial := w.delta != nil || w.typeURL == resourcev3.RouteType || w.typeURL == resourcev3.EndpointType
	if !force && partial && covers(d, w) {
		return c.respondChangedLocked(w, g, d.Changed[w.typeURL], changed)
	}
	w.seen = g
	names, wildcard := w.sub.SubscribedResources(), w.sub.IsWildcard()
	held := w.sub.ReturnedResources()
	var want []*gen.Resource
	if wildcard {
		for _, r := range g.Types[w.typeURL].All() {
			want = append(want, r)
		}
	}
	for n := range names {
		if wildcard && g.Get(w.typeURL, n) != nil {
			continue
		}
		if r := lookup(g, w.typeURL, n); r != nil {
			want = append(want, r)
		}
	}
	if n, most := g.TakeRefused(); n > 0 {
		c.metrics.inboundRefused.Add(float64(n))
		c.logger.Warn("server listener names not answered: the proxy's group has the most inbound listeners it may make",
			"proxy", w.proxy.ID, "refused", n, "max", most)
	}
	next := make(map[string]string, len(want))
	for _, r := range want {
		next[r.Name] = r.Hash
	}
	if w.sotw != nil {
		if !force && maps.Equal(next, held) {
			return false
		}
		if !force && partial {
			want = slices.DeleteFunc(want, func(r *gen.Resource) bool { return held[r.Name] == r.Hash })
			if len(want) == 0 {
				return false // only removals, which RDS and EDS do not send
			}
		}
		return c.sendSotWLocked(w, g, want, next, nil, nil, changed)
	}
	// Delta: send what changed, remove what the proxy holds but no longer exists.
	var send []*gen.Resource
	for _, r := range want {
		if held[r.Name] != r.Hash {
			send = append(send, r)
		}
	}
	var removed []string
	for n, v := range held {
		if _, ok := next[n]; !ok && v != "" {
			removed = append(removed, n)
		}
	}
	return c.sendDeltaLocked(w, g, send, removed, next, nil, changed)
}

// respondChangedLocked answers a delta watch, or a SotW RDS or EDS watch,
// that held g's predecessor's view of its resources, looking only at the
// names that changed.
func (c *cache) respondChangedLocked(w *watch, g *gen.Generation, ch map[string]bool, changed time.Time) bool {
	w.seen = g
	subs, wildcard := w.sub.SubscribedResources(), w.sub.IsWildcard()
	held := w.sub.ReturnedResources()
	var send []*gen.Resource
	var removed []string
	for n := range ch {
		if !wildcard {
			if _, ok := subs[n]; !ok {
				continue
			}
		}
		r := lookup(g, w.typeURL, n)
		if r == nil {
			if v, ok := held[n]; ok && v != "" {
				removed = append(removed, n)
			}
			continue
		}
		if held[r.Name] != r.Hash {
			send = append(send, r)
		}
	}
	if len(send) == 0 && (len(removed) == 0 || w.sotw != nil) {
		return false
	}
	if held == nil {
		held = map[string]string{}
	}
	// The answer changes the held map in place once delivered (see
	// heldUpdate): no copy of what the stream holds per answer.
	u := &heldUpdate{held: held, set: send, removed: removed}
	if w.sotw != nil {
		return c.sendSotWLocked(w, g, send, held, u, nil, changed)
	}
	return c.sendDeltaLocked(w, g, send, removed, held, u, changed)
}

// heldUpdate is an answer's change to the map of what a stream holds (its
// subscription's, vmesh's own), applied when the server delivers the
// answer, in the stream's goroutine. Until then no watch of that stream
// and type is open, so nothing else reads the map.
type heldUpdate struct {
	held    map[string]string
	set     []*gen.Resource
	removed []string
	once    sync.Once
}

// apply changes the held map, once, and returns it.
func (u *heldUpdate) apply() map[string]string {
	u.once.Do(func() {
		for _, n := range u.removed {
			delete(u.held, n)
		}
		for _, r := range u.set {
			u.held[r.Name] = r.Hash
		}
	})
	return u.held
}

// sendSotWLocked sends a state-of-the-world answer carrying rs, after
// which the stream holds next; info, for a staged stream's RDS answer,
// goes with it to /debug/syncz.
func (c *cache) sendSotWLocked(w *watch, g *gen.Generation, rs []*gen.Resource, next map[string]string, u *heldUpdate, info *routeStaging, changed time.Time) bool {
	slices.SortFunc(rs, func(a, b *gen.Resource) int { return strings.Compare(a.Name, b.Name) })
	anys := make([]*anypb.Any, len(rs))
	for i, r := range rs {
		anys[i] = r.Any
	}
	resp := &sotwResponse{req: w.req, version: g.Version, resources: anys, returned: next, update: u, staging: info, delivered: new(atomic.Bool), controlPlane: c.controlPlane}
	seq := w.sub.seq
	select {
	case w.sotw <- resp:
	default:
		c.logger.Error("xDS watch channel full; dropping response", "proxy", w.proxy.ID, "type", shortType(w.typeURL))
		return false
	}
	c.sent[w.key()] = &sentState{gen: g, sub: w.sub, seq: seq, delivered: resp.delivered, names: w.req.GetResourceNames(), push: c.pushSeq}
	c.observePush(w.typeURL, string(w.proxy.Kind), changed)
	c.closeWatchLocked(w)
	return true
}

// sendDeltaLocked sends a delta answer, when there is anything to send.
func (c *cache) sendDeltaLocked(w *watch, g *gen.Generation, rs []*gen.Resource, removed []string, next map[string]string, u *heldUpdate, changed time.Time) bool {
	if len(rs) == 0 && len(removed) == 0 {
		return false
	}
	slices.SortFunc(rs, func(a, b *gen.Resource) int { return strings.Compare(a.Name, b.Name) })
	send := make([]*discoveryv3.Resource, len(rs))
	for i, r := range rs {
		send[i] = &discoveryv3.Resource{Name: r.Name, Version: r.Hash, Resource: r.Any}
	}
	slices.Sort(removed)
	resp := &deltaResponse{req: w.dreq, version: g.Version, resources: send, removed: removed, next: next, update: u, delivered: new(atomic.Bool), controlPlane: c.controlPlane}
	seq := w.sub.seq
	select {
	case w.delta <- resp:
	default:
		c.logger.Error("xDS delta channel full; dropping response", "proxy", w.proxy.ID, "type", shortType(w.typeURL))
		return false
	}
	c.sent[w.key()] = &sentState{gen: g, sub: w.sub, seq: seq, delivered: resp.delivered, push: c.pushSeq}
	c.observePush(w.typeURL, string(w.proxy.Kind), changed)
	c.closeWatchLocked(w)
	return true
}

func (c *cache) observePush(typeURL, kind string, changed time.Time) {
	t := shortType(typeURL)
	c.metrics.pushes.WithLabelValues(t).Inc()
	if !changed.IsZero() {
		c.metrics.pushSeconds.WithLabelValues(t).Observe(time.Since(changed).Seconds())
	}
}

// pushStats counts what one push did.
type pushStats struct {
	groups    int
	responses int
	edsOnly   bool // nothing but endpoints differed
}

// push installs a new model snapshot and answers every open watch whose
// resources changed. The groups are brought forward by their kinds
// (advance, groups.go); changed is when the first change of the push was
// seen, for latency.
func (c *cache) push(s *model.Snapshot, changed time.Time) pushStats {
	// Regenerate the groups with open watches outside the lock; watches keep
	// being answered from the previous snapshot meanwhile. Other groups (of
	// proxies between a response and its ACK) are generated on their next
	// request; groups of departed proxies went with their last stream
	// (members.go).
	c.mu.Lock()
	oldSnap := c.snap
	var live []*gen.Generation
	// liveKeys are the live groups' keys at oldSnap.
	liveKeys := map[*gen.Generation]string{}
	for w := range c.watches {
		if oldSnap == nil {
			break
		}
		key := c.watchKeyLocked(w, oldSnap)
		if g := c.gens[key]; g != nil {
			if _, ok := liveKeys[g]; !ok {
				liveKeys[g] = key
				live = append(live, g)
			}
		}
	}
	c.mu.Unlock()

	gens, diffs, errs, md := c.advance(oldSnap, s, live, liveKeys)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.install(s, gens, errs, diffs)
	c.rekeyMembersLocked(oldSnap, md)
	// Watches whose group has no generation yet (their proxy's group had
	// none at the previous snapshot, or changed key): generated outside the
	// lock, as on connect.
	for {
		missing := map[string]*Proxy{}
		for w := range c.watches {
			key := c.watchKeyLocked(w, s)
			if c.gens[key] == nil {
				if _, failed := c.genErrs[key]; !failed {
					missing[key] = w.proxy
				}
			}
		}
		if len(missing) == 0 {
			break
		}
		c.mu.Unlock()
		var fill []func()
		for key, p := range missing {
			fill = append(fill, func() { c.generateGroup(s, p, key) })
		}
		gen.Parallel(fill)
		c.mu.Lock()
	}
	st := pushStats{edsOnly: md != nil && md.EndpointsOnly()}
	for w := range c.watches {
		g := c.gens[c.watchKeyLocked(w, s)]
		if g == nil {
			continue
		}
		d := c.diffs[g]
		if unaffected(d, w, g) {
			w.seen = g
			continue
		}
		if c.respondLocked(w, g, d, false, changed) {
			st.responses++
		}
	}
	// Forget the answers of streams that are gone: no open watch for two
	// pushes (a live stream reopens its watch when it ACKs).
	open := make(map[streamKey]bool, len(c.watches))
	for w := range c.watches {
		open[w.key()] = true
	}
	for k, s := range c.sent {
		if !open[k] && s.push+2 <= c.pushSeq {
			delete(c.sent, k)
		}
	}
	c.pushSeq++
	st.groups = len(c.gens)
	c.metrics.groups.Set(float64(len(c.gens)))
	return st
}

// sotwResponse is a state-of-the-world answer built from shared,
// pre-serialised resources.
type sotwResponse struct {
	req       *discoveryv3.DiscoveryRequest
	version   string
	resources []*anypb.Any
	returned  map[string]string
	update    *heldUpdate // nil: returned is a new map
	staging   *routeStaging
	// delivered is set once the server sent the answer; the cache's
	// sentState shares it. It is its own allocation so that sentState
	// does not keep the answer (its resources) alive after the send.
	delivered *atomic.Bool
	// controlPlane is shared by every response: never modified.
	controlPlane *corev3.ControlPlane
}

var _ cachev3.Response = (*sotwResponse)(nil)

// GetDiscoveryResponse returns a new response each call: the server sets the
// nonce on it.
func (r *sotwResponse) GetDiscoveryResponse() (*discoveryv3.DiscoveryResponse, error) {
	return &discoveryv3.DiscoveryResponse{VersionInfo: r.version, Resources: r.resources, TypeUrl: r.req.GetTypeUrl(), ControlPlane: r.controlPlane}, nil
}
func (r *sotwResponse) GetRequest() *discoveryv3.DiscoveryRequest { return r.req }
func (r *sotwResponse) GetVersion() (string, error)               { return r.version, nil }
func (r *sotwResponse) GetResponseVersion() string                { return r.version }
func (r *sotwResponse) GetContext() context.Context               { return withRouteStaging(r.staging) }

// GetReturnedResources is what the stream holds once the response is sent.
func (r *sotwResponse) GetReturnedResources() map[string]string { return r.nextHeld() }

func (r *sotwResponse) nextHeld() map[string]string {
	if r.update != nil {
		return r.update.apply()
	}
	return r.returned
}

func (r *sotwResponse) markDelivered() { r.delivered.Store(true) }

// deltaResponse is an incremental answer.
type deltaResponse struct {
	req       *discoveryv3.DeltaDiscoveryRequest
	version   string
	resources []*discoveryv3.Resource
	removed   []string
	next      map[string]string
	update    *heldUpdate // nil: next is a new map
	// delivered is as sotwResponse's.
	delivered *atomic.Bool
	// controlPlane is shared by every response: never modified.
	controlPlane *corev3.ControlPlane
}

var _ cachev3.DeltaResponse = (*deltaResponse)(nil)

// GetDeltaDiscoveryResponse returns a new response each call: the server
// sets the nonce on it.
func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discoveryv3.DeltaDiscoveryResponse, error) {
	return &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: r.version, Resources: r.resources, RemovedResources: r.removed, TypeUrl: r.req.GetTypeUrl(), ControlPlane: r.controlPlane}, nil
}
func (r *deltaResponse) GetDeltaRequest() *discoveryv3.DeltaDiscoveryRequest { return r.req }
func (r *deltaResponse) GetSystemVersion() (string, error)                   { return r.version, nil }
func (r *deltaResponse) GetResponseVersion() string                          { return r.version }
func (r *deltaResponse) GetContext() context.Context                         { return context.Background() }

// GetNextVersionMap is what the stream holds once the response is sent.
func (r *deltaResponse) GetNextVersionMap() map[string]string { return r.nextHeld() }

func (r *deltaResponse) nextHeld() map[string]string {
	if r.update != nil {
		return r.update.apply()
	}
	return r.next
}

func (r *deltaResponse) markDelivered() { r.delivered.Store(true) }

// GetReturnedResources is GetNextVersionMap.
func (r *deltaResponse) GetReturnedResources() map[string]string { return r.GetNextVersionMap() }
