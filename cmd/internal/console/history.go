package console

import (
	"cmp"
	"slices"
	"time"

	"github.com/vmesh/vmesh/store"
)

// Change is what one Store revision changed, as the console saw it.
type Change struct {
	// Revision is the Store revision after the change; From is the first
	// revision it covers (the Store hands on changes merged when several
	// revisions land before the console reads them).
	From, Revision int64
	// Time is when the console saw it.
	Time time.Time
	// Sources is each config source's revision (a git commit) then.
	Sources []SourceRevision
	// Added, Changed and Removed are the objects whose winner changed.
	Added, Changed, Removed []ObjectChange
	// Start marks the state the console found when it started; Objects is
	// how many objects the Store held then.
	Start   bool
	Objects int
	// awaitsRevisions marks an entry of object changes whose sources have
	// not reported a new revision since: a git source reports the commit
	// just after writing its objects.
	awaitsRevisions bool
}

// SourceRevision is one source's revision.
type SourceRevision struct {
	Source, Revision string
}

// ObjectChange is one object a revision changed, with where it is (or was)
// defined.
type ObjectChange struct {
	Key    store.Key
	Origin store.Origin
}

// diff returns the change from prev to next of the keys that changed.
func diff(prev, next *store.Snapshot, keys map[store.Key]struct{}) Change {
	ch := Change{From: prev.Revision + 1, Revision: next.Revision, Time: time.Now(), Sources: sourceRevisions(next)}
	for k := range keys {
		before, after := prev.Get(k), next.Get(k)
		switch {
		case before == nil && after != nil:
			ch.Added = append(ch.Added, ObjectChange{Key: k, Origin: after.Origin})
		case before != nil && after == nil:
			ch.Removed = append(ch.Removed, ObjectChange{Key: k, Origin: before.Origin})
		case after != nil:
			ch.Changed = append(ch.Changed, ObjectChange{Key: k, Origin: after.Origin})
		}
	}
	for _, l := range [][]ObjectChange{ch.Added, ch.Changed, ch.Removed} {
		slices.SortFunc(l, func(a, b ObjectChange) int {
			return cmp.Or(cmp.Compare(a.Key.Kind, b.Key.Kind), cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.Name, b.Key.Name))
		})
	}
	return ch
}

// sourceRevisions lists the sources' revisions in the snapshot's order.
func sourceRevisions(s *store.Snapshot) []SourceRevision {
	out := make([]SourceRevision, 0, len(s.Sources))
	for _, st := range s.Sources {
		if st.Class == store.ClassConfig.String() {
			out = append(out, SourceRevision{Source: st.Source, Revision: st.Revision})
		}
	}
	return out
}

// record appends a change to the history, dropping the oldest past
// maxHistory.
func (c *Console) record(ch Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.history = append(c.history, ch)
	if n := len(c.history) - maxHistory; n > 0 {
		c.history = slices.Delete(c.history, 0, n)
	}
}

// lastSources returns the source revisions of the newest history entry.
func (c *Console) lastSources() []SourceRevision {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.history) == 0 {
		return nil
	}
	return c.history[len(c.history)-1].Sources
}

// amendSources records new source revisions: on the newest entry when
// it holds this Store revision's object changes and no revision was
// reported since (a git source reports its commit just after writing its
// objects), else as an entry of its own (a commit that changed no object).
func (c *Console) amendSources(rev int64, revs []SourceRevision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.history); n > 0 && c.history[n-1].Revision == rev && c.history[n-1].awaitsRevisions {
		c.history[n-1].Sources, c.history[n-1].awaitsRevisions = revs, false
		return
	}
	c.history = append(c.history, Change{From: rev, Revision: rev, Time: time.Now(), Sources: revs})
}

// historyNewestFirst returns a copy of the history, newest first.
func (c *Console) historyNewestFirst() []Change {
	c.mu.Lock()
	out := slices.Clone(c.history)
	c.mu.Unlock()
	slices.Reverse(out)
	return out
}
