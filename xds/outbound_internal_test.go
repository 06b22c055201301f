package xds

import (
	"bytes"
	"maps"
	"slices"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/sidecar"
	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
)

// TestRouteResourceIsProtoMarshal: a sidecar route configuration put
// together from its virtual hosts' bytes (routeResource) is byte for byte
// what proto.Marshal makes of it, whether the virtual hosts were
// serialised anew or shared; and a configuration with a field the splice
// does not know is marshalled whole.
func TestRouteResourceIsProtoMarshal(t *testing.T) {
	s := buildSnap(t, store.NewStore(), incrementalBase())
	p := &Proxy{ID: "e", Kind: KindSidecar, Namespace: "ns-0"}
	g, err := generate(s, p, GroupKey(s, p))
	if err != nil {
		t.Fatal(err)
	}
	n, updated := 0, 0
	for name, r := range g.types[resourcev3.RouteType].All() {
		rc := r.msg.(*routev3.RouteConfiguration)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(rc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.any.Value, want) {
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
		if len(fresh) != 0 || !bytes.Equal(again.any.Value, want) || again.hash != r.hash {
			t.Errorf("route configuration %s: from shared virtual hosts: %d serialised anew, bytes equal %v", name, len(fresh), bytes.Equal(again.any.Value, want))
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
		if !bytes.Equal(got.any.Value, want) {
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
	if want, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(rc); !bytes.Equal(r.any.Value, want) {
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
	base := incrementalBase()
	st := store.NewStore()
	s0 := buildSnap(t, st, base)
	s1 := buildSnap(t, st, append(edit(base, store.KindPeerAuthentication, "istio-system", "default", func(*store.Object) *store.Object { return nil }),
		&store.Object{Key: store.Key{Kind: store.KindAuthorizationPolicy, Namespace: "ns-0", Name: "deny"},
			Spec: &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_DENY, Rules: []*security.Rule{{}}}}))
	d := model.Compare(s0, s1)
	if !d.Global {
		t.Fatalf("diff %+v, want global", d)
	}
	p := &Proxy{ID: "envoy-a", Kind: KindSidecar, Namespace: "ns-0", WorkloadName: "svc-0000-1", IPs: []string{"10.1.2.3"}}
	key := GroupKey(s0, p)
	g0, err := generate(s0, p, key)
	if err != nil {
		t.Fatal(err)
	}
	part, err := generateOutbound(s1, p, model.OutboundKey(s1, p.Workload()), nil)
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
	full, err := generate(s1, p, key)
	if err != nil {
		t.Fatal(err)
	}
	got, want := hashes(n), hashes(full)
	for _, ty := range typeURLs {
		if !maps.Equal(got[ty], want[ty]) {
			t.Errorf("%s: differs from a full generation: only composed %v, only full %v, differ %v", shortType(ty), onlyIn(got[ty], want[ty]), onlyIn(want[ty], got[ty]), differ(got[ty], want[ty]))
		}
		if wantCh := diffGenerations(g0, full).changed[ty]; !maps.Equal(gd.changed[ty], wantCh) {
			t.Errorf("%s: changed names %v, want %v", shortType(ty), slices.Sorted(maps.Keys(gd.changed[ty])), slices.Sorted(maps.Keys(wantCh)))
		}
	}
	if !gd.changed[resourcev3.ListenerType][sidecar.VirtualInboundListener] {
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
	base := incrementalBase()
	st := store.NewStore()
	s0 := buildSnap(t, st, base)
	s1 := buildSnap(t, st, edit(base, store.KindDestinationRule, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
		dr := proto.Clone(o.Spec).(*networking.DestinationRule)
		dr.TrafficPolicy = &networking.TrafficPolicy{ConnectionPool: &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 7}}}
		o.Spec = dr
		return o
	}))
	d := model.Compare(s0, s1)
	if d.Global || !d.DestinationRules[modeltest.Host(0)] {
		t.Fatalf("diff %+v, want the DestinationRule of %s only", d, modeltest.Host(0))
	}
	owner := &Proxy{ID: "envoy-a", Kind: KindSidecar, Namespace: "ns-0", WorkloadName: "svc-0000-1", IPs: []string{"10.0.0.2"}}
	other := &Proxy{ID: "envoy-b", Kind: KindSidecar, Namespace: "ns-0", WorkloadName: "svc-0003-1", IPs: []string{"10.0.3.2"}}
	for _, p := range []*Proxy{owner, other} {
		_, n, gd := sidecarStep(t, p.ID, s0, s1, p)
		inbound := sidecar.InboundClusterName(7070)
		c, ok := n.types[resourcev3.ClusterType].Get(inbound)
		if !ok {
			t.Fatalf("%s: no %s", p.ID, inbound)
		}
		limit := c.msg.(*clusterv3.Cluster).GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue()
		changedInbound := gd != nil && gd.changed[resourcev3.ClusterType][inbound]
		if p == owner && (limit != 7 || !changedInbound) {
			t.Errorf("owner: %s max connections %d, changed %v; want 7 and changed", inbound, limit, changedInbound)
		}
		if p == other && (limit == 7 || changedInbound) {
			t.Errorf("other: %s max connections %d, changed %v; want its own service's (unlimited), unchanged", inbound, limit, changedInbound)
		}
	}
}

// TestScopeClustersKeepOnlyTheirBytes: a scope part keeps its clusters and
// assignments serialised only (their messages are most of a sidecar
// fleet's heap), and what a stream holds still shows them whole: the held
// dump decodes each to the message the generator made.
func TestScopeClustersKeepOnlyTheirBytes(t *testing.T) {
	s := buildSnap(t, store.NewStore(), incrementalBase())
	p := &Proxy{ID: "vm-1", Kind: KindSidecar, Namespace: "ns-0", IPs: []string{"10.9.0.1"}, WorkloadName: "vm-1"}
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(testLog(t), m)
	c.push(s, time.Time{})
	v := model.NewView(s, p.Workload())
	cds, err := sidecar.OutboundClusters(v)
	if err != nil {
		t.Fatal(err)
	}
	eds, err := sidecar.Endpoints(v)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]proto.Message{resourcev3.ClusterType: {}, resourcev3.EndpointType: {}}
	for _, cl := range cds {
		want[resourcev3.ClusterType][cl.GetName()] = cl
	}
	for _, a := range eds {
		want[resourcev3.EndpointType][a.GetClusterName()] = a
	}
	for typeURL, msgs := range want {
		w := &watch{proxy: p, typeURL: typeURL, sotw: make(chan cachev3.Response, 1)}
		var names []string
		if typeURL == resourcev3.EndpointType {
			names = slices.Collect(maps.Keys(msgs))
		}
		w.sub = newSotwSubscription(names, typeURL == resourcev3.ClusterType)
		w.req = &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names}
		if _, err := c.open(w, true); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-w.sotw:
			w.sub.deliver(r.(*sotwResponse))
		default:
			t.Fatalf("%s: no answer", shortType(typeURL))
		}
		g := c.gens[GroupKey(s, p)]
		if g == nil {
			t.Fatalf("%s: no generation for the proxy's group", shortType(typeURL))
		}
		for name := range msgs {
			if r := outOf(g).types[typeURL]; r == nil {
				t.Fatalf("%s: the scope part has none", shortType(typeURL))
			} else if x, ok := r.Get(name); !ok || x.msg != nil {
				t.Errorf("%s %s: in the part %v, keeps its message %v; want only its bytes", shortType(typeURL), name, ok, ok && x.msg != nil)
			}
		}
	}
	shown := 0
	for _, hs := range c.held(p.ID) {
		for short, rs := range hs.Types {
			for _, r := range rs {
				for typeURL, msgs := range want {
					if shortType(typeURL) != short || msgs[r.Name] == nil {
						continue
					}
					shown++
					if !proto.Equal(r.Body, msgs[r.Name]) {
						t.Errorf("held %s %s: body differs from the generator's:\n got %v\nwant %v", short, r.Name, r.Body, msgs[r.Name])
					}
				}
			}
		}
	}
	if n := len(cds) + len(eds); shown != n || n == 0 {
		t.Errorf("held dump showed %d clusters and assignments, want %d (and some)", shown, n)
	}
}

// TestSidecarRouteChangeKeepsComposedMaps: a VirtualService change alters
// only the scope's route configurations, so a VM whose own part is kept
// keeps its composed listener and cluster maps as they are (no per-VM
// copy), while a DestinationRule change of a host it calls gives it a new
// cluster map; either way the group equals a full generation.
func TestSidecarRouteChangeKeepsComposedMaps(t *testing.T) {
	base := incrementalBase()
	st := store.NewStore()
	s0 := buildSnap(t, st, base)
	weights := edit(base, store.KindVirtualService, "ns-2", "cross", func(o *store.Object) *store.Object {
		vs := proto.Clone(o.Spec).(*networking.VirtualService)
		vs.Http[0].Route[0].Weight, vs.Http[0].Route[1].Weight = 70, 30
		o.Spec = vs
		return o
	})
	pool := edit(base, store.KindDestinationRule, "ns-0", "svc-0000", func(o *store.Object) *store.Object {
		dr := proto.Clone(o.Spec).(*networking.DestinationRule)
		dr.TrafficPolicy = &networking.TrafficPolicy{ConnectionPool: &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 7}}}
		o.Spec = dr
		return o
	})
	p := &Proxy{ID: "envoy-b", Kind: KindSidecar, Namespace: "ns-0", WorkloadName: "svc-0003-1", IPs: []string{"10.0.3.2"}}
	for _, c := range []struct {
		name         string
		objs         []*store.Object
		keepClusters bool
	}{{"VirtualService weights", weights, true}, {"DestinationRule pool", pool, false}} {
		g0, n, _ := sidecarStep(t, c.name, s0, buildSnap(t, st, c.objs), p)
		if sidecarOf(n).own == nil || &sidecarOf(n).own[resourcev3.ListenerType][0] != &sidecarOf(g0).own[resourcev3.ListenerType][0] {
			t.Fatalf("%s: the VM's own part was made again; want it kept", c.name)
		}
		if n.types[resourcev3.ListenerType] != g0.types[resourcev3.ListenerType] {
			t.Errorf("%s: the listener map was composed again; want the previous one kept", c.name)
		}
		if kept := n.types[resourcev3.ClusterType] == g0.types[resourcev3.ClusterType]; kept != c.keepClusters {
			t.Errorf("%s: cluster map kept %v, want %v", c.name, kept, c.keepClusters)
		}
	}
}

// sidecarStep generates p's group at s0 and updates it to s1 as the cache
// does (its scope's part by updateOutbound, then updateSidecar), failing
// the test (named name) when the result differs from a full generation at
// s1.
func sidecarStep(t *testing.T, name string, s0, s1 *model.Snapshot, p *Proxy) (g0, n *generation, gd *genDiff) {
	t.Helper()
	d := model.Compare(s0, s1)
	key := GroupKey(s0, p)
	g0, err := generate(s0, p, key)
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
	full, err := generate(s1, p, key)
	if err != nil {
		t.Fatal(err)
	}
	got, want := hashes(n), hashes(full)
	for _, ty := range typeURLs {
		if !maps.Equal(got[ty], want[ty]) {
			t.Errorf("%s %s: differs from a full generation: differ %v", name, shortType(ty), differ(got[ty], want[ty]))
		}
	}
	return g0, n, gd
}
