package console

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/vmesh/vmesh/internal/protodiff"
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
	// Fields, for a changed object, lists what changed in it, one field a
	// line ("spec.http[0].route[0].weight: 80 -> 50"), at most
	// maxFieldLines of them.
	Fields string
}

// maxFieldLines bounds the fields shown of one changed object.
const maxFieldLines = 20

// fieldChanges renders what changed between two versions of an object:
// its labels and annotations, then its spec's fields.
func fieldChanges(before, after *store.Object) string {
	var sb strings.Builder
	meta := func(what string, a, b map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(a)) {
			if v, ok := b[k]; !ok {
				fmt.Fprintf(&sb, "metadata.%s.%s: %q -> (none)\n", what, k, a[k])
			} else if v != a[k] {
				fmt.Fprintf(&sb, "metadata.%s.%s: %q -> %q\n", what, k, a[k], v)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(b)) {
			if _, ok := a[k]; !ok {
				fmt.Fprintf(&sb, "metadata.%s.%s: (none) -> %q\n", what, k, b[k])
			}
		}
	}
	meta("labels", before.Labels, after.Labels)
	meta("annotations", before.Annotations, after.Annotations)
	if before.Spec != nil && after.Spec != nil && before.Spec.ProtoReflect().Descriptor() == after.Spec.ProtoReflect().Descriptor() {
		for _, line := range strings.SplitAfter(protodiff.Lines(before.Spec, after.Spec, maxFieldLines), "\n") {
			if line != "" {
				sb.WriteString("spec." + line)
			}
		}
	}
	if (before.Healthy == nil) != (after.Healthy == nil) || before.Healthy != nil && *before.Healthy != *after.Healthy {
		fmt.Fprintf(&sb, "health: %s -> %s\n", healthWord(before.Healthy), healthWord(after.Healthy))
	}
	return strings.TrimSuffix(sb.String(), "\n")
}

// healthWord names a WorkloadEntry's reported health.
func healthWord(h *bool) string {
	switch {
	case h == nil:
		return "unknown"
	case *h:
		return "healthy"
	}
	return "unhealthy"
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
			ch.Changed = append(ch.Changed, ObjectChange{Key: k, Origin: after.Origin, Fields: fieldChanges(before, after)})
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
