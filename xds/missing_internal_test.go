package xds

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	grpcgen "github.com/vmesh/vmesh/xds/grpc"
	"github.com/vmesh/vmesh/xds/sidecar"
	networking "istio.io/api/networking/v1alpha3"
)

// Hosts of missingSnapshot.
const (
	mdReviews = "reviews.shop.internal" // ports 9080 and 9090, subset v1
	mdRatings = "ratings.shop.internal" // port 8000 only, no subsets
	mdMongo   = "mongo.shop.internal"   // TCP 27017, subset v1
	mdGhost   = "ghost.shop.internal"   // declared by no ServiceEntry
)

// missingSnapshot routes to destinations no proxy has a cluster for (issue
// 15 item 6): a subset no DestinationRule defines, a host no ServiceEntry
// declares, a port the host does not have; split with a real destination,
// alone, mirrored and on a TCP port.
func missingSnapshot(t *testing.T) *model.Snapshot {
	t.Helper()
	o := func(kind store.Kind, name string, spec any) *store.Object {
		obj := &store.Object{Key: store.Key{Kind: kind, Namespace: "default", Name: name}}
		switch s := spec.(type) {
		case *networking.ServiceEntry:
			obj.Spec = s
		case *networking.DestinationRule:
			obj.Spec = s
		case *networking.VirtualService:
			obj.Spec = s
		}
		return obj
	}
	se := func(host, protocol string, ports ...uint32) *networking.ServiceEntry {
		s := &networking.ServiceEntry{Hosts: []string{host}, Resolution: networking.ServiceEntry_STATIC, Location: networking.ServiceEntry_MESH_INTERNAL,
			Endpoints: []*networking.WorkloadEntry{{Address: "10.0.0.1", Labels: map[string]string{"version": "v1"}}}}
		for _, p := range ports {
			s.Ports = append(s.Ports, &networking.ServicePort{Name: strings.ToLower(protocol) + "-" + strconv.Itoa(int(p)), Number: p, Protocol: protocol})
		}
		return s
	}
	dest := func(host, subset string, port uint32, weight int32) *networking.HTTPRouteDestination {
		d := &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: host, Subset: subset}, Weight: weight}
		if port != 0 {
			d.Destination.Port = &networking.PortSelector{Number: port}
		}
		return d
	}
	header := func(name string) []*networking.HTTPMatchRequest {
		return []*networking.HTTPMatchRequest{{Headers: map[string]*networking.StringMatch{name: {MatchType: &networking.StringMatch_Exact{Exact: "1"}}}}}
	}
	v1 := []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}}
	st := store.NewStore()
	objs := []*store.Object{
		o(store.KindServiceEntry, "reviews", se(mdReviews, "GRPC", 9080, 9090)),
		o(store.KindServiceEntry, "ratings", se(mdRatings, "GRPC", 8000)),
		o(store.KindServiceEntry, "mongo", se(mdMongo, "TCP", 27017)),
		o(store.KindDestinationRule, "reviews", &networking.DestinationRule{Host: mdReviews, Subsets: v1}),
		o(store.KindDestinationRule, "mongo", &networking.DestinationRule{Host: mdMongo, Subsets: v1}),
		o(store.KindVirtualService, "reviews", &networking.VirtualService{Hosts: []string{mdReviews}, Http: []*networking.HTTPRoute{
			{Name: "ported", Match: header("x-port"), Route: []*networking.HTTPRouteDestination{dest(mdReviews, "", 7777, 0)}},
			{Name: "ratings", Match: header("x-ratings"), Route: []*networking.HTTPRouteDestination{dest(mdRatings, "v2", 0, 0)}},
			{Name: "ghost", Match: header("x-ghost"), Route: []*networking.HTTPRouteDestination{dest(mdGhost, "", 0, 0)}},
			{
				Name:   "split",
				Route:  []*networking.HTTPRouteDestination{dest(mdReviews, "v1", 0, 50), dest(mdReviews, "v9", 0, 30), dest(mdGhost, "", 0, 20), dest(mdReviews, "v1", 9090, 0)},
				Mirror: &networking.Destination{Host: mdGhost, Port: &networking.PortSelector{Number: 9000}},
			},
		}}),
		o(store.KindVirtualService, "mongo", &networking.VirtualService{Hosts: []string{mdMongo}, Tcp: []*networking.TCPRoute{{
			Route: []*networking.RouteDestination{
				{Destination: &networking.Destination{Host: mdMongo, Subset: "v1"}, Weight: 70},
				{Destination: &networking.Destination{Host: mdMongo, Subset: "v9"}, Weight: 30},
			},
		}}}),
	}
	if err := st.Replace(store.Source{Name: "t", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	return model.Build(st.Snapshot())
}

// routeClusters lists the clusters and weights of the route named name of
// the virtual host: "cluster" for one, "cluster=weight" for each of a
// split.
func routeClusters(t *testing.T, vh *routev3.VirtualHost, name string) []string {
	t.Helper()
	for _, r := range vh.GetRoutes() {
		if r.GetName() != name {
			continue
		}
		a := r.GetRoute()
		if a == nil {
			t.Fatalf("route %s of %s: %v, want a route to clusters", name, vh.GetName(), r.GetAction())
		}
		if c := a.GetCluster(); c != "" {
			return []string{c}
		}
		var out []string
		for _, wc := range a.GetWeightedClusters().GetClusters() {
			out = append(out, wc.GetName()+"="+strconv.Itoa(int(wc.GetWeight().GetValue())))
		}
		return out
	}
	t.Fatalf("virtual host %s has no route %s", vh.GetName(), name)
	return nil
}

// wantMissingRoutes are the clusters, as Istio's GetDestinationCluster
// names them, of the routes of missingSnapshot's reviews VirtualService on
// port 9080: a destination keeps its weight whether the proxy has its
// cluster or not; without a port it takes the only port of its host
// (ratings) or else the route's (reviews, ghost); weight 0 beside others
// is left out.
var wantMissingRoutes = map[string][]string{
	"ported":  {"outbound|7777||" + mdReviews},
	"ratings": {"outbound|8000|v2|" + mdRatings},
	"ghost":   {"outbound|9080||" + mdGhost},
	"split":   {"outbound|9080|v1|" + mdReviews + "=50", "outbound|9080|v9|" + mdReviews + "=30", "outbound|9080||" + mdGhost + "=20"},
}

// The clusters the reviews routes name (on ports 9080 and 9090) that no
// proxy has.
var wantMissingClusters = []string{
	"outbound|7777||" + mdReviews, "outbound|8000|v2|" + mdRatings,
	"outbound|9080||" + mdGhost, "outbound|9080|v9|" + mdReviews,
	"outbound|9090||" + mdGhost, "outbound|9090|v9|" + mdReviews,
}

// TestMissingDestinationsKeepTheirShare (issue 15 item 6): a route
// destination naming a host, port or subset the proxy has no cluster for
// stays in the route, with its weight, under Istio's name for its cluster,
// for proxyless gRPC and Envoy sidecars alike (the mirror and TCP route of
// an Envoy sidecar too); CDS has no such cluster; the consistency checks
// accept exactly those names and still refuse any other absent cluster.
func TestMissingDestinationsKeepTheirShare(t *testing.T) {
	s := missingSnapshot(t)

	t.Run("grpc", func(t *testing.T) {
		p := &Proxy{ID: "client", Kind: KindGRPC, Namespace: "default"}
		v := model.NewView(s, p.Workload())
		rds, err := grpcgen.Routes(v)
		if err != nil {
			t.Fatal(err)
		}
		var vh *routev3.VirtualHost
		for _, rc := range rds {
			if rc.GetName() == ListenerName(mdReviews, 9080) {
				vh = rc.GetVirtualHosts()[0]
			}
		}
		if vh == nil {
			t.Fatal("no route configuration for reviews:9080")
		}
		for name, want := range wantMissingRoutes {
			if got := routeClusters(t, vh, name); !slices.Equal(got, want) {
				t.Errorf("route %s: clusters %v, want %v", name, got, want)
			}
		}
		cds, err := grpcgen.Clusters(v)
		if err != nil {
			t.Fatal(err)
		}
		checkMissing(t, v, cds)
		lds, err := grpcgen.Listeners(v)
		if err != nil {
			t.Fatal(err)
		}
		cla, err := grpcgen.Endpoints(v)
		if err != nil {
			t.Fatal(err)
		}
		eds := map[string]bool{}
		for _, a := range cla {
			eds[a.GetClusterName()] = true
		}
		if err := Consistent(lds, rds, cds, eds, v.MissingCluster); err != nil {
			t.Errorf("Consistent with the View's missing clusters: %v", err)
		}
		if err := Consistent(lds, rds, cds, eds, nil); err == nil || !strings.Contains(err.Error(), "outbound|") {
			t.Errorf("Consistent without them = %v, want a missing cluster", err)
		}
		real := ClusterName(9080, "v1", mdReviews)
		if err := Consistent(lds, rds, slices.DeleteFunc(slices.Clone(cds), func(c *clusterv3.Cluster) bool { return c.GetName() == real }), eds, v.MissingCluster); err == nil || !strings.Contains(err.Error(), real) {
			t.Errorf("a real cluster left out of CDS: Consistent = %v, want it named", err)
		}
		// The whole generation, with its consistency check, succeeds.
		if _, err := generate(s, p, GroupKey(s, p)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("sidecar", func(t *testing.T) {
		p := &Proxy{ID: "envoy", Kind: KindSidecar, Namespace: "default", IPs: []string{"10.9.0.1"}}
		v := model.NewView(s, p.Workload())
		res, err := sidecar.Generate(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range res.Messages() {
			if err := sidecar.Validate(m); err != nil {
				t.Errorf("%T: %v", m, err)
			}
		}
		var vh *routev3.VirtualHost
		for _, rc := range res.Routes {
			for _, x := range rc.GetVirtualHosts() {
				if x.GetName() == mdReviews+":9080" {
					vh = x
				}
			}
		}
		if vh == nil {
			t.Fatal("no virtual host reviews:9080")
		}
		for name, want := range wantMissingRoutes {
			if got := routeClusters(t, vh, name); !slices.Equal(got, want) {
				t.Errorf("route %s: clusters %v, want %v", name, got, want)
			}
		}
		for _, r := range vh.GetRoutes() {
			if r.GetName() != "split" {
				continue
			}
			mp := r.GetRoute().GetRequestMirrorPolicies()
			if len(mp) != 1 || mp[0].GetCluster() != "outbound|9000||"+mdGhost {
				t.Errorf("mirror policies %v, want the missing host's cluster outbound|9000||%s", mp, mdGhost)
			}
		}
		tcp := mdTCPClusters(t, res.Listeners, "mongo.default") // a weighted tcp route's chain: the VirtualService's name
		if want := []string{"outbound|27017|v1|" + mdMongo + "=70", "outbound|27017|v9|" + mdMongo + "=30"}; !slices.Equal(tcp, want) {
			t.Errorf("TCP route clusters %v, want %v", tcp, want)
		}
		checkMissing(t, v, res.Clusters, "outbound|9000||"+mdGhost, "outbound|27017|v9|"+mdMongo)
		if res.Missing == nil || !res.Missing("outbound|9000||"+mdGhost) {
			t.Error("Resources.Missing is not the View's MissingCluster")
		}
		bare := *res
		bare.Missing = nil
		if err := bare.Consistent(); err == nil || !strings.Contains(err.Error(), "outbound|") {
			t.Errorf("Consistent without Missing = %v, want a missing cluster", err)
		}
		// Through the scope part a sidecar group is made of.
		if _, err := generate(s, p, GroupKey(s, p)); err != nil {
			t.Fatal(err)
		}
	})
}

// checkMissing checks that the View tells wantMissingClusters and extra as
// missing, and that cds holds none of them and none it tells as missing.
func checkMissing(t *testing.T, v *model.View, cds []*clusterv3.Cluster, extra ...string) {
	t.Helper()
	want := append(slices.Clone(wantMissingClusters), extra...)
	has := map[string]bool{}
	for _, c := range cds {
		has[c.GetName()] = true
		if v.MissingCluster(c.GetName()) {
			t.Errorf("cluster %s is in CDS and told as missing", c.GetName())
		}
	}
	for _, n := range want {
		if !v.MissingCluster(n) || has[n] {
			t.Errorf("cluster %s: missing %v, in CDS %v; want missing and not in CDS", n, v.MissingCluster(n), has[n])
		}
	}
}

// mdTCPClusters returns the clusters (with weights) of the tcp_proxy of the
// listener chain with that name.
func mdTCPClusters(t *testing.T, lds []*listenerv3.Listener, chain string) []string {
	t.Helper()
	for _, l := range lds {
		for _, fc := range l.GetFilterChains() {
			if fc.GetName() != chain {
				continue
			}
			for _, f := range fc.GetFilters() {
				tp := &tcpproxyv3.TcpProxy{}
				if f.GetTypedConfig().UnmarshalTo(tp) != nil {
					continue
				}
				if c := tp.GetCluster(); c != "" {
					return []string{c}
				}
				var out []string
				for _, wc := range tp.GetWeightedClusters().GetClusters() {
					out = append(out, wc.GetName()+"="+strconv.Itoa(int(wc.GetWeight())))
				}
				return out
			}
		}
	}
	t.Fatalf("no TCP chain %s", chain)
	return nil
}
