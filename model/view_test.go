package model_test

import (
	"testing"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	grpcgen "github.com/vmesh/vmesh/xds/grpc"
	"github.com/vmesh/vmesh/xds/sidecar"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

func viewFixture(t *testing.T) *model.Snapshot {
	se := func(ns, host string, ports ...uint32) *store.Object {
		spec := &networking.ServiceEntry{Hosts: []string{host}, Resolution: networking.ServiceEntry_STATIC}
		for _, p := range ports {
			spec.Ports = append(spec.Ports, &networking.ServicePort{Number: p, Name: "p", Protocol: "GRPC"})
		}
		return obj(store.KindServiceEntry, ns, host, spec)
	}
	return build(t,
		se("shop", "cart.shop.svc.cluster.local", 7070),
		se("shop", "reviews.shop.svc.cluster.local", 9080, 9090),
		se("other", "billing.other.internal", 8000),
		obj(store.KindDestinationRule, "shop", "cart", &networking.DestinationRule{
			Host: "cart.shop.svc.cluster.local", Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}},
		}),
		obj(store.KindVirtualService, "shop", "cart", &networking.VirtualService{Hosts: []string{"cart"}}),
		obj(store.KindSidecar, "shop", "scoped", &networking.Sidecar{
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"scope": "local"}},
			Egress:           []*networking.IstioEgressListener{{Port: &networking.SidecarPort{Number: 9080}, Hosts: []string{"./*"}}},
		}),
	)
}

// TestViewResolve: one rule resolves every route destination, for both
// proxy kinds: a short host is in the VirtualService's namespace; no port
// means the route's own port for the same host, else the destination's only
// port, else the route's port; a host, port or subset the proxy has no
// cluster for does not resolve, and an Envoy sidecar's clusters follow its
// Sidecar's egress ports.
func TestViewResolve(t *testing.T) {
	s := viewFixture(t)
	vs := s.VirtualServiceFor("cart.shop.svc.cluster.local", "shop")
	if vs == nil {
		t.Fatal("no VirtualService for cart")
	}
	dest := func(host string, port uint32, subset string) *networking.Destination {
		d := &networking.Destination{Host: host, Subset: subset}
		if port != 0 {
			d.Port = &networking.PortSelector{Number: port}
		}
		return d
	}
	const cart, reviews = "cart.shop.svc.cluster.local", "reviews.shop.svc.cluster.local"
	cases := []struct {
		name      string
		w         model.Workload
		from      string
		fromPort  uint32
		d         *networking.Destination
		want      string // cluster name; "" when it must not resolve
		wantLabel string // the subset's version label
	}{
		{"short host, subset", model.Workload{Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop"}, cart, 7070, dest("cart", 0, "v1"), "outbound|7070|v1|" + cart, "v1"},
		{"only port of another host", model.Workload{Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop"}, cart, 7070, dest("billing.other.internal", 0, ""), "outbound|8000||billing.other.internal", ""},
		{"several ports: the route's", model.Workload{Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop"}, cart, 9090, dest("reviews", 0, ""), "outbound|9090||" + reviews, ""},
		{"explicit port", model.Workload{Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(), Namespace: "shop"}, cart, 7070, dest("reviews", 9080, ""), "outbound|9080||" + reviews, ""},
		{"unknown subset", model.Workload{Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop"}, cart, 7070, dest("cart", 0, "v9"), "", ""},
		{"unknown port", model.Workload{Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop"}, cart, 7070, dest("reviews", 1234, ""), "", ""},
		{"unknown host", model.Workload{Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop"}, cart, 7070, dest("nowhere.example", 0, ""), "", ""},
		{"sidecar egress port allows", model.Workload{Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"scope": "local"}}, cart, 7070, dest("reviews", 9080, ""), "outbound|9080||" + reviews, ""},
		{"sidecar egress port refuses", model.Workload{Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"scope": "local"}}, cart, 7070, dest("reviews", 9090, ""), "", ""},
		{"sidecar egress hosts refuse", model.Workload{Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"scope": "local"}}, cart, 7070, dest("billing.other.internal", 8000, ""), "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := model.NewView(s, c.w)
			got, ok := v.Resolve(c.from, c.fromPort, vs, c.d)
			switch {
			case c.want == "" && ok:
				t.Fatalf("resolved to %s, want no cluster", got.Name())
			case c.want != "" && (!ok || got.Name() != c.want):
				t.Fatalf("resolved to %q (%v), want %s", got.Name(), ok, c.want)
			case ok && got.SubsetLabels["version"] != c.wantLabel:
				t.Fatalf("subset labels %v, want version %q", got.SubsetLabels, c.wantLabel)
			}
			// What resolves is one of the proxy's clusters, and the other
			// way round.
			found := false
			for _, cl := range v.Clusters() {
				found = found || cl.Name() == c.want
			}
			if found != (c.want != "") {
				t.Fatalf("cluster %q among the View's clusters: %v", c.want, found)
			}
		})
	}
}

// TestViewKey: the group key covers what the View lets generators read.
// Proxyless gRPC proxies that differ only in labels selecting nothing, or
// in IPs, share a key, and their View does not expose those fields; labels
// that select a Sidecar change the key; an Envoy sidecar's labels and IPs
// are always in its key.
func TestViewKey(t *testing.T) {
	s := viewFixture(t)
	grpcA := model.Workload{ID: "a", Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"app": "x"}, IPs: []string{"10.0.0.1"}}
	grpcB := model.Workload{ID: "b", Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"app": "y"}, IPs: []string{"10.0.0.2"}}
	scoped := model.Workload{ID: "c", Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"scope": "local"}}
	if model.ViewKey(s, grpcA) != model.ViewKey(s, grpcB) {
		t.Errorf("proxyless keys differ on labels and IPs that nothing reads: %q vs %q", model.ViewKey(s, grpcA), model.ViewKey(s, grpcB))
	}
	if model.ViewKey(s, grpcA) == model.ViewKey(s, scoped) {
		t.Error("labels selecting a Sidecar did not change the key")
	}
	if w := model.NewView(s, grpcA).Workload(); w.Labels != nil || w.IPs != nil || w.Namespace != "shop" || w.Kind != model.KindGRPC {
		t.Errorf("a proxyless View exposes %+v: a generator reading it would need those fields in the key", w)
	}
	envoyA, envoyB := grpcA, grpcB
	envoyA.Kind, envoyB.Kind = model.KindSidecar, model.KindSidecar
	envoyA.Reads, envoyB.Reads = sidecar.Kind{}.Reads(), sidecar.Kind{}.Reads()
	if model.ViewKey(s, envoyA) == model.ViewKey(s, envoyB) {
		t.Error("Envoy sidecars with other labels and IPs share a key")
	}
	if v := model.NewView(s, envoyA); v.Key() != model.ViewKey(s, envoyA) || v.Workload().IPs[0] != "10.0.0.1" {
		t.Errorf("an Envoy View: key %q, workload %+v", v.Key(), v.Workload())
	}
}

// TestOutboundKeyReadsOnlySourceLabels: sidecars of one namespace and
// Sidecar share their outbound part unless a VirtualService's sourceLabels
// name a label they differ on; IPs and other labels never split it.
func TestOutboundKeyReadsOnlySourceLabels(t *testing.T) {
	web := model.Workload{ID: "a", Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"app": "web", "tier": "front"}, IPs: []string{"10.0.0.1"}}
	batch := model.Workload{ID: "b", Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"app": "batch", "tier": "front"}, IPs: []string{"10.0.0.2"}}
	other := model.Workload{ID: "c", Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"app": "web", "tier": "back"}, IPs: []string{"10.0.0.3"}}
	s := viewFixture(t)
	if model.OutboundKey(s, web) != model.OutboundKey(s, batch) {
		t.Errorf("no sourceLabels anywhere, yet labels split the outbound part: %q vs %q", model.OutboundKey(s, web), model.OutboundKey(s, batch))
	}
	if model.NewView(s, web).OutboundKey() != model.OutboundKey(s, web) {
		t.Error("View.OutboundKey differs from OutboundKey")
	}
	scoped := web
	scoped.Labels = map[string]string{"scope": "local"}
	if model.OutboundKey(s, web) == model.OutboundKey(s, scoped) {
		t.Error("labels selecting another Sidecar did not split the outbound part")
	}
	withSource := build(t,
		obj(store.KindServiceEntry, "shop", "cart", &networking.ServiceEntry{Hosts: []string{"cart.shop.svc.cluster.local"}, Resolution: networking.ServiceEntry_STATIC,
			Ports: []*networking.ServicePort{{Number: 7070, Name: "http", Protocol: "HTTP"}}}),
		obj(store.KindVirtualService, "shop", "cart", &networking.VirtualService{Hosts: []string{"cart"}, Http: []*networking.HTTPRoute{{
			Match: []*networking.HTTPMatchRequest{{SourceLabels: map[string]string{"app": "web"}}},
			Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "cart"}}},
		}}}),
	)
	if model.OutboundKey(withSource, web) == model.OutboundKey(withSource, batch) {
		t.Error("sidecars whose app label a sourceLabels match reads share an outbound part")
	}
	if model.OutboundKey(withSource, web) != model.OutboundKey(withSource, other) {
		t.Errorf("a label no sourceLabels names (tier) split the outbound part: %q vs %q", model.OutboundKey(withSource, web), model.OutboundKey(withSource, other))
	}
}

// TestProxylessKeyReadsSourceLabels: once a VirtualService's sourceLabels
// name a label key, proxyless clients that differ on it get different
// keys and their View exposes that label (and no other), so the route
// generator can leave out the routes that are not theirs, as Istio does; a
// change to the set of such keys makes the diff Global, since it moves
// clients between groups.
func TestProxylessKeyReadsSourceLabels(t *testing.T) {
	v1 := model.Workload{ID: "a", Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"version": "v1", "app": "x"}}
	v2 := model.Workload{ID: "b", Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"version": "v2", "app": "x"}}
	otherApp := model.Workload{ID: "c", Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop", Labels: map[string]string{"version": "v1", "app": "y"}}
	cart := obj(store.KindServiceEntry, "shop", "cart", &networking.ServiceEntry{Hosts: []string{"cart.shop.svc.cluster.local"}, Resolution: networking.ServiceEntry_STATIC,
		Ports: []*networking.ServicePort{{Number: 7070, Name: "grpc", Protocol: "GRPC"}}})
	plain := build(t, cart)
	withSource := build(t, cart,
		obj(store.KindVirtualService, "shop", "cart", &networking.VirtualService{Hosts: []string{"cart"}, Http: []*networking.HTTPRoute{{
			Match: []*networking.HTTPMatchRequest{{SourceLabels: map[string]string{"version": "v1"}}},
			Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "cart"}}},
		}}}),
	)
	if model.ViewKey(plain, v1) != model.ViewKey(plain, v2) {
		t.Errorf("no sourceLabels anywhere, yet labels split proxyless clients: %q vs %q", model.ViewKey(plain, v1), model.ViewKey(plain, v2))
	}
	if w := model.NewView(plain, v1).Workload(); w.Labels != nil {
		t.Errorf("no sourceLabels anywhere, yet the proxyless View exposes labels %v", w.Labels)
	}
	if model.ViewKey(withSource, v1) == model.ViewKey(withSource, v2) {
		t.Error("proxyless clients differing on a label sourceLabels names share a key")
	}
	if model.ViewKey(withSource, v1) != model.ViewKey(withSource, otherApp) {
		t.Errorf("a label no sourceLabels names (app) split proxyless clients: %q vs %q", model.ViewKey(withSource, v1), model.ViewKey(withSource, otherApp))
	}
	if v := model.NewView(withSource, v1); v.Key() != model.ViewKey(withSource, v1) || len(v.Workload().Labels) != 1 || v.Workload().Labels["version"] != "v1" {
		t.Errorf("proxyless View: key %q, labels %v; want only version=v1", v.Key(), v.Workload().Labels)
	}
	if d := model.Compare(plain, withSource); !d.Global || d.SameViewKeys() {
		t.Errorf("a VirtualService adding a sourceLabels key: Global %v, SameViewKeys %v; want a global diff", d.Global, d.SameViewKeys())
	}
	if d := model.Compare(withSource, withSource); d.Global {
		t.Error("an unchanged snapshot compares as global")
	}
}

// TestViewRouteCluster: a destination the proxy has no cluster for keeps
// the name Istio's GetDestinationCluster gives it (port: the
// destination's, else the host's only port, else the route's), and the
// View tells exactly those names as missing (MissingCluster); one it has
// is named as its cluster and is not missing.
func TestViewRouteCluster(t *testing.T) {
	s := viewFixture(t)
	vs := s.VirtualServiceFor("cart.shop.svc.cluster.local", "shop")
	const cart, reviews = "cart.shop.svc.cluster.local", "reviews.shop.svc.cluster.local"
	v := model.NewView(s, model.Workload{Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop"})
	cases := []struct {
		name     string
		fromPort uint32
		d        *networking.Destination
		want     string
		found    bool
	}{
		{"existing subset", 7070, &networking.Destination{Host: "cart", Subset: "v1"}, "outbound|7070|v1|" + cart, true},
		{"unknown subset: the route's port", 7070, &networking.Destination{Host: "cart", Subset: "v9"}, "outbound|7070|v9|" + cart, false},
		{"unknown subset of a one-port host: its port", 7070, &networking.Destination{Host: "billing.other.internal", Subset: "v2"}, "outbound|8000|v2|billing.other.internal", false},
		{"unknown subset of a two-port host: the route's port", 9090, &networking.Destination{Host: "reviews", Subset: "v2"}, "outbound|9090|v2|" + reviews, false},
		{"unknown port", 7070, &networking.Destination{Host: "reviews", Port: &networking.PortSelector{Number: 1234}}, "outbound|1234||" + reviews, false},
		{"unknown short host: qualified, the route's port", 7070, &networking.Destination{Host: "nowhere"}, "outbound|7070||nowhere.shop.svc.cluster.local", false},
	}
	for _, c := range cases {
		name, cl, ok := v.RouteCluster(cart, c.fromPort, vs, c.d)
		if name != c.want || ok != c.found || ok && cl.Name() != name {
			t.Errorf("%s: RouteCluster = %q, %v (cluster %q), want %q, %v", c.name, name, ok, cl.Name(), c.want, c.found)
		}
		if v.MissingCluster(c.want) == c.found {
			t.Errorf("%s: MissingCluster(%q) = %v, want %v", c.name, c.want, !c.found, !c.found)
		}
	}
	for _, cl := range v.Clusters() {
		if v.MissingCluster(cl.Name()) {
			t.Errorf("the proxy's cluster %s is missing", cl.Name())
		}
	}
	for _, n := range []string{"", "inbound|7070||" + cart, "outbound|x||" + cart, "outbound|07070||" + cart, "outbound|7070|v1"} {
		if v.MissingCluster(n) {
			t.Errorf("MissingCluster(%q): not a name RouteCluster gives", n)
		}
	}
}

// TestProxylessKeyReadsLocalityWhereItMatters: a proxyless client's
// locality is in its View and group key only where a locality setting or
// outlier detection applies (its EDS priorities and weights then depend on
// it), and with it the labels failoverPriority names; the cluster carries
// the LocalityLB its EDS applies. A change that makes locality matter is
// global (keys change).
func TestProxylessKeyReadsLocalityWhereItMatters(t *testing.T) {
	client := func(loc, zoneLabel string) model.Workload {
		return model.Workload{ID: "c", Kind: model.KindGRPC, Reads: grpcgen.Kind{}.Reads(), Namespace: "shop", Locality: loc,
			Labels: map[string]string{"app": "x", "rack": zoneLabel}}
	}
	cart := obj(store.KindServiceEntry, "shop", "cart", &networking.ServiceEntry{Hosts: []string{"cart.shop.svc.cluster.local"}, Resolution: networking.ServiceEntry_STATIC,
		Ports: []*networking.ServicePort{{Number: 7070, Name: "grpc", Protocol: "GRPC"}}})
	dr := func(tp *networking.TrafficPolicy) *store.Object {
		return obj(store.KindDestinationRule, "shop", "cart", &networking.DestinationRule{Host: "cart.shop.svc.cluster.local", TrafficPolicy: tp})
	}
	od := &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(1)}
	plain := build(t, cart, dr(&networking.TrafficPolicy{ConnectionPool: &networking.ConnectionPoolSettings{}}))
	failover := build(t, cart, dr(&networking.TrafficPolicy{OutlierDetection: od}))
	byRack := build(t, cart, dr(&networking.TrafficPolicy{OutlierDetection: od, LoadBalancer: &networking.LoadBalancerSettings{
		LocalityLbSetting: &networking.LocalityLoadBalancerSetting{FailoverPriority: []string{"rack"}}}}))
	distribute := build(t, cart, dr(&networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
		LocalityLbSetting: &networking.LocalityLoadBalancerSetting{Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "eu/*", To: map[string]uint32{"eu/a": 100}}}}}}))
	disabled := build(t, cart, dr(&networking.TrafficPolicy{OutlierDetection: od, LoadBalancer: &networking.LoadBalancerSettings{
		LocalityLbSetting: &networking.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(false)}}}))

	a, b := client("eu/a", "r1"), client("eu/b", "r1")
	if model.ViewKey(plain, a) != model.ViewKey(plain, b) {
		t.Errorf("no locality setting or outlier detection, yet locality splits proxyless clients: %q vs %q", model.ViewKey(plain, a), model.ViewKey(plain, b))
	}
	if v := model.NewView(plain, a); v.Workload().Locality != "" || v.Clusters()[0].LocalityLB != nil {
		t.Errorf("no locality setting: the View shows locality %q, cluster LocalityLB %+v", v.Workload().Locality, v.Clusters()[0].LocalityLB)
	}
	for name, s := range map[string]*model.Snapshot{"outlier detection": failover, "distribute": distribute} {
		if model.ViewKey(s, a) == model.ViewKey(s, b) {
			t.Errorf("%s: proxyless clients in other zones share a key", name)
		}
		v := model.NewView(s, a)
		if lb := v.Clusters()[0].LocalityLB; v.Workload().Locality != "eu/a" || lb == nil || lb.Proxy != "eu/a" {
			t.Errorf("%s: View locality %q, cluster LocalityLB %+v; want eu/a", name, v.Workload().Locality, lb)
		}
	}
	if lb := model.NewView(failover, a).Clusters()[0].LocalityLB; !lb.Failover {
		t.Errorf("outlier detection: LocalityLB %+v without failover", lb)
	}
	if lb := model.NewView(distribute, a).Clusters()[0].LocalityLB; lb.Failover || len(lb.Setting.GetDistribute()) != 1 {
		t.Errorf("distribute without outlier detection: LocalityLB %+v", lb)
	}
	if lb := model.NewView(disabled, a).Clusters()[0].LocalityLB; lb != nil {
		t.Errorf("a disabled localityLbSetting: LocalityLB %+v, want none", lb)
	}
	// failoverPriority names rack: clients on other racks differ, and the
	// View shows the label; a label it does not name (app) still does not.
	other := client("eu/a", "r2")
	if model.ViewKey(byRack, a) == model.ViewKey(byRack, other) || model.ViewKey(failover, a) != model.ViewKey(failover, other) {
		t.Error("a label failoverPriority names should split keys exactly where it is named")
	}
	if l := model.NewView(byRack, a).Workload().Labels; l["rack"] != "r1" || l["app"] != "" {
		t.Errorf("failoverPriority rack: the View shows labels %v, want rack only", l)
	}
	if d := model.Compare(plain, failover); !d.Global {
		t.Error("a change that makes locality matter is not global")
	}
}

// TestOutboundKeyReadsFailoverPriorityLabels: a sidecar's scope-only part
// (its EDS among it) depends on the labels failoverPriority names, so
// sidecars of one scope and locality on other racks do not share it where
// failoverPriority names rack, and do elsewhere.
func TestOutboundKeyReadsFailoverPriorityLabels(t *testing.T) {
	cart := obj(store.KindServiceEntry, "shop", "cart", &networking.ServiceEntry{Hosts: []string{"cart.shop.svc.cluster.local"}, Resolution: networking.ServiceEntry_STATIC,
		Ports: []*networking.ServicePort{{Number: 7070, Name: "grpc", Protocol: "GRPC"}}})
	od := &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(1)}
	failover := build(t, cart, obj(store.KindDestinationRule, "shop", "cart", &networking.DestinationRule{Host: "cart.shop.svc.cluster.local",
		TrafficPolicy: &networking.TrafficPolicy{OutlierDetection: od}}))
	byRack := build(t, cart, obj(store.KindDestinationRule, "shop", "cart", &networking.DestinationRule{Host: "cart.shop.svc.cluster.local",
		TrafficPolicy: &networking.TrafficPolicy{OutlierDetection: od, LoadBalancer: &networking.LoadBalancerSettings{
			LocalityLbSetting: &networking.LocalityLoadBalancerSetting{FailoverPriority: []string{"rack=r9"}}}}}))
	sc := func(rack string) model.Workload {
		return model.Workload{ID: "s", Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(), Namespace: "shop", Locality: "eu/a", Labels: map[string]string{"rack": rack}}
	}
	if model.OutboundKey(byRack, sc("r1")) == model.OutboundKey(byRack, sc("r2")) {
		t.Error("failoverPriority names rack, yet sidecars on other racks share an outbound key")
	}
	if model.NewView(byRack, sc("r1")).LocalityKey() == model.NewView(byRack, sc("r2")).LocalityKey() {
		t.Error("failoverPriority names rack, yet sidecars on other racks share a locality key (the cluster memo's)")
	}
	if model.OutboundKey(failover, sc("r1")) != model.OutboundKey(failover, sc("r2")) {
		t.Error("no failoverPriority, yet rack splits the outbound key")
	}
}
