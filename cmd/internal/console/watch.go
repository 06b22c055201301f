package console

import (
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/vmesh/vmesh/store"
)

const (
	// storeCheckEvery is how often the watcher compares the Store's
	// snapshot with the last one it saw: a source's errors change the
	// snapshot without notifying subscribers. One pointer comparison.
	storeCheckEvery = 200 * time.Millisecond
	// syncCheckMin is the shortest wait between two reads of the proxies'
	// sync state, which is read only while a page is open.
	syncCheckMin = 500 * time.Millisecond
	// syncCheckShare bounds the time spent reading the sync state: the
	// next read waits syncCheckShare times as long as the last one took.
	syncCheckShare = 20
	// maxHistory is how many Store revisions the changes page keeps.
	maxHistory = 100
)

// watcher is Run's state: it notices changes, records them in the
// history and ticks the hub.
type watcher struct {
	c        *Console
	sub      *store.Subscription
	seen     *store.Snapshot // the last snapshot ticked for
	recorded *store.Snapshot // the last snapshot recorded in the history
	syncHash uint64
	nextSync time.Time
}

func newWatcher(c *Console) *watcher {
	w := &watcher{c: c, sub: c.src.Store.Subscribe()}
	w.sub.Take()
	snap := c.src.Store.Snapshot()
	w.seen, w.recorded = snap, snap
	c.record(Change{From: snap.Revision, Revision: snap.Revision, Time: time.Now(), Sources: sourceRevisions(snap), Start: true, Objects: snap.Len()})
	return w
}

func (w *watcher) close() {
	w.sub.Close()
	w.c.hub.stop()
}

// storeChanged records what the Store's latest revisions changed.
func (w *watcher) storeChanged() {
	ch := w.sub.Take()
	snap := w.c.src.Store.Snapshot()
	if len(ch.Keys) > 0 {
		d := diff(w.recorded, snap, ch.Keys)
		// Revisions already new: none is still to come for this entry.
		d.awaitsRevisions = slices.Equal(d.Sources, w.c.lastSources())
		w.c.record(d)
		w.recorded = snap
	}
	w.seen = snap
	w.c.hub.bump()
}

// check ticks the hub when the Store's snapshot changed without a
// notification (a source's status) or, while a page is open, when a
// proxy's sync state changed.
func (w *watcher) check(now time.Time) {
	// The Store notifies in the same locked step that publishes a
	// snapshot: an object change is pending on sub and is recorded
	// first, so a source's new revision amends its entry.
	select {
	case <-w.sub.C():
		w.storeChanged()
	default:
	}
	if snap := w.c.src.Store.Snapshot(); snap != w.seen {
		w.seen = snap
		// A newer object change than the one recorded is pending on sub:
		// its entry will carry these revisions.
		if revs := sourceRevisions(snap); snap.Revision == w.recorded.Revision && !slices.Equal(revs, w.c.lastSources()) {
			w.c.amendSources(snap.Revision, revs)
		}
		w.c.hub.bump()
	}
	if w.c.src.Syncz == nil || !w.c.hub.watched() || now.Before(w.nextSync) {
		return
	}
	start := time.Now()
	h := syncHash(w.c)
	took := time.Since(start)
	w.nextSync = now.Add(max(syncCheckMin, syncCheckShare*took))
	if h != w.syncHash {
		w.syncHash = h
		w.c.hub.bump()
	}
}

// syncHash digests what the proxies page shows of every proxy's state.
func syncHash(c *Console) uint64 {
	h := fnv.New64a()
	for _, s := range c.src.Syncz() {
		h.Write([]byte(s.ID + "\x00" + s.Protocol + "\x00" + s.Group + "\x00"))
		for _, t := range sortedTypes(s.Types) {
			ts := s.Types[t]
			h.Write([]byte(t + "\x00" + ts.Sent + "\x00" + ts.Acked + "\x00" + ts.Nack + "\x00" + strconv.Itoa(ts.Resources) + "\x00"))
		}
	}
	return h.Sum64()
}
