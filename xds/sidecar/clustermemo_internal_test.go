package sidecar

import (
	"maps"
	"sync"
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/gen"
	"github.com/vmesh/vmesh/xds/gen/gentest"
)

// TestClusterMemoSharesOnlyWhatScopesSeeAlike: scope parts generated on one
// memo equal parts generated alone, cluster for cluster and assignment for
// assignment; scopes that see a service through the same DestinationRule
// from the same locality share its serialised cluster, while a namespace
// with a rule of its own for that host, or a proxy in another locality,
// gets its own — the scopes generating at the same time.
func TestClusterMemoSharesOnlyWhatScopesSeeAlike(t *testing.T) {
	objs := append(gentest.Base(),
		&store.Object{Key: store.Key{Kind: store.KindDestinationRule, Namespace: "ns-1", Name: "svc-0012-local"},
			Spec: &networking.DestinationRule{Host: modeltest.Host(12), ExportTo: []string{"."}, TrafficPolicy: &networking.TrafficPolicy{
				ConnectionPool: &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 7}},
			}}})
	s := gentest.Snapshot(t, store.NewStore(), objs)
	proxies := map[string]model.Workload{
		"ns-0":    {ID: "a", Namespace: "ns-0", Locality: "r1/z1", WorkloadName: "vm-a", IPs: []string{"10.1.0.1"}},
		"ns-2":    {ID: "b", Namespace: "ns-2", Locality: "r1/z1", WorkloadName: "vm-b", IPs: []string{"10.1.0.2"}},
		"ns-1":    {ID: "c", Namespace: "ns-1", Locality: "r1/z1", WorkloadName: "vm-c", IPs: []string{"10.1.0.3"}},
		"ns-0-r2": {ID: "d", Namespace: "ns-0", Locality: "r2/z1", WorkloadName: "vm-d", IPs: []string{"10.1.0.4"}},
	}
	for name, w := range proxies {
		proxies[name] = testWorkload(w)
	}
	// The scopes generate at once, as a fleet's first connections do: each
	// claims what no other has and waits for the rest.
	memo := newClusterMemo(s)
	parts := map[string]*outboundPart{}
	errs := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, p := range proxies {
		wg.Go(func() {
			part, err := generateOutbound(s, p, model.OutboundKey(s, p), memo)
			mu.Lock()
			defer mu.Unlock()
			parts[name], errs[name] = part, err
		})
	}
	wg.Wait()
	for _, name := range []string{"ns-0", "ns-2", "ns-1", "ns-0-r2"} {
		p := proxies[name]
		if errs[name] != nil {
			t.Fatal(errs[name])
		}
		shared := parts[name]
		alone, err := generateOutbound(s, p, model.OutboundKey(s, p), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, ty := range []string{resourcev3.ClusterType, resourcev3.EndpointType} {
			got, want := map[string]string{}, map[string]string{}
			for n, r := range shared.types[ty].All() {
				got[n] = r.Hash
			}
			for n, r := range alone.types[ty].All() {
				want[n] = r.Hash
			}
			if len(want) == 0 || !maps.Equal(got, want) {
				t.Errorf("%s %s: on the memo %d resources, alone %d, differ %v", name, gen.ShortType(ty), len(got), len(want), gentest.Differ(got, want))
			}
		}
	}
	c12 := model.ClusterName(7070, "", modeltest.Host(12))
	res := func(part, ty, name string) *gen.Resource {
		r, ok := parts[part].types[ty].Get(name)
		if !ok {
			t.Fatalf("%s: no %s %s", part, gen.ShortType(ty), name)
		}
		return r
	}
	if res("ns-0", resourcev3.ClusterType, c12) != res("ns-2", resourcev3.ClusterType, c12) {
		t.Errorf("ns-0 and ns-2 see %s through one rule from one locality but do not share it", c12)
	}
	if a, b := res("ns-0", resourcev3.ClusterType, c12), res("ns-1", resourcev3.ClusterType, c12); a == b || a.Hash == b.Hash {
		t.Errorf("ns-1's own DestinationRule for %s is not in its cluster (shared %v)", c12, a == b)
	}
	if res("ns-0", resourcev3.EndpointType, c12) == res("ns-0-r2", resourcev3.EndpointType, c12) {
		t.Errorf("a proxy in another locality shares the assignment of %s", c12)
	}
}
