// Package cowmap is an immutable map that is cheap to derive from: a new
// version shares every part of the old one that an edit does not touch.
// vmesh keeps one version per config snapshot (the Store's objects by key,
// a proxy group's resources by name) and derives the next from a handful
// of changed keys, so a change costs what it touches, not the map's size.
package cowmap

import (
	"hash/maphash"
	"iter"
	"maps"
	"reflect"
)

// shardBits sets the number of shards: an edit copies the shards it
// touches, each about Len()/256 entries.
const shardBits = 8

const shards = 1 << shardBits

// Map is an immutable map from K to V. The zero value is not usable; use
// New. A Map may be read from many goroutines.
type Map[K comparable, V any] struct {
	seed   maphash.Seed
	shards *[shards]map[K]V // nil entries are empty
	n      int
}

// New returns an empty Map.
func New[K comparable, V any]() *Map[K, V] {
	return &Map[K, V]{seed: maphash.MakeSeed(), shards: &[shards]map[K]V{}}
}

// From returns a Map holding m's entries.
func From[K comparable, V any](m map[K]V) *Map[K, V] {
	e := New[K, V]().Edit()
	for k, v := range m {
		e.Set(k, v)
	}
	return e.Map()
}

func (m *Map[K, V]) shard(k K) int {
	return int(maphash.Comparable(m.seed, k) >> (64 - shardBits))
}

// Get returns the value for k and whether it is present.
func (m *Map[K, V]) Get(k K) (V, bool) {
	v, ok := m.shards[m.shard(k)][k]
	return v, ok
}

// Len returns the number of entries.
func (m *Map[K, V]) Len() int { return m.n }

// All yields every entry, in no particular order.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for _, s := range m.shards {
			for k, v := range s {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// Keys yields every key, in no particular order.
func (m *Map[K, V]) Keys() iter.Seq[K] {
	return func(yield func(K) bool) {
		for k := range m.All() {
			if !yield(k) {
				return
			}
		}
	}
}

// Edit starts a new version of m. m itself does not change.
func (m *Map[K, V]) Edit() *Editor[K, V] {
	s := *m.shards
	return &Editor[K, V]{base: m, shards: &s, n: m.n}
}

// Editor builds a new version of a Map. It copies a shard the first time
// it changes it. An Editor is for one goroutine, and is spent by Map.
type Editor[K comparable, V any] struct {
	base   *Map[K, V]
	shards *[shards]map[K]V
	copied [shards]bool
	n      int
}

func (e *Editor[K, V]) own(i int) map[K]V {
	if !e.copied[i] {
		m := maps.Clone(e.shards[i]) // copies the table, no rehashing
		if m == nil {
			m = map[K]V{}
		}
		e.shards[i] = m
		e.copied[i] = true
	}
	return e.shards[i]
}

// Set sets k to v.
func (e *Editor[K, V]) Set(k K, v V) {
	s := e.own(e.base.shard(k))
	n := len(s)
	s[k] = v
	e.n += len(s) - n // one hash: a new key grows the shard
}

// Delete removes k.
func (e *Editor[K, V]) Delete(k K) {
	i := e.base.shard(k)
	if _, ok := e.shards[i][k]; !ok {
		return
	}
	delete(e.own(i), k)
	e.n--
}

// Get returns the value for k in the version being built.
func (e *Editor[K, V]) Get(k K) (V, bool) {
	v, ok := e.shards[e.base.shard(k)][k]
	return v, ok
}

// Map returns the new version. The Editor must not be used afterwards.
func (e *Editor[K, V]) Map() *Map[K, V] {
	m := &Map[K, V]{seed: e.base.seed, shards: e.shards, n: e.n}
	e.shards = nil
	return m
}

// Changed yields the keys whose values differ between a and b (present in
// one only, or not same), each once. Versions derived from one another
// share their untouched shards, which it skips: comparing a version with
// the one it was edited from costs the shards the edits touched.
func Changed[K comparable, V any](a, b *Map[K, V], same func(V, V) bool) iter.Seq[K] {
	return func(yield func(K) bool) {
		if a.seed != b.seed {
			for k, v := range a.All() {
				if w, ok := b.Get(k); !ok || !same(v, w) {
					if !yield(k) {
						return
					}
				}
			}
			for k := range b.All() {
				if _, ok := a.Get(k); !ok {
					if !yield(k) {
						return
					}
				}
			}
			return
		}
		for i := range shards {
			sa, sb := a.shards[i], b.shards[i]
			if sameShard(sa, sb) {
				continue
			}
			for k, v := range sa {
				if w, ok := sb[k]; !ok || !same(v, w) {
					if !yield(k) {
						return
					}
				}
			}
			for k := range sb {
				if _, ok := sa[k]; !ok {
					if !yield(k) {
						return
					}
				}
			}
		}
	}
}

// sameShard reports whether two shards are the same map.
func sameShard[K comparable, V any](a, b map[K]V) bool {
	if a == nil || b == nil {
		return len(a) == 0 && len(b) == 0
	}
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
