package gen_test

import (
	"maps"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
)

// clusters returns a generation at s holding clusters named names, each
// with the load balancing policy its name has in policies.
func clusters(t *testing.T, s *model.Snapshot, w model.Workload, key string, policies map[string]int32) *gen.Generation {
	t.Helper()
	e := cowmap.New[string, *gen.Resource]().Edit()
	for n, lb := range policies {
		r, err := gen.NewResource(n, &clusterv3.Cluster{Name: n, LbPolicy: clusterv3.Cluster_LbPolicy(lb)})
		if err != nil {
			t.Fatal(err)
		}
		e.Set(n, r)
	}
	types := map[string]*gen.ResourceMap{}
	for _, ty := range gen.TypeURLs() {
		types[ty] = gen.EmptyMap()
	}
	types[resourcev3.ClusterType] = e.Map()
	return gen.New(s, w, key, types)
}

// TestRegeneratingSendsOnlyWhatChanged: a kind without an incremental
// update (gen.Regenerating) generates a live group again at every push,
// under the push's version; the step reports no diff, and comparing the
// generations (what the server then does) finds exactly the resources
// that changed, came or went.
func TestRegeneratingSendsOnlyWhatChanged(t *testing.T) {
	s0, s1 := &model.Snapshot{Revision: 1}, &model.Snapshot{Revision: 2}
	w := model.Workload{ID: "r", Kind: "router"}
	calls := 0
	kc := gen.Regenerating(func(s *model.Snapshot, w model.Workload, key string) (*gen.Generation, error) {
		calls++
		if s == s0 {
			return clusters(t, s, w, key, map[string]int32{"a": 0, "b": 0, "c": 0}), nil
		}
		return clusters(t, s, w, key, map[string]int32{"a": 0, "b": 1, "d": 0}), nil
	})
	g0, err := kc.Build(s0, w, "k")
	if err != nil {
		t.Fatal(err)
	}
	g1, d, err := kc.Push(s1, &model.Diff{}, []*gen.Generation{g0})(g0, "k")
	if err != nil {
		t.Fatal(err)
	}
	if d != nil || calls != 2 || g1.Snap != s1 || g1.Version != gen.Version(s1) || g1.Key != "k" || g1.Workload.ID != "r" {
		t.Fatalf("step: diff %v, %d generations, snapshot %p (want %p), version %s, key %s", d, calls, g1.Snap, s1, g1.Version, g1.Key)
	}
	ch := gen.Compare(g0, g1).Changed
	if want := map[string]bool{"b": true, "c": true, "d": true}; !maps.Equal(ch[resourcev3.ClusterType], want) {
		t.Errorf("changed clusters %v, want %v", ch[resourcev3.ClusterType], want)
	}
	for _, ty := range gen.TypeURLs() {
		if ty != resourcev3.ClusterType && len(ch[ty]) != 0 {
			t.Errorf("%s: changed %v, want none", gen.ShortType(ty), ch[ty])
		}
	}
}

// TestOnDemandIsBounded: what the server makes on demand for a generation
// is made once per name and at most max of it.
func TestOnDemandIsBounded(t *testing.T) {
	g := gen.New(&model.Snapshot{}, model.Workload{}, "k", map[string]*gen.ResourceMap{})
	made := 0
	mk := func(n string) func() *gen.Resource {
		return func() *gen.Resource {
			made++
			r, err := gen.NewResource(n, &clusterv3.Cluster{Name: n})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	a := g.OnDemand(resourcev3.ClusterType, "a", 2, mk("a"))
	if a == nil || g.OnDemand(resourcev3.ClusterType, "a", 2, mk("a")) != a || made != 1 {
		t.Fatalf("a made %d times", made)
	}
	if g.OnDemand(resourcev3.ClusterType, "b", 2, mk("b")) == nil || g.OnDemand(resourcev3.ClusterType, "c", 2, mk("c")) != nil || made != 2 {
		t.Fatalf("past the bound: made %d, want 2", made)
	}
}
