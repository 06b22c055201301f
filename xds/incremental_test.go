package xds

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// incrementalBase is the config the incremental tests start from: 30
// services over 3 namespaces, 10 with a VirtualService and DestinationRule,
// plus a VirtualService routing svc-0011 to svc-0012 (a cross-host
// destination), a wildcard VirtualService for *.other.internal routing to
// svc-0013, a VirtualService splitting svc-0017 between itself and two
// destinations the proxies have no cluster for (a subset no
// DestinationRule defines, a host no ServiceEntry declares: issue 15 item
// 6), and mesh-wide STRICT mTLS (so endpoints' service accounts reach the
// clusters).
func incrementalBase() []*store.Object {
	objs := modeltest.Objects(modeltest.Size{Services: 30, EndpointsPerService: 4, Routes: 10, Namespaces: 3})
	for _, o := range objs {
		if we, ok := o.Spec.(*networking.WorkloadEntry); ok {
			we.ServiceAccount = "sa-" + o.Name
		}
	}
	objs = append(objs,
		&store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-2", Name: "cross"},
			Spec: &networking.VirtualService{Hosts: []string{modeltest.Host(11)}, Http: []*networking.HTTPRoute{{
				Route: []*networking.HTTPRouteDestination{
					{Destination: &networking.Destination{Host: modeltest.Host(12), Subset: "v2"}, Weight: 50},
					{Destination: &networking.Destination{Host: modeltest.Host(11)}, Weight: 50},
				},
			}}}},
		&store.Object{Key: store.Key{Kind: store.KindDestinationRule, Namespace: "ns-0", Name: "svc-0012"},
			Spec: &networking.DestinationRule{Host: modeltest.Host(12), Subsets: []*networking.Subset{
				{Name: "v1", Labels: map[string]string{"version": "v1"}},
				{Name: "v2", Labels: map[string]string{"version": "v2"}},
			}}},
		&store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-0", Name: "other"},
			Spec: &networking.ServiceEntry{Hosts: []string{"a.other.internal", "b.other.internal"}, Resolution: networking.ServiceEntry_STATIC,
				Ports:     []*networking.ServicePort{{Name: "grpc", Number: 8080, Protocol: "GRPC"}},
				Endpoints: []*networking.WorkloadEntry{{Address: "10.9.9.9"}}}},
		&store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-0", Name: "wild"},
			Spec: &networking.VirtualService{Hosts: []string{"*.other.internal"}, Http: []*networking.HTTPRoute{{
				Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: modeltest.Host(13), Port: &networking.PortSelector{Number: 7070}}}},
			}}}},
		&store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-2", Name: "partial"},
			Spec: &networking.VirtualService{Hosts: []string{modeltest.Host(17)}, Http: []*networking.HTTPRoute{{
				Route: []*networking.HTTPRouteDestination{
					{Destination: &networking.Destination{Host: modeltest.Host(17)}, Weight: 50},
					{Destination: &networking.Destination{Host: modeltest.Host(17), Subset: "canary"}, Weight: 30},
					{Destination: &networking.Destination{Host: lateHost}, Weight: 20},
				},
			}}}},
		&store.Object{Key: store.Key{Kind: store.KindPeerAuthentication, Namespace: "istio-system", Name: "default"},
			Spec: &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT}}},
	)
	return objs
}

// lateHost is the host incrementalBase routes to without a ServiceEntry
// declaring it.
const lateHost = "late.other.internal"

// edit returns objs with the object of key replaced by f's result (f gets
// a clone; nil removes it), or with add appended.
func edit(objs []*store.Object, kind store.Kind, ns, name string, f func(o *store.Object) *store.Object) []*store.Object {
	var out []*store.Object
	found := false
	for _, o := range objs {
		if o.Kind == kind && o.Namespace == ns && o.Name == name {
			found = true
			c := *o
			if n := f(&c); n != nil {
				out = append(out, n)
			}
			continue
		}
		out = append(out, o)
	}
	if !found {
		if n := f(nil); n != nil {
			out = append(out, n)
		}
	}
	return out
}

func protoClone[T proto.Message](m T) T { return proto.Clone(m).(T) }

func buildSnap(t *testing.T, st *store.Store, objs []*store.Object) *model.Snapshot {
	t.Helper()
	if err := st.Replace(store.Source{Name: "t", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	return model.Build(st.Snapshot())
}

func hashes(g *generation) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, t := range typeURLs {
		out[t] = map[string]string{}
		for n, r := range g.types[t].All() {
			out[t][n] = r.hash
		}
	}
	return out
}

// TestIncrementalMatchesFull is the safety net of generation.update: for
// each kind of change, bringing a proxyless group's generation forward
// incrementally yields exactly the resources (by serialised hash) of a
// full generation, reports exactly the names that differ, and reuses the
// previous generation's serialised resources for what it did not touch.
func TestIncrementalMatchesFull(t *testing.T) {
	base := incrementalBase()
	cases := incrementalCases(base)
	proxies := []*Proxy{
		{ID: "a", Kind: KindGRPC, Namespace: "ns-0"},
		{ID: "b", Kind: KindGRPC, Namespace: "ns-1", Labels: map[string]string{"app": "x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := store.NewStore()
			s0 := buildSnap(t, st, base)
			s1 := buildSnap(t, st, tc.objs)
			d := model.Compare(s0, s1)
			s2 := buildSnap(t, st, base)
			if d.Global {
				t.Fatalf("diff is global: %+v", d)
			}
			for _, p := range proxies {
				key := GroupKey(s0, p)
				g0, err := generate(s0, p, key)
				if err != nil {
					t.Fatal(err)
				}
				inc, gd, err := g0.update(s1, d)
				if err != nil {
					t.Fatal(err)
				}
				checkIncremental(t, p, g0, inc, gd, s1, key, tc.wantChanged, p.ID == "a")
				// And back: a second update, from an updated generation
				// (its host index carried forward), restores the first.
				back, _, err := inc.update(s2, model.Compare(s1, s2))
				if err != nil {
					t.Fatal(err)
				}
				checkSame(t, p, back, g0)
			}
		})
	}
}

// TestSidecarIncrementalMatchesFull is TestIncrementalMatchesFull for Envoy
// sidecar groups: their scope's part brought forward by updateOutbound and
// their own part kept or made again (updateSidecar) yield exactly a full
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
	base := append(incrementalBase(), edge, sni("a.edge.example"), db("a", "192.0.2.60"), db("b", "192.0.2.61"), tcp("a.db.example"))
	cases := append(incrementalCases(base),
		incrementalCase{"tls route to another host", edit(base, store.KindVirtualService, "ns-0", "edge", func(*store.Object) *store.Object {
			return sni("b.edge.example")
		}), []string{"192.0.2.50_443"}},
		incrementalCase{"VirtualService gains a host no service has", edit(base, store.KindVirtualService, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
			v := protoClone(o.Spec.(*networking.VirtualService))
			v.Hosts = append(v.Hosts, "alias.example.org")
			o.Spec = v
			return o
		}), []string{"7070"}},
		incrementalCase{"VirtualService with a host no service has loses its service", edit(edit(base, store.KindVirtualService, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
			v := protoClone(o.Spec.(*networking.VirtualService))
			v.Hosts = append(v.Hosts, "alias.example.org")
			o.Spec = v
			return o
		}), store.KindServiceEntry, "ns-0", "svc-0000", func(*store.Object) *store.Object { return nil }), []string{"7070"}},
		incrementalCase{"tcp route to another host", edit(base, store.KindVirtualService, "ns-0", "db", func(*store.Object) *store.Object {
			return tcp("b.db.example")
		}), []string{"192.0.2.60_5432"}},
		incrementalCase{"tls route removed", edit(base, store.KindVirtualService, "ns-0", "edge", func(*store.Object) *store.Object { return nil }),
			[]string{"192.0.2.50_443"}},
		incrementalCase{"VirtualService mirror to another host", edit(base, store.KindVirtualService, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
			v := protoClone(o.Spec.(*networking.VirtualService))
			v.Http[0].Mirror = &networking.Destination{Host: modeltest.Host(14)}
			o.Spec = v
			return o
		}), []string{"7070"}},
		incrementalCase{"mirrored host removed", edit(edit(base, store.KindVirtualService, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
			v := protoClone(o.Spec.(*networking.VirtualService))
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
			s0 := buildSnap(t, st, base)
			s1 := buildSnap(t, st, tc.objs)
			d := model.Compare(s0, s1)
			s2 := buildSnap(t, st, base)
			if d.Global {
				t.Fatalf("diff is global: %+v", d)
			}
			step := func(g *generation, s *model.Snapshot, d *model.Diff) (*generation, *genDiff) {
				t.Helper()
				part, changed, err := updateOutbound(outOf(g), s, d)
				if err != nil {
					t.Fatal(err)
				}
				n, gd, err := updateSidecar(g, s, d, &outboundChange{part: part, base: outOf(g), changed: changed})
				if err != nil {
					t.Fatal(err)
				}
				if gd == nil {
					t.Fatal("no diff")
				}
				return n, gd
			}
			for _, p := range proxies {
				key := GroupKey(s0, p)
				g0, err := generate(s0, p, key)
				if err != nil {
					t.Fatal(err)
				}
				// Through a push that changed nothing first (the scope part
				// rebased), as a fleet's parts usually are.
				sr := buildSnap(t, st, base)
				gr, _, err := updateSidecar(g0, sr, model.Compare(s0, sr), rebaseOutbound(outOf(g0), sr))
				if err != nil {
					t.Fatal(err)
				}
				d := model.Compare(sr, s1)
				inc, gd := step(gr, s1, d)
				checkIncremental(t, p, gr, inc, gd, s1, key, tc.wantChanged, p.ID == "envoy-a" && tc.wantChanged != nil && (tc.wantChanged[0] == "7070" || strings.HasSuffix(tc.wantChanged[0], "_443")))
				back, _ := step(inc, s2, model.Compare(s1, s2))
				checkSame(t, p, back, g0)
				// Then a change on the other port (8080): its route
				// configuration was carried through the updates above.
				s3 := buildSnap(t, st, edit(base, store.KindVirtualService, "ns-0", "a-only", func(*store.Object) *store.Object {
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

// checkIncremental compares an incremental generation inc (from g0, with
// diff gd) with a full one at s1.
func checkIncremental(t *testing.T, p *Proxy, g0, inc *generation, gd *genDiff, s1 *model.Snapshot, key string, wantChanged []string, mustSee bool) {
	t.Helper()
	full, err := generate(s1, p, key)
	if err != nil {
		t.Fatal(err)
	}
	got, want := hashes(inc), hashes(full)
	for _, ty := range typeURLs {
		if !maps.Equal(got[ty], want[ty]) {
			t.Errorf("proxy %s %s: incremental differs from full:\nonly incremental: %v\nonly full: %v\nhash differs: %v",
				p.ID, shortType(ty), onlyIn(got[ty], want[ty]), onlyIn(want[ty], got[ty]), differ(got[ty], want[ty]))
		}
		wantCh := diffGenerations(g0, full).changed[ty]
		if !maps.Equal(gd.changed[ty], wantCh) {
			t.Errorf("proxy %s %s: changed names %v, want %v", p.ID, shortType(ty), slices.Sorted(maps.Keys(gd.changed[ty])), slices.Sorted(maps.Keys(wantCh)))
		}
		// Untouched resources are shared, not serialised again.
		for n, r := range inc.types[ty].All() {
			if !wantCh[n] && g0.get(ty, n) != nil && g0.get(ty, n) != r {
				t.Errorf("proxy %s %s %s: unchanged resource not shared with the previous generation", p.ID, shortType(ty), n)
			}
		}
	}
	for _, n := range wantChanged {
		seen := false
		for _, ty := range typeURLs {
			seen = seen || gd.changed[ty][n]
		}
		if !seen && mustSee {
			t.Errorf("proxy %s: %s not among the changed resources", p.ID, n)
		}
	}
}

// checkSame checks that two generations hold the same resources.
func checkSame(t *testing.T, p *Proxy, back, g0 *generation) {
	t.Helper()
	for _, ty := range typeURLs {
		if got, want := hashes(back)[ty], hashes(g0)[ty]; !maps.Equal(got, want) {
			t.Errorf("proxy %s %s: after reverting: only incremental %v, only full %v, differ %v", p.ID, shortType(ty), onlyIn(got, want), onlyIn(want, got), differ(got, want))
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
			s := protoClone(o.Spec.(*networking.ServiceEntry))
			f(s)
			o.Spec = s
			return o
		}
	}
	vs := func(f func(*networking.VirtualService)) func(o *store.Object) *store.Object {
		return func(o *store.Object) *store.Object {
			s := protoClone(o.Spec.(*networking.VirtualService))
			f(s)
			o.Spec = s
			return o
		}
	}
	dr := func(f func(*networking.DestinationRule)) func(o *store.Object) *store.Object {
		return func(o *store.Object) *store.Object {
			s := protoClone(o.Spec.(*networking.DestinationRule))
			f(s)
			o.Spec = s
			return o
		}
	}
	remove := func(*store.Object) *store.Object { return nil }
	return []incrementalCase{
		{"VirtualService weights", edit(base, store.KindVirtualService, "ns-0", "svc-0000", vs(func(v *networking.VirtualService) {
			v.Http[0].Route[0].Weight, v.Http[0].Route[1].Weight = 10, 90
		})), []string{ListenerName(modeltest.Host(0), 7070)}},
		{"VirtualService removed", edit(base, store.KindVirtualService, "ns-1", "svc-0001", remove), []string{ListenerName(modeltest.Host(1), 7070)}},
		{"VirtualService added", edit(base, store.KindVirtualService, "ns-2", "svc-0020", func(*store.Object) *store.Object {
			return &store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-2", Name: "svc-0020"},
				Spec: &networking.VirtualService{Hosts: []string{modeltest.Host(20)}, Http: []*networking.HTTPRoute{{
					Retries: &networking.HTTPRetry{Attempts: 3},
					Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: modeltest.Host(21)}}},
				}}}}
		}), []string{ListenerName(modeltest.Host(20), 7070)}},
		// The route keeps naming the subset (issue 15 item 6): only the
		// cluster goes.
		{"DestinationRule subset removed (cross-host route)", edit(base, store.KindDestinationRule, "ns-0", "svc-0012", dr(func(d *networking.DestinationRule) {
			d.Subsets = d.Subsets[:1]
		})), []string{ClusterName(7070, "v2", modeltest.Host(12))}},
		{"DestinationRule defines a missing subset", edit(base, store.KindDestinationRule, "ns-2", "svc-0017", func(*store.Object) *store.Object {
			return &store.Object{Key: store.Key{Kind: store.KindDestinationRule, Namespace: "ns-2", Name: "svc-0017"},
				Spec: &networking.DestinationRule{Host: modeltest.Host(17), Subsets: []*networking.Subset{{Name: "canary", Labels: map[string]string{"version": "v1"}}}}}
		}), []string{ClusterName(7070, "canary", modeltest.Host(17))}},
		// The destination names no port: the missing host's cluster was on
		// the route's port, now it is on the host's only port.
		{"ServiceEntry declares a missing host", edit(base, store.KindServiceEntry, "ns-1", "late", func(*store.Object) *store.Object {
			return &store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-1", Name: "late"},
				Spec: &networking.ServiceEntry{Hosts: []string{lateHost}, Resolution: networking.ServiceEntry_STATIC,
					Ports:     []*networking.ServicePort{{Name: "grpc", Number: 9443, Protocol: "GRPC"}},
					Endpoints: []*networking.WorkloadEntry{{Address: "10.9.9.8"}}}}
		}), []string{ListenerName(modeltest.Host(17), 7070), ClusterName(9443, "", lateHost)}},
		{"DestinationRule hash policy", edit(base, store.KindDestinationRule, "ns-2", "svc-0002", dr(func(d *networking.DestinationRule) {
			d.TrafficPolicy = &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{
				ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"}}}}}
		})), []string{ListenerName(modeltest.Host(2), 7070), ClusterName(7070, "", modeltest.Host(2))}},
		// The wildcard route names port 7070, which no longer exists: it
		// keeps naming it (issue 15 item 6).
		{"ServiceEntry port renumbered (VirtualService destination)", edit(base, store.KindServiceEntry, "ns-1", "svc-0013", se(func(s *networking.ServiceEntry) {
			s.Ports[0].Number = 9090
		})), []string{ListenerName(modeltest.Host(13), 9090), ClusterName(7070, "", modeltest.Host(13))}},
		{"ServiceEntry removed (cross-host destination)", edit(base, store.KindServiceEntry, "ns-0", "svc-0012", remove), []string{ClusterName(7070, "v2", modeltest.Host(12))}},
		// A destination the route names without a port, on a host whose
		// only port changes: the route's cluster name follows the port.
		{"ServiceEntry port renumbered (portless cross-host destination)", edit(base, store.KindServiceEntry, "ns-0", "svc-0012", se(func(s *networking.ServiceEntry) {
			s.Ports[0].Number = 7171
		})), []string{ListenerName(modeltest.Host(11), 7070), ClusterName(7171, "v2", modeltest.Host(12))}},
		{"ServiceEntry added", edit(base, store.KindServiceEntry, "ns-0", "new", func(*store.Object) *store.Object {
			return &store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "ns-0", Name: "new"},
				Spec: &networking.ServiceEntry{Hosts: []string{"c.other.internal"}, Resolution: networking.ServiceEntry_DNS,
					Ports: []*networking.ServicePort{{Name: "grpc", Number: 8080, Protocol: "GRPC"}}}}
		}), []string{ListenerName("c.other.internal", 8080)}},
		{"ServiceEntry hidden from other namespaces", edit(base, store.KindServiceEntry, "ns-2", "svc-0005", se(func(s *networking.ServiceEntry) {
			s.ExportTo = []string{"."}
		})), []string{ListenerName(modeltest.Host(5), 7070)}},
		{"WorkloadEntry moved", edit(base, store.KindWorkloadEntry, "ns-0", "svc-0000-1", func(o *store.Object) *store.Object {
			w := protoClone(o.Spec.(*networking.WorkloadEntry))
			w.Address = "10.200.0.1"
			o.Spec = w
			return o
		}), []string{ClusterName(7070, "v2", modeltest.Host(0))}},
		{"WorkloadEntry service account (cluster SANs)", edit(base, store.KindWorkloadEntry, "ns-1", "svc-0004-0", func(o *store.Object) *store.Object {
			w := protoClone(o.Spec.(*networking.WorkloadEntry))
			w.ServiceAccount = "other"
			o.Spec = w
			return o
		}), []string{ClusterName(7070, "", modeltest.Host(4))}},
		{"nothing relevant", edit(base, store.KindWorkloadGroup, "ns-0", "g", func(*store.Object) *store.Object {
			return &store.Object{Key: store.Key{Kind: store.KindWorkloadGroup, Namespace: "ns-0", Name: "g"},
				Spec: &networking.WorkloadGroup{Template: &networking.WorkloadEntry{ServiceAccount: "x"}}}
		}), nil},
	}
}

// TestCompareGlobal checks that policy changes make the diff global, so
// groups are generated in full.
func TestCompareGlobal(t *testing.T) {
	base := incrementalBase()
	st := store.NewStore()
	s0 := buildSnap(t, st, base)
	s1 := buildSnap(t, st, append(slices.Clone(base), &store.Object{
		Key:  store.Key{Kind: store.KindAuthorizationPolicy, Namespace: "ns-0", Name: "deny"},
		Spec: &security.AuthorizationPolicy{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "x"}}, Action: security.AuthorizationPolicy_DENY, Rules: []*security.Rule{{}}},
	}))
	if d := model.Compare(s0, s1); !d.Global || (&generation{proxy: &Proxy{Kind: KindGRPC}}).incremental(d) {
		t.Fatalf("AuthorizationPolicy added: diff %+v, want global", d)
	}
	if d := model.Compare(s0, buildSnap(t, st, base)); !d.Empty() {
		t.Fatalf("same config: diff %+v, want empty", d)
	}
}

func onlyIn(a, b map[string]string) []string {
	var out []string
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func differ(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; ok && v != w {
			out = append(out, fmt.Sprint(k))
		}
	}
	slices.Sort(out)
	return out
}

// TestRebaseWhenNothingDiffers checks that a change the generators do not
// read (a WorkloadGroup) leaves an Envoy sidecar's and a proxyless group's
// resources as a full generation makes them, under the new version.
func TestRebaseWhenNothingDiffers(t *testing.T) {
	base := incrementalBase()
	st := store.NewStore()
	s0 := buildSnap(t, st, base)
	s1 := buildSnap(t, st, append(slices.Clone(base), &store.Object{
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
		k := newCache(testLog(t), m).kindFor(p)
		n, gd, err := k.cache.push(s1, d, []*generation{g0})(g0, g0.key)
		if err != nil {
			t.Fatal(err)
		}
		full, err := generate(s1, p, GroupKey(s1, p))
		if err != nil {
			t.Fatal(err)
		}
		if n.version != Version(s1) || n.version == g0.version {
			t.Errorf("%s: version %s, want %s", p.ID, n.version, Version(s1))
		}
		for _, ty := range typeURLs {
			if got, want := hashes(n)[ty], hashes(full)[ty]; !maps.Equal(got, want) || len(gd.changed[ty]) != 0 {
				t.Errorf("%s %s: rebased differs from full (only rebased %v, only full %v) or changed %v", p.ID, shortType(ty), onlyIn(got, want), onlyIn(want, got), gd.changed[ty])
			}
		}
	}
}
