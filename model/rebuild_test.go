package model

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// editObject returns a change that replaces one object with an edited
// copy (f gets a copy of its spec too); f setting the spec to nil removes
// the object.
func editObject(kind store.Kind, ns, name string, f func(*store.Object)) func([]*store.Object) []*store.Object {
	return func(objs []*store.Object) []*store.Object {
		var out []*store.Object
		for _, o := range objs {
			if o.Kind == kind && o.Namespace == ns && o.Name == name {
				c := *o
				c.Spec = proto.Clone(o.Spec)
				f(&c)
				if c.Spec == nil {
					continue
				}
				out = append(out, &c)
				continue
			}
			out = append(out, o)
		}
		return out
	}
}

func rebuildBase() []*store.Object {
	objs := modeltest.Objects(modeltest.Size{Services: 12, EndpointsPerService: 3, Routes: 3, Namespaces: 2})
	return append(objs,
		// Two hosts from one entry, selecting svc-0000's workloads.
		&store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-0", Name: "multi"},
			Spec: &networking.ServiceEntry{Hosts: []string{"m1.internal", "m2.internal"}, Resolution: networking.ServiceEntry_STATIC,
				Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}},
				WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "svc-0000"}}}},
		// svc-0002's host defined again in ns-1, selecting svc-0004's workloads.
		&store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-1", Name: "dup"},
			Spec: &networking.ServiceEntry{Hosts: []string{modeltest.Host(2)}, Resolution: networking.ServiceEntry_STATIC,
				Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}},
				WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "svc-0003"}}}},
	)
}

// TestRebuildMatchesBuild checks that an incremental rebuild after
// WorkloadEntry changes equals a full build, shares what did not change,
// and leaves the previous snapshot as it was.
func TestRebuildMatchesBuild(t *testing.T) {
	we := func(ns, name string, f func(o *store.Object, w *networking.WorkloadEntry)) func([]*store.Object) []*store.Object {
		return editObject(store.KindWorkloadEntry, ns, name, func(o *store.Object) {
			f(o, o.Spec.(*networking.WorkloadEntry))
		})
	}
	no := false
	cases := []struct {
		name   string
		change func([]*store.Object) []*store.Object
		keys   []store.Key
		// touched are the services ("namespace/host") that must be new
		// values.
		touched []string
	}{
		{"address moved", we("ns-0", "svc-0000-1", func(_ *store.Object, w *networking.WorkloadEntry) { w.Address = "10.99.0.1" }),
			[]store.Key{{Kind: store.KindWorkloadEntry, Namespace: "ns-0", Name: "svc-0000-1"}}, []string{"ns-0/" + modeltest.Host(0), "ns-0/m1.internal", "ns-0/m2.internal"}},
		{"relabelled to another service", we("ns-1", "svc-0001-0", func(_ *store.Object, w *networking.WorkloadEntry) { w.Labels["app"] = "svc-0003" }),
			[]store.Key{{Kind: store.KindWorkloadEntry, Namespace: "ns-1", Name: "svc-0001-0"}}, []string{"ns-1/" + modeltest.Host(1), "ns-1/" + modeltest.Host(3), "ns-1/" + modeltest.Host(2)}},
		{"removed", we("ns-1", "svc-0003-2", func(o *store.Object, _ *networking.WorkloadEntry) { o.Spec = nil }),
			[]store.Key{{Kind: store.KindWorkloadEntry, Namespace: "ns-1", Name: "svc-0003-2"}}, []string{"ns-1/" + modeltest.Host(3), "ns-1/" + modeltest.Host(2)}},
		{"added", func(objs []*store.Object) []*store.Object {
			return append(objs, modeltest.WorkloadEntry("ns-0", "svc-0004", 7, "10.50.0.7"))
		}, []store.Key{{Kind: store.KindWorkloadEntry, Namespace: "ns-0", Name: "svc-0004-7"}}, []string{"ns-0/" + modeltest.Host(4)}},
		{"turned unhealthy", we("ns-0", "svc-0006-0", func(o *store.Object, _ *networking.WorkloadEntry) {
			o.Annotations = map[string]string{meshlabels.HealthChecksAnnotation: "true"}
			o.Healthy = &no
		}), []store.Key{{Kind: store.KindWorkloadEntry, Namespace: "ns-0", Name: "svc-0006-0"}}, []string{"ns-0/" + modeltest.Host(6)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := store.NewStore()
			src := store.Source{Name: "t", Class: store.ClassConfig}
			if err := st.Replace(src, rebuildBase()); err != nil {
				t.Fatal(err)
			}
			prev := Build(st.Snapshot())
			before := Build(st.Snapshot())
			if err := st.Replace(src, tc.change(rebuildBase())); err != nil {
				t.Fatal(err)
			}
			fs := st.Snapshot()
			keys := map[store.Key]struct{}{}
			for _, k := range tc.keys {
				keys[k] = struct{}{}
			}
			got := Rebuild(prev, fs, keys)
			want := Build(fs)
			if !sameSnapshot(got, want) {
				t.Fatalf("Rebuild differs from Build:\n got %s\nwant %s", dump(got), dump(want))
			}
			if !reflect.DeepEqual(prev, before) {
				t.Fatal("Rebuild modified the previous snapshot")
			}
			touched, hosts := map[string]bool{}, map[string]bool{}
			for _, h := range tc.touched {
				touched[h] = true
				hosts[h[strings.IndexByte(h, '/')+1:]] = true
			}
			for i, svc := range got.Services {
				id := svc.Namespace + "/" + svc.Hostname
				if shared := svc == prev.Services[i]; shared == touched[id] {
					t.Errorf("%s: shared with previous = %v, want %v", id, shared, !touched[id])
				}
			}
			d := Compare(prev, got)
			if !d.EndpointsOnly() || !maps.Equal(d.Endpoints, hosts) {
				t.Errorf("Compare: endpoints-only %v, hosts %v, want %v", d.EndpointsOnly(), d.Endpoints, tc.touched)
			}
		})
	}
}

// TestRebuildOtherKindsBuildInFull checks that a change to anything but
// WorkloadEntries gives the full build.
func TestRebuildOtherKindsBuildInFull(t *testing.T) {
	st := store.NewStore()
	src := store.Source{Name: "t", Class: store.ClassConfig}
	objs := rebuildBase()
	if err := st.Replace(src, objs); err != nil {
		t.Fatal(err)
	}
	prev := Build(st.Snapshot())
	objs = objs[:len(objs)-1] // drop "dup"
	if err := st.Replace(src, objs); err != nil {
		t.Fatal(err)
	}
	got := Rebuild(prev, st.Snapshot(), map[store.Key]struct{}{{Kind: store.KindServiceEntry, Namespace: "ns-1", Name: "dup"}: {}})
	if want := Build(st.Snapshot()); !sameSnapshot(got, want) {
		t.Fatalf("got %s\nwant %s", dump(got), dump(want))
	}
}

// sameSnapshot reports whether a and b hold the same model; what Rebuild
// records of its own work (delta) is left out.
func sameSnapshot(a, b *Snapshot) bool {
	x, y := *a, *b
	x.delta, y.delta = nil, nil
	return reflect.DeepEqual(&x, &y)
}

// TestRebuildSequenceMatchesBuild runs a seeded sequence of WorkloadEntry
// changes (addresses, labels in spec and metadata, health, additions and
// removals, several at once), each rebuilt from the previous rebuild:
// every step equals a full build, and Compare of the step (which uses what
// Rebuild recorded) equals Compare without it.
func TestRebuildSequenceMatchesBuild(t *testing.T) {
	base := append(rebuildBase(),
		// Selects every entry of ns-0.
		&store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-0", Name: "everyone"},
			Spec: &networking.ServiceEntry{Hosts: []string{"all.internal"}, Resolution: networking.ServiceEntry_STATIC,
				Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}},
				WorkloadSelector: &networking.WorkloadSelector{}}},
		// Selects on two labels, one only ever set in metadata.
		&store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-1", Name: "canary"},
			Spec: &networking.ServiceEntry{Hosts: []string{"canary.internal"}, Resolution: networking.ServiceEntry_STATIC,
				Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}},
				WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"track": "canary", "version": "v2"}}}},
		// NONE resolution: never endpoints.
		&store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-0", Name: "none"},
			Spec: &networking.ServiceEntry{Hosts: []string{"none.internal"}, Resolution: networking.ServiceEntry_NONE,
				Ports:            []*networking.ServicePort{{Name: "tcp", Number: 9000, Protocol: "TCP"}},
				WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "svc-0002"}}}},
		// Inline endpoints beside selected ones.
		&store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-1", Name: "mixed"},
			Spec: &networking.ServiceEntry{Hosts: []string{"mixed.internal"}, Resolution: networking.ServiceEntry_STATIC,
				Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}},
				Endpoints:        []*networking.WorkloadEntry{{Address: "10.7.0.1"}, {Address: "10.200.0.0"}},
				WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "svc-0005"}}}},
	)
	st := store.NewStore()
	src := store.Source{Name: "t", Class: store.ClassConfig}
	if err := st.Replace(src, base); err != nil {
		t.Fatal(err)
	}
	sub := st.Subscribe()
	defer sub.Close()
	prev := Build(st.Snapshot())
	rnd := rand.New(rand.NewPCG(20, 1))
	yes, no := true, false
	entries := func() []*store.Object { return st.Snapshot().List(store.KindWorkloadEntry) }
	for step := range 200 {
		var upserts []*store.Object
		var removes []store.Key
		list := entries()
		for range 1 + rnd.IntN(3) {
			if len(list) == 0 || rnd.IntN(8) == 0 {
				ns := fmt.Sprintf("ns-%d", rnd.IntN(2))
				upserts = append(upserts, modeltest.WorkloadEntry(ns, fmt.Sprintf("svc-%04d", rnd.IntN(12)), 100+step, fmt.Sprintf("10.%d.%d.%d", 100+rnd.IntN(3), rnd.IntN(4), rnd.IntN(4))))
				continue
			}
			o := list[rnd.IntN(len(list))]
			if rnd.IntN(10) == 0 {
				removes = append(removes, o.Key)
				continue
			}
			c := *o
			w := proto.Clone(o.Spec).(*networking.WorkloadEntry)
			c.Spec = w
			c.Labels = maps.Clone(o.Labels)
			if c.Labels == nil {
				c.Labels = map[string]string{}
			}
			switch rnd.IntN(6) {
			case 0:
				w.Address = fmt.Sprintf("10.%d.%d.%d", 100+rnd.IntN(3), rnd.IntN(4), rnd.IntN(4))
			case 1:
				w.Labels["app"] = fmt.Sprintf("svc-%04d", rnd.IntN(12))
			case 2:
				c.Labels["track"] = []string{"canary", "stable"}[rnd.IntN(2)]
			case 3:
				// A metadata label hidden by, or freed from, the spec's.
				if _, ok := w.Labels["version"]; ok {
					delete(w.Labels, "version")
					c.Labels["version"] = "v2"
				} else {
					w.Labels["version"] = "v1"
				}
			case 4:
				c.Annotations = map[string]string{meshlabels.HealthChecksAnnotation: "true"}
				c.Healthy = []*bool{&yes, &no, nil}[rnd.IntN(3)]
			case 5:
				w.Address = ""
			}
			upserts = append(upserts, &c)
		}
		// One change per key in an update.
		byKey := map[store.Key]*store.Object{}
		for _, o := range upserts {
			byKey[o.Key] = o
		}
		upserts = upserts[:0]
		for _, o := range byKey {
			if !slices.Contains(removes, o.Key) {
				upserts = append(upserts, o)
			}
		}
		if err := st.Update(src, upserts, removes); err != nil {
			t.Fatal(err)
		}
		ch := sub.Take()
		fs := st.Snapshot()
		got := Rebuild(prev, fs, ch.Keys)
		if want := Build(fs); !sameSnapshot(got, want) {
			t.Fatalf("step %d (%d changed): Rebuild differs from Build:\n got %s\nwant %s", step, len(ch.Keys), dump(got), dump(want))
		}
		if len(ch.Keys) > 0 && got.delta == nil {
			t.Fatalf("step %d: an endpoints-only rebuild recorded no delta", step)
		}
		full := *got
		full.delta = nil
		if d, want := Compare(prev, got), Compare(prev, &full); !reflect.DeepEqual(d, want) {
			t.Fatalf("step %d: Compare with the rebuild's delta %+v, without %+v", step, d, want)
		}
		prev = got
	}
}

func dump(s *Snapshot) string {
	out := ""
	for _, svc := range s.Services {
		out += "\n  " + svc.Namespace + "/" + svc.Hostname + ":"
		for _, e := range svc.Endpoints {
			out += " " + e.Address
		}
	}
	return out
}

// TestRebuildRoutingMatchesBuild checks the routing-only rebuild: after
// VirtualService and DestinationRule changes it equals a full build, keeps
// the services (and their endpoints) of the previous snapshot, and leaves
// that snapshot as it was.
func TestRebuildRoutingMatchesBuild(t *testing.T) {
	var vs, dr *store.Object
	for _, o := range rebuildBase() {
		switch {
		case vs == nil && o.Kind == store.KindVirtualService:
			vs = o
		case dr == nil && o.Kind == store.KindDestinationRule:
			dr = o
		}
	}
	cases := []struct {
		name   string
		change func([]*store.Object) []*store.Object
		keys   []store.Key
	}{
		{"weights changed", editObject(vs.Kind, vs.Namespace, vs.Name, func(o *store.Object) {
			for _, r := range o.Spec.(*networking.VirtualService).GetHttp()[0].GetRoute() {
				r.Weight = 50
			}
		}), []store.Key{vs.Key}},
		{"route removed", editObject(vs.Kind, vs.Namespace, vs.Name, func(o *store.Object) { o.Spec = nil }), []store.Key{vs.Key}},
		{"wildcard route added, subset dropped", func(objs []*store.Object) []*store.Object {
			objs = editObject(dr.Kind, dr.Namespace, dr.Name, func(o *store.Object) {
				d := o.Spec.(*networking.DestinationRule)
				d.Subsets = d.Subsets[:1]
			})(objs)
			return append(objs, &store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-0", Name: "wild"},
				Spec: &networking.VirtualService{Hosts: []string{"*.internal"}, Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "m1.internal"}}}}}}})
		}, []store.Key{dr.Key, {Kind: store.KindVirtualService, Namespace: "ns-0", Name: "wild"}}},
		{"a problem appears", func(objs []*store.Object) []*store.Object {
			return append(objs, &store.Object{Key: store.Key{Kind: store.KindDestinationRule, Namespace: "ns-1", Name: "odd"}, Spec: &networking.Sidecar{}})
		}, []store.Key{{Kind: store.KindDestinationRule, Namespace: "ns-1", Name: "odd"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := store.NewStore()
			src := store.Source{Name: "t", Class: store.ClassConfig}
			if err := st.Replace(src, rebuildBase()); err != nil {
				t.Fatal(err)
			}
			prev, before := Build(st.Snapshot()), Build(st.Snapshot())
			if err := st.Replace(src, tc.change(rebuildBase())); err != nil {
				t.Fatal(err)
			}
			keys := map[store.Key]struct{}{}
			for _, k := range tc.keys {
				keys[k] = struct{}{}
			}
			got, want := Rebuild(prev, st.Snapshot(), keys), Build(st.Snapshot())
			if !sameSnapshot(got, want) {
				t.Fatalf("Rebuild differs from Build:\n got %s\nwant %s", dump(got), dump(want))
			}
			if !reflect.DeepEqual(prev, before) {
				t.Fatal("Rebuild modified the previous snapshot")
			}
			for i, svc := range got.Services {
				if svc != prev.Services[i] {
					t.Fatalf("service %s was rebuilt for a routing change", svc.Hostname)
				}
			}
			if d := Compare(prev, got); d.Global || len(d.Endpoints) != 0 {
				t.Errorf("Compare after a routing change: %+v", d)
			}
		})
	}
}
