package grpc

import (
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/gen"
)

// Proxyless groups generated at one snapshot share a cluster's assignment
// when they see it alike, and not when they do not: a subset of the same
// name selects other endpoints in a namespace whose DestinationRule says
// so. Each group's assignments equal those it generates alone.
func TestGroupsShareAssignments(t *testing.T) {
	st := store.NewStore()
	objs := []*store.Object{
		{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "shop", Name: "cart"}, Spec: &networking.ServiceEntry{
			Hosts: []string{"cart.shop"}, Location: networking.ServiceEntry_MESH_INTERNAL, Resolution: networking.ServiceEntry_STATIC,
			Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "cart"}},
		}},
		{Key: store.Key{Kind: store.KindWorkloadEntry, Namespace: "shop", Name: "v1"}, Spec: &networking.WorkloadEntry{
			Address: "10.0.0.1", Labels: map[string]string{"app": "cart", "version": "v1"}}},
		{Key: store.Key{Kind: store.KindWorkloadEntry, Namespace: "shop", Name: "v2"}, Spec: &networking.WorkloadEntry{
			Address: "10.0.0.2", Labels: map[string]string{"app": "cart", "version": "v2"}}},
	}
	for ns, version := range map[string]string{"a": "v1", "b": "v2"} {
		objs = append(objs, &store.Object{Key: store.Key{Kind: store.KindDestinationRule, Namespace: ns, Name: "cart"}, Spec: &networking.DestinationRule{
			Host: "cart.shop", ExportTo: []string{"."},
			Subsets: []*networking.Subset{{Name: "pinned", Labels: map[string]string{"version": version}}},
		}})
	}
	if err := st.Replace(store.Source{Name: "t", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	s := model.Build(st.Snapshot())
	workload := func(ns string) model.Workload {
		return model.Workload{ID: "c." + ns, Kind: model.KindGRPC, Reads: Kind{}.Reads(), Namespace: ns}
	}
	c := &cache{}
	ga, err := c.Build(s, workload("a"), "a")
	if err != nil {
		t.Fatal(err)
	}
	gb, err := c.Build(s, workload("b"), "b")
	if err != nil {
		t.Fatal(err)
	}

	const whole, pinned = "outbound|7070||cart.shop", "outbound|7070|pinned|cart.shop"
	if ra, rb := ga.Get(resourcev3.EndpointType, whole), gb.Get(resourcev3.EndpointType, whole); ra == nil || ra != rb {
		t.Errorf("%s: groups a and b seeing it alike do not share its assignment (%p, %p)", whole, ra, rb)
	}
	addresses := func(g *gen.Generation, name string) []string {
		t.Helper()
		r := g.Get(resourcev3.EndpointType, name)
		if r == nil {
			t.Fatalf("group %s: no assignment %s", g.Key, name)
		}
		m, err := r.Message()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range m.(*endpointv3.ClusterLoadAssignment).GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		return out
	}
	if got := addresses(ga, pinned); len(got) != 1 || got[0] != "10.0.0.1" {
		t.Errorf("group a's %s = %v, want its DestinationRule's v1 endpoint 10.0.0.1", pinned, got)
	}
	if got := addresses(gb, pinned); len(got) != 1 || got[0] != "10.0.0.2" {
		t.Errorf("group b's %s = %v, want its DestinationRule's v2 endpoint 10.0.0.2", pinned, got)
	}
	for _, g := range []*gen.Generation{ga, gb} {
		alone, err := generate(s, g.Workload, g.Key)
		if err != nil {
			t.Fatal(err)
		}
		for name, r := range alone.Types[resourcev3.EndpointType].All() {
			if got := g.Get(resourcev3.EndpointType, name); got == nil || got.Hash != r.Hash {
				t.Errorf("group %s: %s differs from the group generated alone", g.Key, name)
			}
		}
		if g.Count(resourcev3.EndpointType) != alone.Count(resourcev3.EndpointType) {
			t.Errorf("group %s: %d assignments, alone %d", g.Key, g.Count(resourcev3.EndpointType), alone.Count(resourcev3.EndpointType))
		}
	}
}
