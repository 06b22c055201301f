package store

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/vmesh/vmesh/internal/cowmap"
)

// sortedList is one kind's objects in a snapshot, sorted by namespace and
// name, computed when first read: most snapshots' lists are never read (a
// registry's endpoint change is rebuilt from the changed objects alone),
// and building each would cost every change the size of the kind.
//
// A list not yet computed is its parent's plus the keys touched since;
// the parents form a chain back to a computed list. The chain is bounded:
// once the keys pending along it pass an eighth of that list's length, the
// Store computes the list at once (so each change costs a constant share
// of one merge, amortised). Computing a list drops its parent, so a chain
// never holds more than one computed list.
type sortedList struct {
	once sync.Once
	// done is set once list is; parent is cleared after done is set.
	done   atomic.Bool
	list   []*Object
	parent atomic.Pointer[sortedList]

	// Fixed at creation. The objects are the snapshot's (get's byKey),
	// not held here: a chain would keep every old version of the map.
	kind    Kind
	keys    []Key // touched since parent
	pending int   // keys along the chain to the computed list
	baseLen int   // that list's length
}

// computedList returns a sortedList holding list.
func computedList(list []*Object) *sortedList {
	l := &sortedList{list: list}
	l.once.Do(func() {})
	l.done.Store(true)
	return l
}

// nextList returns the list of kind after its keys (distinct) changed in
// byKey (the next snapshot's objects), given prev, the kind's list before
// them (nil: none yet).
func nextList(prev *sortedList, kind Kind, keys []Key, byKey *cowmap.Map[Key, *Object]) *sortedList {
	if prev == nil {
		prev = computedList(nil)
	}
	l := &sortedList{kind: kind, keys: keys}
	l.parent.Store(prev)
	if prev.done.Load() {
		l.pending, l.baseLen = len(keys), len(prev.list)
	} else {
		l.pending, l.baseLen = prev.pending+len(keys), prev.baseLen
	}
	if l.pending*8 > l.baseLen {
		l.get(byKey)
	}
	return l
}

// get returns the sorted list, computing it on first use from byKey, the
// objects of a snapshot the list belongs to (snapshots share the lists of
// kinds that did not change between them).
func (l *sortedList) get(byKey *cowmap.Map[Key, *Object]) []*Object {
	l.once.Do(func() {
		// The keys along the chain to the nearest computed list (a list
		// whose parent is gone was computed meanwhile: done is set first);
		// none needed when so many changed that the list is sorted anew.
		var chain []*sortedList
		cur := l
		for !cur.done.Load() {
			if p := cur.parent.Load(); p != nil {
				chain = append(chain, cur)
				cur = p
			}
		}
		if l.pending*8 > len(cur.list) {
			l.list = sortKind(l.kind, byKey)
		} else {
			touched := map[Key]struct{}{}
			for _, c := range chain {
				for _, k := range c.keys {
					touched[k] = struct{}{}
				}
			}
			l.list = mergeKind(cur.list, l.kind, touched, byKey)
		}
		l.done.Store(true)
		l.parent.Store(nil)
	})
	return l.list
}

// mergeKind returns the sorted list of a kind's objects in byKey, given
// the previous list and the keys (all of the kind) that may have changed:
// the previous list merged with the changed keys when few changed, else
// sorted anew.
func mergeKind(prev []*Object, kind Kind, touched map[Key]struct{}, byKey *cowmap.Map[Key, *Object]) []*Object {
	if len(touched)*8 > len(prev) {
		return sortKind(kind, byKey)
	}
	keys := make([]Key, 0, len(touched))
	for k := range touched {
		keys = append(keys, k)
	}
	// One merge pass over prev, the keys in list order: inserting and
	// deleting each key in place would move the list's tail once per key.
	slices.SortFunc(keys, func(a, b Key) int {
		return compareNames(a.Namespace, a.Name, b.Namespace, b.Name)
	})
	out := make([]*Object, 0, len(prev)+len(keys))
	i := 0
	for _, k := range keys {
		j, found := slices.BinarySearchFunc(prev[i:], k, func(o *Object, k Key) int {
			return compareNames(o.Namespace, o.Name, k.Namespace, k.Name)
		})
		out = append(out, prev[i:i+j]...)
		i += j
		if found {
			i++
		}
		if o, _ := byKey.Get(k); o != nil {
			out = append(out, o)
		}
	}
	return append(out, prev[i:]...)
}

// sortKind returns a kind's objects in byKey, sorted.
func sortKind(kind Kind, byKey *cowmap.Map[Key, *Object]) []*Object {
	var out []*Object
	for k, o := range byKey.All() {
		if k.Kind == kind {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, CompareObjects)
	return out
}
