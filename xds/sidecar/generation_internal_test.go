package sidecar

import (
	"bytes"
	"maps"
	"slices"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/gen"
	"github.com/vmesh/vmesh/xds/gen/gentest"
	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
)

// TestRouteResourceIsProtoMarshal: a sidecar route configuration put
// together from its virtual hosts' bytes (routeResource) is byte for byte
// what proto.Marshal makes of it, whether the virtual hosts were
// serialised anew or shared; and a configuration with a field the splice
// does not know is marshalled whole.
func TestRouteResourceIsProtoMarshal(t *testing.T) {
	s := gentest.Snapshot(t, store.NewStore(), gentest.Base())
	p := testWorkload(model.Workload{ID: "e", Namespace: "ns-0"})
	g, err := generateSidecar(s, p, model.ViewKey(s, p), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, updated := 0, 0
	for name, r := range g.Types[resourcev3.RouteType].All() {
		rc := r.Msg.(*routev3.RouteConfiguration)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(rc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Any.Value, want) {
			t.Errorf("route configuration %s: put-together bytes differ from proto.Marshal", name)
		}
		if len(rc.GetVirtualHosts()) < 2 {
			t.Errorf("route configuration %s: %d virtual hosts, want several", name, len(rc.GetVirtualHosts()))
		}
		// Shared: every virtual host's bytes from r's own.
		again, fresh, err := routeResource(rc, r)
		if err != nil {
			t.Fatal(err)
		}
		if len(fresh) != 0 || !bytes.Equal(again.Any.Value, want) || again.Hash != r.Hash {
			t.Errorf("route configuration %s: from shared virtual hosts: %d serialised anew, bytes equal %v", name, len(fresh), bytes.Equal(again.Any.Value, want))
		}
		n++
		// Updated: the first host replaced, the second dropped, a new one
		// before the last; the rest shared with r.
		vhs := rc.GetVirtualHosts()
		if len(vhs) < 4 {
			continue
		}
		first := proto.Clone(vhs[0]).(*routev3.VirtualHost)
		first.Domains = append(first.Domains, "changed.example")
		added := &routev3.VirtualHost{Name: "added.example:80", Domains: []string{"added.example"}}
		upd := &routev3.RouteConfiguration{Name: rc.GetName(), ValidateClusters: rc.GetValidateClusters(), MaxDirectResponseBodySizeBytes: rc.GetMaxDirectResponseBodySizeBytes(), IgnorePortInHostMatching: rc.GetIgnorePortInHostMatching(),
			VirtualHosts: append(append([]*routev3.VirtualHost{first}, vhs[2:len(vhs)-1]...), added, vhs[len(vhs)-1])}
		got, fresh, err := routeResource(upd, r)
		if err != nil {
			t.Fatal(err)
		}
		want, err = proto.MarshalOptions{Deterministic: true}.Marshal(upd)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Any.Value, want) {
			t.Errorf("route configuration %s updated: bytes differ from proto.Marshal", name)
		}
		if len(fresh) != 2 || fresh[0] != first || fresh[1] != added {
			t.Errorf("route configuration %s updated: serialised anew %d hosts, want the replaced and the added one", name, len(fresh))
		}
		updated++
	}
	if n == 0 || updated == 0 {
		t.Fatalf("%d route configurations, %d with four virtual hosts or more", n, updated)
	}
	rc := &routev3.RouteConfiguration{Name: "80", VirtualHosts: []*routev3.VirtualHost{{Name: "a", Domains: []string{"a"}}}, InternalOnlyHeaders: []string{"x-internal"}}
	r, _, err := routeResource(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(rc); !bytes.Equal(r.Any.Value, want) {
		t.Error("a route configuration with internal_only_headers: bytes differ from proto.Marshal")
	}
}

// TestSidecarGlobalChangeDiff: on a global change (an AuthorizationPolicy
// selecting the VM, a mesh-wide PeerAuthentication mode) a sidecar group is
// made from its scope's part generated anew and its own part made again;
// the names reported changed (the scope's, compared once per scope, plus
// its own) are exactly those that differ from the previous generation, and
// the group equals a full generation.
func TestSidecarGlobalChangeDiff(t *testing.T) {
	base := gentest.Base()
	st := store.NewStore()
	s0 := gentest.Snapshot(t, st, base)
	s1 := gentest.Snapshot(t, st, append(gentest.Edit(base, store.KindPeerAuthentication, "istio-system", "default", func(*store.Object) *store.Object { return nil }),
		&store.Object{Key: store.Key{Kind: store.KindAuthorizationPolicy, Namespace: "ns-0", Name: "deny"},
			Spec: &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_DENY, Rules: []*security.Rule{{}}}}))
	d := model.Compare(s0, s1)
	if !d.Global {
		t.Fatalf("diff %+v, want global", d)
	}
	p := testWorkload(model.Workload{ID: "envoy-a", Namespace: "ns-0", WorkloadName: "svc-0000-1", IPs: []string{"10.1.2.3"}})
	key := model.ViewKey(s0, p)
	g0, err := generateSidecar(s0, p, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	part, err := generateOutbound(s1, p, model.OutboundKey(s1, p), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, gd, err := updateSidecar(g0, s1, d, &outboundChange{part: part, base: outOf(g0), changed: diffOutbound(outOf(g0), part)})
	if err != nil {
		t.Fatal(err)
	}
	if gd == nil {
		t.Fatal("no diff")
	}
	full, err := generateSidecar(s1, p, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, want := gentest.Hashes(n), gentest.Hashes(full)
	for _, ty := range gen.TypeURLs() {
		if !maps.Equal(got[ty], want[ty]) {
			t.Errorf("%s: differs from a full generation: only composed %v, only full %v, differ %v", gen.ShortType(ty), gentest.OnlyIn(got[ty], want[ty]), gentest.OnlyIn(want[ty], got[ty]), gentest.Differ(got[ty], want[ty]))
		}
		if wantCh := gen.Compare(g0, full).Changed[ty]; !maps.Equal(gd.Changed[ty], wantCh) {
			t.Errorf("%s: changed names %v, want %v", gen.ShortType(ty), slices.Sorted(maps.Keys(gd.Changed[ty])), slices.Sorted(maps.Keys(wantCh)))
		}
	}
	if !gd.Changed[resourcev3.ListenerType][VirtualInboundListener] {
		t.Error("virtualInbound (the new policy's RBAC) not among the changed names")
	}
}

// TestSidecarOwnDestinationRuleChange: the connection pool of the
// DestinationRule of a VM's own service is applied to its inbound cluster
// (server side, as Istio does), so a change to that rule alone (not a
// global diff) makes the VM's own part again: the group equals a full
// generation, inbound|7070|| among the changed names with the new limit.
// A sidecar owning no endpoint of that service keeps its own part.
func TestSidecarOwnDestinationRuleChange(t *testing.T) {
	base := gentest.Base()
	st := store.NewStore()
	s0 := gentest.Snapshot(t, st, base)
	s1 := gentest.Snapshot(t, st, gentest.Edit(base, store.KindDestinationRule, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
		dr := proto.Clone(o.Spec).(*networking.DestinationRule)
		dr.TrafficPolicy = &networking.TrafficPolicy{ConnectionPool: &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 7}}}
		o.Spec = dr
		return o
	}))
	d := model.Compare(s0, s1)
	if d.Global || !d.DestinationRules[modeltest.Host(0)] {
		t.Fatalf("diff %+v, want the DestinationRule of %s only", d, modeltest.Host(0))
	}
	owner := testWorkload(model.Workload{ID: "envoy-a", Namespace: "ns-0", WorkloadName: "svc-0000-1", IPs: []string{"10.0.0.2"}})
	other := testWorkload(model.Workload{ID: "envoy-b", Namespace: "ns-0", WorkloadName: "svc-0003-1", IPs: []string{"10.0.3.2"}})
	for _, p := range []model.Workload{owner, other} {
		_, n, gd := sidecarStep(t, p.ID, s0, s1, p)
		inbound := InboundClusterName(7070)
		c, ok := n.Types[resourcev3.ClusterType].Get(inbound)
		if !ok {
			t.Fatalf("%s: no %s", p.ID, inbound)
		}
		limit := c.Msg.(*clusterv3.Cluster).GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue()
		changedInbound := gd != nil && gd.Changed[resourcev3.ClusterType][inbound]
		if p.ID == owner.ID && (limit != 7 || !changedInbound) {
			t.Errorf("owner: %s max connections %d, changed %v; want 7 and changed", inbound, limit, changedInbound)
		}
		if p.ID == other.ID && (limit == 7 || changedInbound) {
			t.Errorf("other: %s max connections %d, changed %v; want its own service's (unlimited), unchanged", inbound, limit, changedInbound)
		}
	}
}

// TestSidecarRouteChangeKeepsComposedMaps: a VirtualService change alters
// only the scope's route configurations, so a VM whose own part is kept
// keeps its composed listener and cluster maps as they are (no per-VM
// copy), while a DestinationRule change of a host it calls gives it a new
// cluster map; either way the group equals a full generation.
func TestSidecarRouteChangeKeepsComposedMaps(t *testing.T) {
	base := gentest.Base()
	st := store.NewStore()
	s0 := gentest.Snapshot(t, st, base)
	weights := gentest.Edit(base, store.KindVirtualService, "ns-2", "cross", func(o *store.Object) *store.Object {
		vs := proto.Clone(o.Spec).(*networking.VirtualService)
		vs.Http[0].Route[0].Weight, vs.Http[0].Route[1].Weight = 70, 30
		o.Spec = vs
		return o
	})
	pool := gentest.Edit(base, store.KindDestinationRule, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
		dr := proto.Clone(o.Spec).(*networking.DestinationRule)
		dr.TrafficPolicy = &networking.TrafficPolicy{ConnectionPool: &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 7}}}
		o.Spec = dr
		return o
	})
	p := testWorkload(model.Workload{ID: "envoy-b", Namespace: "ns-0", WorkloadName: "svc-0003-1", IPs: []string{"10.0.3.2"}})
	for _, c := range []struct {
		name         string
		objs         []*store.Object
		keepClusters bool
	}{{"VirtualService weights", weights, true}, {"DestinationRule pool", pool, false}} {
		g0, n, _ := sidecarStep(t, c.name, s0, gentest.Snapshot(t, st, c.objs), p)
		if partOf(n).own == nil || &partOf(n).own[resourcev3.ListenerType][0] != &partOf(g0).own[resourcev3.ListenerType][0] {
			t.Fatalf("%s: the VM's own part was made again; want it kept", c.name)
		}
		if n.Types[resourcev3.ListenerType] != g0.Types[resourcev3.ListenerType] {
			t.Errorf("%s: the listener map was composed again; want the previous one kept", c.name)
		}
		if kept := n.Types[resourcev3.ClusterType] == g0.Types[resourcev3.ClusterType]; kept != c.keepClusters {
			t.Errorf("%s: cluster map kept %v, want %v", c.name, kept, c.keepClusters)
		}
	}
}

// sidecarStep generates p's group at s0 and updates it to s1 as the cache
// does (its scope's part by updateOutbound, then updateSidecar), failing
// the test (named name) when the result differs from a full generation at
// s1.
func sidecarStep(t *testing.T, name string, s0, s1 *model.Snapshot, p model.Workload) (g0, n *gen.Generation, gd *gen.Diff) {
	t.Helper()
	d := model.Compare(s0, s1)
	key := model.ViewKey(s0, p)
	g0, err := generateSidecar(s0, p, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	part, changed, err := updateOutbound(outOf(g0), s1, d)
	if err != nil {
		t.Fatal(err)
	}
	if n, gd, err = updateSidecar(g0, s1, d, &outboundChange{part: part, base: outOf(g0), changed: changed}); err != nil {
		t.Fatal(err)
	}
	full, err := generateSidecar(s1, p, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, want := gentest.Hashes(n), gentest.Hashes(full)
	for _, ty := range gen.TypeURLs() {
		if !maps.Equal(got[ty], want[ty]) {
			t.Errorf("%s %s: differs from a full generation: differ %v", name, gen.ShortType(ty), gentest.Differ(got[ty], want[ty]))
		}
	}
	return g0, n, gd
}

// testWorkload is w as a sidecar's proxy shows it to the generators.
func testWorkload(w model.Workload) model.Workload {
	w.Kind, w.Reads = model.KindSidecar, Kind{}.Reads()
	return w
}
