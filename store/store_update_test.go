package store_test

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/vmesh/vmesh/store"
)

// TestStoreUpdateMatchesReplace drives two Stores through the same random
// edits, one with Update (only what changed) and one with Replace (the
// whole set), alongside a registry source that overlaps the keys, and
// checks that they publish the same snapshots and the same changes. Small
// and large edits exercise both ways the sorted per-kind lists are kept.
func TestStoreUpdateMatchesReplace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := store.Source{Name: "dir:/x", Class: store.ClassConfig}
	reg := store.Source{Name: "consul", Class: store.ClassRegistry}
	byUpdate, byReplace := store.NewStore(), store.NewStore()
	subU, subR := byUpdate.Subscribe(), byReplace.Subscribe()
	defer subU.Close()
	defer subR.Close()
	cur := map[store.Key]*store.Object{}
	obj := func(i, gen int) *store.Object {
		return we(fmt.Sprintf("ns-%d", i%3), fmt.Sprintf("we-%03d", i), fmt.Sprintf("10.0.%d.%d", gen%250, i%250), store.Origin{File: "f.yaml"})
	}
	var regObjs []*store.Object
	for i := range 40 {
		regObjs = append(regObjs, obj(i*5, 999))
	}
	for _, s := range []*store.Store{byUpdate, byReplace} {
		if err := s.Replace(reg, regObjs); err != nil {
			t.Fatal(err)
		}
	}
	for step := range 300 {
		edits := 1 + rng.IntN(3)
		if step%50 == 0 {
			edits = 60 // a large edit: the lists are sorted anew
		}
		var set []*store.Object
		var remove []store.Key
		touched := map[int]bool{}
		for range edits {
			i := rng.IntN(200)
			if touched[i] {
				continue
			}
			touched[i] = true
			o := obj(i, step)
			if _, ok := cur[o.Key]; ok && rng.IntN(3) == 0 {
				remove = append(remove, o.Key)
				delete(cur, o.Key)
				continue
			}
			set = append(set, o)
			cur[o.Key] = o
		}
		if err := byUpdate.Update(src, set, remove); err != nil {
			t.Fatal(err)
		}
		if err := byReplace.Replace(src, slices.Collect(maps.Values(cur))); err != nil {
			t.Fatal(err)
		}
		u, r := byUpdate.Snapshot(), byReplace.Snapshot()
		if u.Revision != r.Revision || u.Len() != r.Len() {
			t.Fatalf("step %d: revision %d/%d, %d/%d objects", step, u.Revision, r.Revision, u.Len(), r.Len())
		}
		if lu, lr := u.List(store.KindWorkloadEntry), r.List(store.KindWorkloadEntry); !slices.Equal(lu, lr) {
			t.Fatalf("step %d: Update lists %d objects, Replace %d (or in another order)", step, len(lu), len(lr))
		}
		if !slices.IsSortedFunc(u.List(store.KindWorkloadEntry), func(a, b *store.Object) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		}) {
			t.Fatalf("step %d: list not sorted", step)
		}
		if cu, cr := subU.Take(), subR.Take(); !maps.Equal(cu.Keys, cr.Keys) {
			t.Fatalf("step %d: Update changed %d keys, Replace %d", step, len(cu.Keys), len(cr.Keys))
		}
	}
	if err := byUpdate.Update(src, []*store.Object{obj(1, 0), obj(1, 1)}, nil); err == nil {
		t.Fatal("a key set twice in one update was accepted")
	}
}

// TestSubscribersShareNoWrites checks that subscribers handed one
// publication's key set never see each other's later additions: a set
// taken by one stays as it was while the other's grows.
func TestSubscribersShareNoWrites(t *testing.T) {
	s := store.NewStore()
	a, b := s.Subscribe(), s.Subscribe()
	defer a.Close()
	defer b.Close()
	src := store.Source{Name: "registry:t", Class: store.ClassRegistry}
	if err := s.Update(src, []*store.Object{we("ns", "one", "10.0.0.1", store.Origin{})}, nil); err != nil {
		t.Fatal(err)
	}
	first := a.Take()
	if err := s.Update(src, []*store.Object{we("ns", "two", "10.0.0.2", store.Origin{})}, nil); err != nil {
		t.Fatal(err)
	}
	if len(first.Keys) != 1 {
		t.Fatalf("a's first change set grew to %v", first.Keys)
	}
	if got := b.Take(); len(got.Keys) != 2 {
		t.Fatalf("b's changes %v, want both keys", got.Keys)
	}
	if got := a.Take(); len(got.Keys) != 1 || got.Revision != 2 {
		t.Fatalf("a's second change set %+v, want the second key at revision 2", got)
	}
}
