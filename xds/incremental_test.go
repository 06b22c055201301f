package xds

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/gen"
	"github.com/vmesh/vmesh/xds/gen/gentest"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// TestIncrementalMatchesFull is the safety net of xds/grpc's update: for
// each kind of change, bringing a proxyless group's generation forward
// incrementally yields exactly the resources (by serialised hash) of a
// full generation, reports exactly the names that differ, and reuses the
// previous generation's serialised resources for what it did not touch.
func TestIncrementalMatchesFull(t *testing.T) {
	base := gentest.Base()
	cases := incrementalCases(base)
	proxies := []*Proxy{
		{ID: "a", Kind: KindGRPC, Namespace: "ns-0"},
		{ID: "b", Kind: KindGRPC, Namespace: "ns-1", Labels: map[string]string{"app": "x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := store.NewStore()
			s0 := gentest.Snapshot(t, st, base)
			s1 := gentest.Snapshot(t, st, tc.objs)
			d := model.Compare(s0, s1)
			s2 := gentest.Snapshot(t, st, base)
			if d.Global {
				t.Fatalf("diff is global: %+v", d)
			}
			for _, p := range proxies {
				key := GroupKey(s0, p)
				g0, err := generate(s0, p, key)
				if err != nil {
					t.Fatal(err)
				}
				inc, gd := kindStep(t, p, g0, s1, d)
				checkIncremental(t, p, g0, inc, gd, s1, key, tc.wantChanged, p.ID == "a")
				// And back: a second update, from an updated generation
				// (its host index carried forward), restores the first.
				back, _ := kindStep(t, p, inc, s2, model.Compare(s1, s2))
				checkSame(t, p, back, g0)
			}
		})
	}
}

// TestSidecarIncrementalMatchesFull is TestIncrementalMatchesFull for Envoy
// sidecar groups: their scope's part brought forward (xds/sidecar's
// updateOutbound) and their own part kept or made again (updateSidecar)
// yield exactly a full
// generation's resources and report exactly the names that differ. The
// sidecars own endpoints the changes move (their inbound side changes
// too), one has a locality.
func TestSidecarIncrementalMatchesFull(t *testing.T) {
	// A TLS ServiceEntry with a VIP routed by SNI (tls routes), for the
	// changes to its VirtualService below.
	edge := &store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-0", Name: "edge"},
		Spec: &networking.ServiceEntry{Hosts: []string{"a.edge.example", "b.edge.example"}, Addresses: []string{"192.0.2.50"}, Resolution: networking.ServiceEntry_DNS,
			Location: networking.ServiceEntry_MESH_EXTERNAL, Ports: []*networking.ServicePort{{Name: "tls", Number: 443, Protocol: "TLS"}}}}
	sni := func(dest string) *store.Object {
		return &store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-0", Name: "edge"},
			Spec: &networking.VirtualService{Hosts: []string{"a.edge.example"}, Tls: []*networking.TLSRoute{{
				Match: []*networking.TLSMatchAttributes{{Port: 443, SniHosts: []string{"a.edge.example", "b.edge.example"}}},
				Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: dest}}},
			}}}}
	}
	// A TCP service with a VIP routed by a tcp route, and a second one.
	db := func(name, addr string) *store.Object {
		return &store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-0", Name: name},
			Spec: &networking.ServiceEntry{Hosts: []string{name + ".db.example"}, Addresses: []string{addr}, Resolution: networking.ServiceEntry_DNS,
				Location: networking.ServiceEntry_MESH_EXTERNAL, Ports: []*networking.ServicePort{{Name: "pg", Number: 5432, Protocol: "TCP"}}}}
	}
	tcp := func(dest string) *store.Object {
		return &store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-0", Name: "db"},
			Spec: &networking.VirtualService{Hosts: []string{"a.db.example"}, Tcp: []*networking.TCPRoute{{
				Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: dest}}},
			}}}}
	}
	base := append(gentest.Base(), edge, sni("a.edge.example"), db("a", "192.0.2.60"), db("b", "192.0.2.61"), tcp("a.db.example"))
	cases := append(incrementalCases(base),
		incrementalCase{"tls route to another host", gentest.Edit(base, store.KindVirtualService, "ns-0", "edge", func(*store.Object) *store.Object {
			return sni("b.edge.example")
		}), []string{"192.0.2.50_443"}},
		incrementalCase{"VirtualService gains a host no service has", gentest.Edit(base, store.KindVirtualService, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
			v := gentest.Clone(o.Spec.(*networking.VirtualService))
			v.Hosts = append(v.Hosts, "alias.example.org")
			o.Spec = v
			return o
		}), []string{"7070"}},
		incrementalCase{"VirtualService with a host no service has loses its service", gentest.Edit(gentest.Edit(base, store.KindVirtualService, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
			v := gentest.Clone(o.Spec.(*networking.VirtualService))
			v.Hosts = append(v.Hosts, "alias.example.org")
			o.Spec = v
			return o
		}), store.KindServiceEntry, "ns-0", "svc-0000", func(*store.Object) *store.Object { return nil }), []string{"7070"}},
		incrementalCase{"tcp route to another host", gentest.Edit(base, store.KindVirtualService, "ns-0", "db", func(*store.Object) *store.Object {
			return tcp("b.db.example")
		}), []string{"192.0.2.60_5432"}},
		incrementalCase{"tls route removed", gentest.Edit(base, store.KindVirtualService, "ns-0", "edge", func(*store.Object) *store.Object { return nil }),
			[]string{"192.0.2.50_443"}},
		incrementalCase{"VirtualService mirror to another host", gentest.Edit(base, store.KindVirtualService, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
			v := gentest.Clone(o.Spec.(*networking.VirtualService))
			v.Http[0].Mirror = &networking.Destination{Host: modeltest.Host(14)}
			o.Spec = v
			return o
		}), []string{"7070"}},
		incrementalCase{"mirrored host removed", gentest.Edit(gentest.Edit(base, store.KindVirtualService, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
			v := gentest.Clone(o.Spec.(*networking.VirtualService))
			v.Http[0].Mirror = &networking.Destination{Host: modeltest.Host(14)}
			o.Spec = v
			return o
		}), store.KindServiceEntry, "ns-2", "svc-0014", func(*store.Object) *store.Object { return nil }), []string{"7070"}},
	)
	proxies := []*Proxy{
		{ID: "envoy-a", Kind: KindSidecar, Namespace: "ns-0", WorkloadName: "svc-0000-1", IPs: []string{"10.1.2.3"}},
		{ID: "envoy-b", Kind: KindSidecar, Namespace: "ns-1", Labels: map[string]string{"app": "x"}, IPs: []string{"10.9.9.9"}, Locality: "r1/z1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := store.NewStore()
			s0 := gentest.Snapshot(t, st, base)
			s1 := gentest.Snapshot(t, st, tc.objs)
			d := model.Compare(s0, s1)
			s2 := gentest.Snapshot(t, st, base)
			if d.Global {
				t.Fatalf("diff is global: %+v", d)
			}
			for _, p := range proxies {
				step := func(g *gen.Generation, s *model.Snapshot, d *model.Diff) (*gen.Generation, *gen.Diff) {
					t.Helper()
					return kindStep(t, p, g, s, d)
				}
				key := GroupKey(s0, p)
				g0, err := generate(s0, p, key)
				if err != nil {
					t.Fatal(err)
				}
				// Through a push that changed nothing first (the scope part
				// rebased), as a fleet's parts usually are.
				sr := gentest.Snapshot(t, st, base)
				gr, _ := step(g0, sr, model.Compare(s0, sr))
				d := model.Compare(sr, s1)
				inc, gd := step(gr, s1, d)
				checkIncremental(t, p, gr, inc, gd, s1, key, tc.wantChanged, p.ID == "envoy-a" && tc.wantChanged != nil && (tc.wantChanged[0] == "7070" || strings.HasSuffix(tc.wantChanged[0], "_443")))
				back, _ := step(inc, s2, model.Compare(s1, s2))
				checkSame(t, p, back, g0)
				// Then a change on the other port (8080): its route
				// configuration was carried through the updates above.
				s3 := gentest.Snapshot(t, st, gentest.Edit(base, store.KindVirtualService, "ns-0", "a-only", func(*store.Object) *store.Object {
					return &store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-0", Name: "a-only"},
						Spec: &networking.VirtualService{Hosts: []string{"a.other.internal"}, Http: []*networking.HTTPRoute{{
							Timeout: durationpb.New(3 * time.Second),
							Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "a.other.internal"}}},
						}}}}
				}))
				last, gd3 := step(back, s3, model.Compare(s2, s3))
				checkIncremental(t, p, back, last, gd3, s3, key, nil, false)
			}
		})
	}
}

// kindStep brings g to s, given what differs from its snapshot (d), by
// its kind's part of a new cache, as a push does; it fails without the
// diff of the names that changed (an incremental step reports them).
func kindStep(t *testing.T, p *Proxy, g *gen.Generation, s *model.Snapshot, d *model.Diff) (*gen.Generation, *gen.Diff) {
	t.Helper()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	k := newCache(testLog(t), m).kindFor(p.Kind)
	n, gd, err := k.cache.Push(s, d, []*gen.Generation{g})(g, g.Key)
	if err != nil {
		t.Fatal(err)
	}
	if gd == nil {
		t.Fatal("no diff")
	}
	return n, gd
}

// checkIncremental compares an incremental generation inc (from g0, with
// diff gd) with a full one at s1.
func checkIncremental(t *testing.T, p *Proxy, g0, inc *gen.Generation, gd *gen.Diff, s1 *model.Snapshot, key string, wantChanged []string, mustSee bool) {
	t.Helper()
	full, err := generate(s1, p, key)
	if err != nil {
		t.Fatal(err)
	}
	got, want := gentest.Hashes(inc), gentest.Hashes(full)
	for _, ty := range gen.TypeURLs() {
		if !maps.Equal(got[ty], want[ty]) {
			t.Errorf("proxy %s %s: incremental differs from full:\nonly incremental: %v\nonly full: %v\nhash differs: %v",
				p.ID, shortType(ty), gentest.OnlyIn(got[ty], want[ty]), gentest.OnlyIn(want[ty], got[ty]), gentest.Differ(got[ty], want[ty]))
		}
		wantCh := gen.Compare(g0, full).Changed[ty]
		if !maps.Equal(gd.Changed[ty], wantCh) {
			t.Errorf("proxy %s %s: changed names %v, want %v", p.ID, shortType(ty), slices.Sorted(maps.Keys(gd.Changed[ty])), slices.Sorted(maps.Keys(wantCh)))
		}
		// Untouched resources are shared, not serialised again.
		for n, r := range inc.Types[ty].All() {
			if !wantCh[n] && g0.Get(ty, n) != nil && g0.Get(ty, n) != r {
				t.Errorf("proxy %s %s %s: unchanged resource not shared with the previous generation", p.ID, shortType(ty), n)
			}
		}
	}
	for _, n := range wantChanged {
		seen := false
		for _, ty := range gen.TypeURLs() {
			seen = seen || gd.Changed[ty][n]
		}
		if !seen && mustSee {
			t.Errorf("proxy %s: %s not among the changed resources", p.ID, n)
		}
	}
}

// checkSame checks that two generations hold the same resources.
func checkSame(t *testing.T, p *Proxy, back, g0 *gen.Generation) {
	t.Helper()
	for _, ty := range gen.TypeURLs() {
		if got, want := gentest.Hashes(back)[ty], gentest.Hashes(g0)[ty]; !maps.Equal(got, want) {
			t.Errorf("proxy %s %s: after reverting: only incremental %v, only full %v, differ %v", p.ID, shortType(ty), gentest.OnlyIn(got, want), gentest.OnlyIn(want, got), gentest.Differ(got, want))
		}
	}
}

// incrementalCase is one change of the incremental tests.
type incrementalCase struct {
	name string
	objs []*store.Object
	// wantChanged are resource names that must be among the changed
	// ones (a check that the change is seen at all).
	wantChanged []string
}

// incrementalCases are the changes TestIncrementalMatchesFull and
// TestSidecarIncrementalMatchesFull make to base.
func incrementalCases(base []*store.Object) []incrementalCase {
	se := func(f func(*networking.ServiceEntry)) func(o *store.Object) *store.Object {
		return func(o *store.Object) *store.Object {
			s := gentest.Clone(o.Spec.(*networking.ServiceEntry))
			f(s)
			o.Spec = s
			return o
		}
	}
	vs := func(f func(*networking.VirtualService)) func(o *store.Object) *store.Object {
		return func(o *store.Object) *store.Object {
			s := gentest.Clone(o.Spec.(*networking.VirtualService))
			f(s)
			o.Spec = s
			return o
		}
	}
	dr := func(f func(*networking.DestinationRule)) func(o *store.Object) *store.Object {
		return func(o *store.Object) *store.Object {
			s := gentest.Clone(o.Spec.(*networking.DestinationRule))
			f(s)
			o.Spec = s
			return o
		}
	}
	remove := func(*store.Object) *store.Object { return nil }
	return []incrementalCase{
		{"VirtualService weights", gentest.Edit(base, store.KindVirtualService, "ns-0", "svc-0000", vs(func(v *networking.VirtualService) {
			v.Http[0].Route[0].Weight, v.Http[0].Route[1].Weight = 10, 90
		})), []string{ListenerName(modeltest.Host(0), 7070)}},
		{"VirtualService removed", gentest.Edit(base, store.KindVirtualService, "ns-1", "svc-0001", remove), []string{ListenerName(modeltest.Host(1), 7070)}},
		{"VirtualService added", gentest.Edit(base, store.KindVirtualService, "ns-2", "svc-0020", func(*store.Object) *store.Object {
			return &store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-2", Name: "svc-0020"},
				Spec: &networking.VirtualService{Hosts: []string{modeltest.Host(20)}, Http: []*networking.HTTPRoute{{
					Retries: &networking.HTTPRetry{Attempts: 3},
					Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: modeltest.Host(21)}}},
				}}}}
		}), []string{ListenerName(modeltest.Host(20), 7070)}},
		// The route keeps naming the subset (issue 15 item 6): only the
		// cluster goes.
		{"DestinationRule subset removed (cross-host route)", gentest.Edit(base, store.KindDestinationRule, "ns-0", "svc-0012", dr(func(d *networking.DestinationRule) {
			d.Subsets = d.Subsets[:1]
		})), []string{ClusterName(7070, "v2", modeltest.Host(12))}},
		{"DestinationRule defines a missing subset", gentest.Edit(base, store.KindDestinationRule, "ns-2", "svc-0017", func(*store.Object) *store.Object {
			return &store.Object{Key: store.Key{Kind: store.KindDestinationRule, Namespace: "ns-2", Name: "svc-0017"},
				Spec: &networking.DestinationRule{Host: modeltest.Host(17), Subsets: []*networking.Subset{{Name: "canary", Labels: map[string]string{"version": "v1"}}}}}
		}), []string{ClusterName(7070, "canary", modeltest.Host(17))}},
		// The destination names no port: the missing host's cluster was on
		// the route's port, now it is on the host's only port.
		{"ServiceEntry declares a missing host", gentest.Edit(base, store.KindServiceEntry, "ns-1", "late", func(*store.Object) *store.Object {
			return &store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-1", Name: "late"},
				Spec: &networking.ServiceEntry{Hosts: []string{gentest.LateHost}, Resolution: networking.ServiceEntry_STATIC,
					Ports:     []*networking.ServicePort{{Name: "grpc", Number: 9443, Protocol: "GRPC"}},
					Endpoints: []*networking.WorkloadEntry{{Address: "10.9.9.8"}}}}
		}), []string{ListenerName(modeltest.Host(17), 7070), ClusterName(9443, "", gentest.LateHost)}},
		{"DestinationRule hash policy", gentest.Edit(base, store.KindDestinationRule, "ns-2", "svc-0002", dr(func(d *networking.DestinationRule) {
			d.TrafficPolicy = &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{
				ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"}}}}}
		})), []string{ListenerName(modeltest.Host(2), 7070), ClusterName(7070, "", modeltest.Host(2))}},
		// The wildcard route names port 7070, which no longer exists: it
		// keeps naming it (issue 15 item 6).
		{"ServiceEntry port renumbered (VirtualService destination)", gentest.Edit(base, store.KindServiceEntry, "ns-1", "svc-0013", se(func(s *networking.ServiceEntry) {
			s.Ports[0].Number = 9090
		})), []string{ListenerName(modeltest.Host(13), 9090), ClusterName(7070, "", modeltest.Host(13))}},
		{"ServiceEntry removed (cross-host destination)", gentest.Edit(base, store.KindServiceEntry, "ns-0", "svc-0012", remove), []string{ClusterName(7070, "v2", modeltest.Host(12))}},
		// A destination the route names without a port, on a host whose
		// only port changes: the route's cluster name follows the port.
		{"ServiceEntry port renumbered (portless cross-host destination)", gentest.Edit(base, store.KindServiceEntry, "ns-0", "svc-0012", se(func(s *networking.ServiceEntry) {
			s.Ports[0].Number = 7171
		})), []string{ListenerName(modeltest.Host(11), 7070), ClusterName(7171, "v2", modeltest.Host(12))}},
		{"ServiceEntry added", gentest.Edit(base, store.KindServiceEntry, "ns-0", "new", func(*store.Object) *store.Object {
			return &store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-0", Name: "new"},
				Spec: &networking.ServiceEntry{Hosts: []string{"c.other.internal"}, Resolution: networking.ServiceEntry_DNS,
					Ports: []*networking.ServicePort{{Name: "grpc", Number: 8080, Protocol: "GRPC"}}}}
		}), []string{ListenerName("c.other.internal", 8080)}},
		{"ServiceEntry hidden from other namespaces", gentest.Edit(base, store.KindServiceEntry, "ns-2", "svc-0005", se(func(s *networking.ServiceEntry) {
			s.ExportTo = []string{"."}
		})), []string{ListenerName(modeltest.Host(5), 7070)}},
		{"WorkloadEntry moved", gentest.Edit(base, store.KindWorkloadEntry, "ns-0", "svc-0000-1", func(o *store.Object) *store.Object {
			w := gentest.Clone(o.Spec.(*networking.WorkloadEntry))
			w.Address = "10.200.0.1"
			o.Spec = w
			return o
		}), []string{ClusterName(7070, "v2", modeltest.Host(0))}},
		{"WorkloadEntry service account (cluster SANs)", gentest.Edit(base, store.KindWorkloadEntry, "ns-1", "svc-0004-0", func(o *store.Object) *store.Object {
			w := gentest.Clone(o.Spec.(*networking.WorkloadEntry))
			w.ServiceAccount = "other"
			o.Spec = w
			return o
		}), []string{ClusterName(7070, "", modeltest.Host(4))}},
		{"nothing relevant", gentest.Edit(base, store.KindWorkloadGroup, "ns-0", "g", func(*store.Object) *store.Object {
			return &store.Object{Key: store.Key{Kind: store.KindWorkloadGroup, Namespace: "ns-0", Name: "g"},
				Spec: &networking.WorkloadGroup{Template: &networking.WorkloadEntry{ServiceAccount: "x"}}}
		}), nil},
	}
}

// TestCompareGlobal checks that policy changes make the diff global, so
// groups are generated in full.
func TestCompareGlobal(t *testing.T) {
	base := gentest.Base()
	st := store.NewStore()
	s0 := gentest.Snapshot(t, st, base)
	s1 := gentest.Snapshot(t, st, append(slices.Clone(base), &store.Object{
		Key:  store.Key{Kind: store.KindAuthorizationPolicy, Namespace: "ns-0", Name: "deny"},
		Spec: &security.AuthorizationPolicy{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "x"}}, Action: security.AuthorizationPolicy_DENY, Rules: []*security.Rule{{}}},
	}))
	if d := model.Compare(s0, s1); !d.Global {
		t.Fatalf("AuthorizationPolicy added: diff %+v, want global", d)
	}
	if d := model.Compare(s0, gentest.Snapshot(t, st, base)); !d.Empty() {
		t.Fatalf("same config: diff %+v, want empty", d)
	}
}

// TestRebaseWhenNothingDiffers checks that a change the generators do not
// read (a WorkloadGroup) leaves an Envoy sidecar's and a proxyless group's
// resources as a full generation makes them, under the new version.
func TestRebaseWhenNothingDiffers(t *testing.T) {
	base := gentest.Base()
	st := store.NewStore()
	s0 := gentest.Snapshot(t, st, base)
	s1 := gentest.Snapshot(t, st, append(slices.Clone(base), &store.Object{
		Key:  store.Key{Kind: store.KindWorkloadGroup, Namespace: "ns-0", Name: "g"},
		Spec: &networking.WorkloadGroup{Template: &networking.WorkloadEntry{ServiceAccount: "x"}},
	}))
	d := model.Compare(s0, s1)
	if !d.Empty() {
		t.Fatalf("diff %+v, want empty", d)
	}
	for _, p := range []*Proxy{
		{ID: "envoy", Kind: KindSidecar, Namespace: "ns-0", Labels: map[string]string{"app": "svc-0000"}, IPs: []string{"10.0.0.1"}, WorkloadName: "svc-0000-0"},
		{ID: "grpc", Kind: KindGRPC, Namespace: "ns-1"},
	} {
		g0, err := generate(s0, p, GroupKey(s0, p))
		if err != nil {
			t.Fatal(err)
		}
		// As a push brings the group forward: by its kind.
		m, err := newMetrics(nil)
		if err != nil {
			t.Fatal(err)
		}
		k := newCache(testLog(t), m).kindFor(p.Kind)
		n, gd, err := k.cache.Push(s1, d, []*gen.Generation{g0})(g0, g0.Key)
		if err != nil {
			t.Fatal(err)
		}
		full, err := generate(s1, p, GroupKey(s1, p))
		if err != nil {
			t.Fatal(err)
		}
		if n.Version != Version(s1) || n.Version == g0.Version {
			t.Errorf("%s: version %s, want %s", p.ID, n.Version, Version(s1))
		}
		for _, ty := range gen.TypeURLs() {
			if got, want := gentest.Hashes(n)[ty], gentest.Hashes(full)[ty]; !maps.Equal(got, want) || len(gd.Changed[ty]) != 0 {
				t.Errorf("%s %s: rebased differs from full (only rebased %v, only full %v) or changed %v", p.ID, shortType(ty), gentest.OnlyIn(got, want), gentest.OnlyIn(want, got), gd.Changed[ty])
			}
		}
	}
}
