package xds

import (
	"github.com/vmesh/vmesh/model"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/vmesh/vmesh/xds/gen"
)

// Members: the cache keeps, for every open stream, which group it belongs
// to, so that what a departed proxy leaves behind (its group's generation
// when it was the group's last stream, the answers it was sent, its
// make-before-break state) is freed when its stream closes, not at the
// next push.

// streamRef names one stream to the cache: go-control-plane gives each
// stream one response channel.
type streamRef struct {
	sotw  chan cachev3.Response
	delta chan cachev3.DeltaResponse
}

func (w *watch) ref() streamRef { return streamRef{sotw: w.sotw, delta: w.delta} }

// member is an open stream's proxy and its group key at the cache's
// snapshot ("" before the first one).
type member struct {
	proxy *Proxy
	key   string
	// keySnap is the snapshot key is for.
	keySnap *model.Snapshot
	// subs is the stream's subscription of each type it watches, for the
	// debug dump of what it holds (held.go).
	subs map[string]*subscription
}

// joinLocked records w's stream as a member of its group, or moves it to
// the group it now belongs to. Callers hold c.mu.
func (c *cache) joinLocked(w *watch) {
	ref := w.ref()
	key := ""
	if c.snap != nil {
		key = w.groupKey(c.snap)
	}
	m := c.members[ref]
	if m == nil {
		m = &member{proxy: w.proxy, key: key, keySnap: c.snap, subs: map[string]*subscription{}}
		m.subs[w.typeURL] = w.sub
		if w.deltaKnown {
			c.deltaStreams[w.deltaID] = w.delta
		}
		c.members[ref] = m
		c.groupStreams[key]++
		return
	}
	m.proxy = w.proxy
	m.subs[w.typeURL] = w.sub
	m.keySnap = c.snap
	if m.key != key {
		c.leaveGroupLocked(m.key)
		m.key = key
		c.groupStreams[key]++
	}
}

// leaveGroupLocked counts one stream less in the group key; the group's
// generation is dropped with its last stream. Callers hold c.mu.
func (c *cache) leaveGroupLocked(key string) {
	c.groupStreams[key]--
	if c.groupStreams[key] > 0 {
		return
	}
	delete(c.groupStreams, key)
	if g := c.gens[key]; g != nil {
		delete(c.diffs, g)
		delete(c.gens, key)
		c.kindFor(g.Workload.Kind).cache.Dropped(g, c.gens)
	}
	delete(c.genErrs, key)
	c.metrics.groups.Set(float64(len(c.gens)))
}

// rekeyMembersLocked recomputes every stream's group at the cache's new
// snapshot (a push may move proxies between groups). A member keyed at
// prev keeps its key when d, prev's diff to the new snapshot, leaves every
// key as it was. Callers hold c.mu.
func (c *cache) rekeyMembersLocked(prev *model.Snapshot, d *model.Diff) {
	clear(c.groupStreams)
	same := d.SameViewKeys()
	for _, m := range c.members {
		if !same || m.keySnap != prev {
			m.key = GroupKey(c.snap, m.proxy)
		}
		m.keySnap = c.snap
		c.groupStreams[m.key]++
	}
}

// deltaStreamClosed forgets a delta stream's state.
func (c *cache) deltaStreamClosed(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.deltaStreams[id]; ok {
		delete(c.deltaStreams, id)
		c.closeStreamLocked(streamRef{delta: ch})
	}
}

// streamClosed forgets a SotW stream's state (sotwADS calls it when the
// stream ends, after cancelling its watches).
func (c *cache) streamClosed(ch chan cachev3.Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeStreamLocked(streamRef{sotw: ch})
}

// closeStreamLocked forgets everything the cache keeps for a stream that
// ended: its open watches, its last answers, its make-before-break state,
// and its membership (the group goes with its last stream). Callers hold
// c.mu.
func (c *cache) closeStreamLocked(ref streamRef) {
	for _, t := range gen.TypeURLs() {
		delete(c.sent, streamKey{sotw: ref.sotw, delta: ref.delta, typeURL: t})
	}
	if ref.sotw != nil {
		if st := c.staged[ref.sotw]; st != nil {
			for _, w := range st.open {
				delete(c.watches, w)
			}
			delete(c.staged, ref.sotw)
		}
	}
	if m := c.members[ref]; m != nil {
		delete(c.members, ref)
		c.leaveGroupLocked(m.key)
	}
}
