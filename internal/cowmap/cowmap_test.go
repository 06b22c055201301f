package cowmap_test

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/vmesh/vmesh/internal/cowmap"
)

// TestVersionsAgreeWithMaps derives versions through random edits and
// checks each against a plain map, and that every earlier version is
// unchanged.
func TestVersionsAgreeWithMaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type version struct {
		m    *cowmap.Map[int, int]
		want map[int]int
	}
	cur := version{m: cowmap.New[int, int](), want: map[int]int{}}
	var history []version
	for step := range 200 {
		e := cur.m.Edit()
		want := maps.Clone(cur.want)
		for range rng.IntN(50) {
			k := rng.IntN(2000)
			if rng.IntN(4) == 0 {
				e.Delete(k)
				delete(want, k)
			} else {
				e.Set(k, step)
				want[k] = step
			}
			w, present := want[k]
			if v, ok := e.Get(k); ok != present || v != w {
				t.Fatalf("step %d: editor's Get(%d) = %d, %v", step, k, v, ok)
			}
		}
		history = append(history, cur)
		next := version{m: e.Map(), want: want}
		var wantChanged []int
		for k := range 2000 {
			a, aok := cur.want[k]
			b, bok := next.want[k]
			if aok != bok || a != b {
				wantChanged = append(wantChanged, k)
			}
		}
		same := func(a, b int) bool { return a == b }
		got := slices.Sorted(cowmap.Changed(cur.m, next.m, same))
		if !slices.Equal(got, wantChanged) {
			t.Fatalf("step %d: Changed = %v, want %v", step, got, wantChanged)
		}
		if unrelated := slices.Sorted(cowmap.Changed(cowmap.From(cur.want), next.m, same)); !slices.Equal(unrelated, wantChanged) {
			t.Fatalf("step %d: Changed between unrelated maps = %v, want %v", step, unrelated, wantChanged)
		}
		cur = next
		for _, h := range append(history, cur) {
			if got := maps.Collect(h.m.All()); !maps.Equal(got, h.want) || h.m.Len() != len(h.want) {
				t.Fatalf("step %d: a version holds %d entries (Len %d), want %d", step, len(got), h.m.Len(), len(h.want))
			}
		}
	}
	for k, v := range cur.want {
		if got, ok := cur.m.Get(k); !ok || got != v {
			t.Fatalf("Get(%d) = %d, %v; want %d", k, got, ok, v)
		}
	}
	if _, ok := cur.m.Get(-1); ok {
		t.Fatal("Get of a missing key found it")
	}
	if m := cowmap.From(map[string]int{"a": 1, "b": 2}); m.Len() != 2 {
		t.Fatalf("From: %d entries", m.Len())
	}
}

// BenchmarkEditOne is the cost of deriving a version that changes one key
// of a 50,000-entry map: about one shard's copy, not the map's.
func BenchmarkEditOne(b *testing.B) {
	e := cowmap.New[int, int]().Edit()
	for i := range 50000 {
		e.Set(i, i)
	}
	m := e.Map()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e := m.Edit()
		e.Set(i%50000, -i)
		m = e.Map()
		i++
	}
}
