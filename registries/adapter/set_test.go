package adapter_test

import (
	"fmt"
	"slices"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
)

var setMeta = adapter.Meta{Type: "zookeeper", Name: "zk", Namespace: "dubbo"}

// service generates a ServiceEntry and one WorkloadEntry per address, as an
// adapter regenerating a service does (new objects every time).
func service(name string, addrs ...string) []*store.Object {
	out := []*store.Object{setMeta.ServiceEntry(name, "/"+name, []string{name + ".dubbo"}, nil, nil)}
	for _, a := range addrs {
		out = append(out, setMeta.WorkloadEntry(adapter.ObjectName(name, a), "/"+name+"/"+a, name, &networking.WorkloadEntry{Address: a}, nil))
	}
	return out
}

func names(objs []*store.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Key.String())
	}
	slices.Sort(out)
	return out
}

func keyNames(keys []store.Key) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.String())
	}
	slices.Sort(out)
	return out
}

func TestSetHandsOverOnlyWhatChanged(t *testing.T) {
	st := store.NewStore()
	set := adapter.NewSet()
	apply := func(c adapter.Change) {
		t.Helper()
		var err error
		if c.Full {
			err = st.Replace(setMeta.Source(), c.Set)
		} else {
			err = st.Update(setMeta.Source(), c.Set, c.Remove)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		set.Put(fmt.Sprintf("svc%d", i), service(fmt.Sprintf("svc%d", i), "10.0.0.1", "10.0.0.2"))
	}
	c := set.Changes()
	if !c.Full || len(c.Set) != 300 || c.ServiceEntries != 100 || c.WorkloadEntries != 200 {
		t.Fatalf("first change: full %v, %d objects, %d/%d", c.Full, len(c.Set), c.ServiceEntries, c.WorkloadEntries)
	}
	apply(c)

	// svc7 regenerated with one address moved: only that WorkloadEntry
	// changes, although every object of svc7 is new.
	set.Put("svc7", service("svc7", "10.0.0.1", "10.0.0.3"))
	c = set.Changes()
	if c.Full || !slices.Equal(names(c.Set), []string{"WorkloadEntry/dubbo/svc7-10.0.0.3"}) ||
		!slices.Equal(keyNames(c.Remove), []string{"WorkloadEntry/dubbo/svc7-10.0.0.2"}) {
		t.Fatalf("moved address: set %v, remove %v", names(c.Set), keyNames(c.Remove))
	}
	apply(c)

	// Regenerated unchanged: nothing to hand over.
	set.Put("svc8", service("svc8", "10.0.0.1", "10.0.0.2"))
	if c = set.Changes(); !c.Empty() {
		t.Fatalf("unchanged service handed over: set %v, remove %v", names(c.Set), keyNames(c.Remove))
	}

	// A service gone: its objects are removed and its name reported.
	set.Delete("svc9")
	c = set.Changes()
	if len(c.Set) != 0 || len(c.Remove) != 3 || !slices.Equal(c.RemovedServices, []string{"svc9"}) ||
		c.ServiceEntries != 99 || c.WorkloadEntries != 198 {
		t.Fatalf("deleted service: %+v", c)
	}
	apply(c)
	if n := st.Snapshot().Len(); n != 297 {
		t.Fatalf("store holds %d objects, want 297", n)
	}
	if o := st.Snapshot().Get(store.Key{Kind: store.KindWorkloadEntry, Namespace: "dubbo", Name: "svc7-10.0.0.3"}); o == nil {
		t.Fatal("moved WorkloadEntry missing from the Store")
	}

	// Resend: the complete set again.
	set.Resend()
	if c = set.Changes(); !c.Full || len(c.Set) != 297 {
		t.Fatalf("after Resend: full %v, %d objects", c.Full, len(c.Set))
	}
}

func TestSetContestedKeyGoesToTheFirstGroup(t *testing.T) {
	set := adapter.NewSet()
	set.Changes()
	set.Put("b", service("web", "10.0.0.2"))
	set.Put("a", service("web", "10.0.0.1"))
	c := set.Changes()
	se := store.Key{Kind: store.KindServiceEntry, Namespace: "dubbo", Name: "web"}
	if got := c.Contested[se]; !slices.Equal(got, []string{"b"}) {
		t.Fatalf("contested %v, want the ServiceEntry lost by b", c.Contested)
	}
	want := []string{"ServiceEntry/dubbo/web", "WorkloadEntry/dubbo/web-10.0.0.1", "WorkloadEntry/dubbo/web-10.0.0.2"}
	if !slices.Equal(names(c.Set), want) {
		t.Fatalf("set %v, want %v", names(c.Set), want)
	}
	for _, o := range c.Set {
		if o.Key == se && o.Origin.Registry != "/web" {
			t.Fatalf("ServiceEntry from %q", o.Origin.Registry)
		}
	}
	// The winner leaves: the other group's object takes the key.
	set.Delete("a")
	c = set.Changes()
	if !slices.Equal(keyNames(c.Remove), []string{"WorkloadEntry/dubbo/web-10.0.0.1"}) || len(c.Contested) != 0 {
		t.Fatalf("after the winner left: set %v, remove %v, contested %v", names(c.Set), keyNames(c.Remove), c.Contested)
	}
	if len(c.RemovedServices) != 0 {
		t.Fatalf("ServiceEntry reported removed while b still generates it: %v", c.RemovedServices)
	}
}

func TestSameSpecKnowsEveryField(t *testing.T) {
	var got []string
	fields := (&networking.WorkloadEntry{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		got = append(got, string(fields.Get(i).Name()))
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(adapter.WorkloadEntryFields))
	if !slices.Equal(got, want) {
		t.Fatalf("WorkloadEntry has fields %v; sameSpec compares %v: teach it the new ones", got, want)
	}
	base := func() *networking.WorkloadEntry {
		return &networking.WorkloadEntry{Address: "10.0.0.1", Ports: map[string]uint32{"grpc": 7070}, Labels: map[string]string{"a": "b"},
			Network: "n", Locality: "r/z", Weight: 3, ServiceAccount: "sa"}
	}
	if !adapter.SameSpec(base(), base()) {
		t.Fatal("equal WorkloadEntries compare different")
	}
	for name, edit := range map[string]func(*networking.WorkloadEntry){
		"address":         func(w *networking.WorkloadEntry) { w.Address = "10.0.0.2" },
		"ports":           func(w *networking.WorkloadEntry) { w.Ports["grpc"] = 7071 },
		"labels":          func(w *networking.WorkloadEntry) { w.Labels["a"] = "c" },
		"network":         func(w *networking.WorkloadEntry) { w.Network = "m" },
		"locality":        func(w *networking.WorkloadEntry) { w.Locality = "r" },
		"weight":          func(w *networking.WorkloadEntry) { w.Weight = 4 },
		"service_account": func(w *networking.WorkloadEntry) { w.ServiceAccount = "other" },
	} {
		w := base()
		edit(w)
		if adapter.SameSpec(base(), w) {
			t.Errorf("a change of %s is not seen", name)
		}
	}
	if adapter.SameSpec(base(), &networking.ServiceEntry{}) {
		t.Error("a WorkloadEntry equals a ServiceEntry")
	}
}

// TestFirstChangesAsLaterChanges checks the first complete set (computed
// without comparing against anything sent) against the same groups handed
// over by a later Changes: the same winners, contests and counts, with
// keys two groups generate and a group generating one key twice.
func TestFirstChangesAsLaterChanges(t *testing.T) {
	groups := map[string][]*store.Object{}
	for i := range 40 {
		name := fmt.Sprintf("svc%d", i%25) // groups 25..39 contest 0..14's keys
		objs := service(name, fmt.Sprintf("10.0.%d.1", i), "10.0.0.9")
		if i%7 == 0 {
			objs = append(objs, service(name, "10.0.0.5")...) // its own ServiceEntry again
		}
		groups[fmt.Sprintf("g%02d", i)] = objs
	}
	put := func(s *adapter.Set) {
		for g, objs := range groups {
			s.Put(g, objs)
		}
	}
	first := adapter.NewSet()
	put(first)
	a := first.Changes()
	later := adapter.NewSet()
	later.Changes() // nothing: the next Changes is not the first set
	put(later)
	b := later.Changes()
	if !a.Full || b.Full {
		t.Fatalf("full: first %v, later %v", a.Full, b.Full)
	}
	origins := func(objs []*store.Object) []string {
		var out []string
		for _, o := range objs {
			out = append(out, fmt.Sprintf("%s@%p", o.Key, o)) // the very object: which copy won
		}
		slices.Sort(out)
		return out
	}
	if !slices.Equal(origins(a.Set), origins(b.Set)) {
		t.Fatalf("first set %v\nlater %v", origins(a.Set), origins(b.Set))
	}
	if len(a.Contested) == 0 || len(a.Contested) != len(b.Contested) {
		t.Fatalf("contested: first %v, later %v", a.Contested, b.Contested)
	}
	for k, losers := range b.Contested {
		x, y := slices.Sorted(slices.Values(a.Contested[k])), slices.Sorted(slices.Values(losers))
		if !slices.Equal(x, y) {
			t.Fatalf("%s lost by %v in the first set, by %v later", k, x, y)
		}
	}
	if a.ServiceEntries != b.ServiceEntries || a.WorkloadEntries != b.WorkloadEntries || first.Len() != later.Len() {
		t.Fatalf("counts: first %d/%d (%d), later %d/%d (%d)", a.ServiceEntries, a.WorkloadEntries, first.Len(),
			b.ServiceEntries, b.WorkloadEntries, later.Len())
	}
	// Both Sets go on alike: a group gone.
	first.Delete("g03")
	later.Delete("g03")
	if x, y := first.Changes(), later.Changes(); !slices.Equal(keyNames(x.Remove), keyNames(y.Remove)) || !slices.Equal(origins(x.Set), origins(y.Set)) {
		t.Fatalf("after a delete: %v/%v vs %v/%v", origins(x.Set), keyNames(x.Remove), origins(y.Set), keyNames(y.Remove))
	}
}
