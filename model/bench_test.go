package model_test

import (
	"fmt"
	"testing"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// BenchmarkBuild builds the model for 1,000 services x 10 endpoints with 100
// VirtualServices and 100 DestinationRules, as every debounced push does.
func BenchmarkBuild(b *testing.B) {
	st := store.NewStore()
	objs := modeltest.Objects(modeltest.Size{Services: 1000, EndpointsPerService: 10, Routes: 100, Namespaces: 10})
	if err := st.Replace(store.Source{Name: "bench", Class: store.ClassConfig}, objs); err != nil {
		b.Fatal(err)
	}
	fs := st.Snapshot()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s := model.Build(fs)
		if len(s.Services) != 1000 {
			b.Fatal(len(s.Services))
		}
	}
}

func TestFixtureBuilds(t *testing.T) {
	st := store.NewStore()
	objs := modeltest.Objects(modeltest.Size{Services: 20, EndpointsPerService: 4, Routes: 5, Namespaces: 2})
	if err := st.Replace(store.Source{Name: "t", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	s := model.Build(st.Snapshot())
	if len(s.Services) != 20 || len(s.VirtualServices) != 5 || len(s.DestinationRules) != 5 || len(s.Problems) != 0 {
		t.Fatalf("services %d vs %d dr %d problems %v", len(s.Services), len(s.VirtualServices), len(s.DestinationRules), s.Problems)
	}
	for _, svc := range s.Services {
		if len(svc.Endpoints) != 4 {
			t.Fatalf("%s: %d endpoints, want 4", svc.Hostname, len(svc.Endpoints))
		}
	}
}

// BenchmarkRebuildOneEntry rebuilds the model after one WorkloadEntry
// moved to another address, among services x 10 entries in one namespace
// (the shape of 10,000 and 100,000 Dubbo providers), and compares the
// snapshots as the xDS cache does: the Store's update, model.Rebuild and
// model.Compare. Its cost per change should not grow with the entries.
func BenchmarkRebuildOneEntry(b *testing.B) {
	for _, services := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("providers=%d", services*10), func(b *testing.B) {
			st := store.NewStore()
			src := store.Source{Name: "bench", Class: store.ClassRegistry}
			objs := modeltest.Objects(modeltest.Size{Services: services, EndpointsPerService: 10, Namespaces: 1})
			if err := st.Replace(src, objs); err != nil {
				b.Fatal(err)
			}
			prev := model.Build(st.Snapshot())
			var entry *store.Object
			for _, o := range objs {
				if o.Kind == store.KindWorkloadEntry {
					entry = o
					break
				}
			}
			moved := proto.Clone(entry.Spec).(*networking.WorkloadEntry)
			moved.Address = "10.255.0.1"
			sub := st.Subscribe()
			defer sub.Close()
			changed := []*store.Object{{Key: entry.Key, Labels: entry.Labels, Spec: moved}, entry}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := st.Update(src, []*store.Object{changed[i%2]}, nil); err != nil {
					b.Fatal(err)
				}
				ch := sub.Take()
				next := model.Rebuild(prev, st.Snapshot(), ch.Keys)
				if d := model.Compare(prev, next); len(d.Endpoints) != 1 {
					b.Fatalf("%d hosts' endpoints changed, want 1", len(d.Endpoints))
				}
				prev = next
			}
		})
	}
}
