package store_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/vmesh/vmesh/store"
)

// TestListAfterManyUpdates checks the lazily sorted lists: after a seeded
// sequence of updates (additions, removals, edits, one or several keys),
// every snapshot's List, read in any order, late or never, from several
// goroutines at once, holds exactly that snapshot's objects, sorted.
func TestListAfterManyUpdates(t *testing.T) {
	s := store.NewStore()
	src := store.Source{Name: "t", Class: store.ClassRegistry}
	rnd := rand.New(rand.NewPCG(7, 9))
	live := map[string]*store.Object{}
	name := func(i int) string { return fmt.Sprintf("e-%04d", i) }
	var initial []*store.Object
	for i := range 400 {
		o := we(fmt.Sprintf("ns-%d", i%3), name(i), "10.0.0.1", store.Origin{})
		initial = append(initial, o)
		live[o.Namespace+"/"+o.Name] = o
	}
	if err := s.Replace(src, initial); err != nil {
		t.Fatal(err)
	}
	type step struct {
		snap *store.Snapshot
		want []string
	}
	names := func() []string {
		var out []string
		for k := range live {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	steps := []step{{s.Snapshot(), names()}}
	for i := range 600 {
		var up []*store.Object
		var rm []store.Key
		seen := map[string]bool{}
		for range 1 + rnd.IntN(4) {
			n := rnd.IntN(500)
			ns := fmt.Sprintf("ns-%d", n%3)
			k := ns + "/" + name(n)
			if seen[k] {
				continue
			}
			seen[k] = true
			if _, ok := live[k]; ok && rnd.IntN(3) == 0 {
				rm = append(rm, store.Key{Kind: store.KindWorkloadEntry, Namespace: ns, Name: name(n)})
				delete(live, k)
				continue
			}
			o := we(ns, name(n), fmt.Sprintf("10.1.%d.%d", i/250, i%250), store.Origin{})
			up = append(up, o)
			live[k] = o
		}
		if err := s.Update(src, up, rm); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, step{s.Snapshot(), names()})
		// Some lists are read as they are made, most only later.
		if rnd.IntN(50) == 0 {
			steps[len(steps)-1].snap.List(store.KindWorkloadEntry)
		}
	}
	check := func(st step) error {
		var got []string
		for _, o := range st.snap.List(store.KindWorkloadEntry) {
			if o2 := st.snap.Get(o.Key); o2 != o {
				return fmt.Errorf("revision %d: listed %s is not the snapshot's object", st.snap.Revision, o.Key)
			}
			got = append(got, o.Namespace+"/"+o.Name)
		}
		if !slices.Equal(got, st.want) {
			return fmt.Errorf("revision %d: list of %d, want %d:\n got %v\nwant %v", st.snap.Revision, len(got), len(st.want), got, st.want)
		}
		return nil
	}
	// Newest first, then the rest from four goroutines at once.
	if err := check(steps[len(steps)-1]); err != nil {
		t.Fatal(err)
	}
	rnd.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
	var wg sync.WaitGroup
	errs := make(chan error, len(steps))
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(steps); i += 4 {
				if err := check(steps[i]); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
