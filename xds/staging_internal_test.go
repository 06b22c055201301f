package xds

import (
	"maps"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/vmesh/vmesh/internal/cowmap"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// routeTo is a route configuration with one route splitting its calls
// evenly between clusters.
func routeTo(t *testing.T, clusters ...string) *resource {
	t.Helper()
	wc := &routev3.WeightedCluster{}
	for _, c := range clusters {
		wc.Clusters = append(wc.Clusters, &routev3.WeightedCluster_ClusterWeight{Name: c, Weight: wrapperspb.UInt32(1)})
	}
	rc := &routev3.RouteConfiguration{Name: "a.internal:80", VirtualHosts: []*routev3.VirtualHost{{
		Name: "a.internal:80", Domains: []string{"a.internal"},
		Routes: []*routev3.Route{{
			Name:   "0",
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}}},
		}},
	}}}
	r, err := newResource(rc.GetName(), rc)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func validAll(t *testing.T, m proto.Message) {
	t.Helper()
	if err := m.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
		t.Errorf("%T: %v", m, err)
	}
}

// The configuration sent while a client warms new clusters is the one it
// holds, with one more route, last, naming the new clusters and a fresh
// marker; warming again replaces that route rather than adding another.
func TestWarmedRouteKeepsTheHeldRoutes(t *testing.T) {
	c := newCache(testLog(t), mustMetrics(t))
	gen := withClusters(t, "A", "B", "C")
	held := routeTo(t, "A")
	next := routeTo(t, "A", "B")
	w := c.warmedRoute(gen, held, next)
	if w == nil {
		t.Fatal("no warming route configuration")
	}
	validAll(t, w.msg)
	refs := w.routeRefs()
	if !maps.Equal(refs.used, map[string]bool{"A": true}) {
		t.Errorf("routes that take RPCs name %v, want the held ones (A)", slices.Sorted(maps.Keys(refs.used)))
	}
	if !refs.warm["B"] || len(refs.warm) != 2 || !strings.HasPrefix(refs.marker, markerPrefix) || !refs.warm[refs.marker] {
		t.Errorf("warming route names %v (marker %q), want B and a marker", slices.Sorted(maps.Keys(refs.warm)), refs.marker)
	}
	routes := w.msg.(*routev3.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 2 || !proto.Equal(routes[0], held.msg.(*routev3.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()[0]) || routes[1].GetName() != warmRouteName {
		t.Fatalf("routes = %v, want the held route then %s", routes, warmRouteName)
	}
	// No RPC matches: the header must be present and absent.
	hs := routes[1].GetMatch().GetHeaders()
	if len(hs) != 2 || hs[0].GetName() != hs[1].GetName() || !hs[0].GetPresentMatch() || !hs[1].GetPresentMatch() || hs[0].GetInvertMatch() == hs[1].GetInvertMatch() {
		t.Errorf("warming route match %v can match an RPC", routes[1].GetMatch())
	}

	// Warming on top of a warming version: its routes, one warming route,
	// a new marker.
	w2 := c.warmedRoute(gen, w, routeTo(t, "B", "C"))
	r2 := w2.routeRefs()
	if !maps.Equal(r2.used, refs.used) || !r2.warm["B"] || !r2.warm["C"] || len(r2.warm) != 3 || r2.marker == refs.marker {
		t.Errorf("second warming: used %v, warm %v (marker %q after %q)", slices.Sorted(maps.Keys(r2.used)), slices.Sorted(maps.Keys(r2.warm)), r2.marker, refs.marker)
	}
	if n := len(w2.msg.(*routev3.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()); n != 2 {
		t.Errorf("second warming has %d routes, want 2", n)
	}

	// The marker is served as an EDS cluster without endpoints.
	g := &generation{types: map[string]*resourceMap{}}
	cds, eds := g.lookup(resourcev3.ClusterType, refs.marker), g.lookup(resourcev3.EndpointType, refs.marker)
	if cds == nil || eds == nil {
		t.Fatalf("marker resources: CDS %v, EDS %v", cds, eds)
	}
	validAll(t, cds.msg)
	validAll(t, eds.msg)
	if cl := cds.msg.(*clusterv3.Cluster); cl.GetType() != clusterv3.Cluster_EDS || cl.GetEdsClusterConfig().GetServiceName() != refs.marker {
		t.Errorf("marker cluster %v", cl)
	}
	if cla := eds.msg.(*endpointv3.ClusterLoadAssignment); cla.GetClusterName() != refs.marker || len(cla.GetEndpoints()) != 0 {
		t.Errorf("marker assignment %v", cla)
	}
	if g.lookup(resourcev3.ClusterType, refs.marker) != cds {
		t.Error("marker resources are made again on every lookup")
	}
}

// withClusters is a proxyless generation holding (empty) clusters of the
// given names.
func withClusters(t *testing.T, names ...string) *generation {
	t.Helper()
	e := cowmap.New[string, *resource]().Edit()
	for _, n := range names {
		r, err := newResource(n, &clusterv3.Cluster{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		e.Set(n, r)
	}
	return &generation{types: map[string]*resourceMap{resourcev3.ClusterType: e.Map()}, proxy: &Proxy{Kind: KindGRPC}}
}

// A route destination the proxy has no cluster for (issue 15 item 6) is
// not warmed: there is no balancer to build before RPCs reach it, which
// fail either way. A route whose only new cluster is such a one goes out
// at once, and one naming it besides a new real cluster warms the real one
// only and then follows without waiting for the missing one.
func TestStagingSkipsMissingClusters(t *testing.T) {
	c := newCache(testLog(t), mustMetrics(t))
	gen := withClusters(t, "A", "B")
	held := routeTo(t, "A")
	// The stream holds the CDS of A, the held route's cluster.
	cds := newSotwSubscription([]string{"A", "missing"}, false)
	cds.held["A"] = gen.get(resourcev3.ClusterType, "A").hash
	st := &stagedStream{
		routes: map[string][]*resource{held.name: {held}}, markers: map[string]bool{}, cds: true,
		open: map[string]*watch{resourcev3.ClusterType: {typeURL: resourcev3.ClusterType, sub: cds}},
	}

	x := routeTo(t, "A", "missing")
	if got := c.stageRoute(st, gen, x, held.hash); got != x {
		t.Fatalf("only a missing cluster is new: staged %v, want the route itself", got)
	}

	y := routeTo(t, "A", "B", "missing")
	w := c.stageRoute(st, gen, y, held.hash)
	if w == nil || w == y {
		t.Fatalf("a new real cluster: staged %v, want a warming version", w)
	}
	refs := w.routeRefs()
	if !refs.warm["B"] || refs.warm["missing"] || len(refs.warm) != 2 {
		t.Errorf("warming route names %v, want B and the marker (not the missing cluster)", slices.Sorted(maps.Keys(refs.warm)))
	}
	if !maps.Equal(refs.used, held.routeRefs().used) {
		t.Errorf("warming version routes RPCs to %v, want the held %v", refs.used, held.routeRefs().used)
	}
}

func mustMetrics(t *testing.T) *metrics {
	t.Helper()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Break after make: a cluster none of the new routes uses keeps the
// endpoints the client holds, both while the client may still hold a route
// that uses it and after it ACKed routes that do not (RPCs routed just
// before may still be picking an endpoint there); markers, the clusters
// the new routes use, and a stream that holds no routes yet are never held
// back.
func TestWithheldEDS(t *testing.T) {
	g := &generation{types: map[string]*resourceMap{}}
	routes := cowmap.New[string, *resource]().Edit()
	next := routeTo(t, "A")
	routes.Set(next.name, next)
	g.types[resourcev3.RouteType] = routes.Map()
	marker := markerPrefix + "p/1"
	held := map[string]string{"A": "1", "B": "1", marker: "1"}

	st := &stagedStream{routes: map[string][]*resource{}}
	if got := st.withheldEDS(g, held); len(got) != 0 {
		t.Errorf("no routes known yet: withheld %v, want none", got)
	}
	st.routes[next.name] = []*resource{routeTo(t, "A", "B", "C"), next} // the old version is not ACKed yet
	if got, want := st.withheldEDS(g, held), map[string]bool{"B": true, "C": true}; !maps.Equal(got, want) {
		t.Errorf("old route still held: withheld %v, want %v", got, want)
	}
	st.routes[next.name] = []*resource{next} // ACKed
	if got, want := st.withheldEDS(g, held), map[string]bool{"B": true}; !maps.Equal(got, want) {
		t.Errorf("new route ACKed: withheld %v, want %v (the endpoints the client holds of the cluster it left)", got, want)
	}
}
