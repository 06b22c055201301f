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
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// routeTo is a route configuration with one route splitting its calls
// evenly between clusters.
func routeTo(t *testing.T, clusters ...string) *gen.Resource {
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
	r, err := gen.NewResource(rc.GetName(), rc)
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
	g := withClusters(t, "A", "B", "C")
	held := routeTo(t, "A")
	next := routeTo(t, "A", "B")
	w := c.warmedRoute(g, held, next)
	if w == nil {
		t.Fatal("no warming route configuration")
	}
	validAll(t, w.Msg)
	refs := routeRefs(w)
	if !maps.Equal(refs.Used, map[string]bool{"A": true}) {
		t.Errorf("routes that take RPCs name %v, want the held ones (A)", slices.Sorted(maps.Keys(refs.Used)))
	}
	if !refs.Warm["B"] || len(refs.Warm) != 2 || !strings.HasPrefix(refs.Marker, markerPrefix) || !refs.Warm[refs.Marker] {
		t.Errorf("warming route names %v (marker %q), want B and a marker", slices.Sorted(maps.Keys(refs.Warm)), refs.Marker)
	}
	routes := w.Msg.(*routev3.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 2 || !proto.Equal(routes[0], held.Msg.(*routev3.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()[0]) || routes[1].GetName() != warmRouteName {
		t.Fatalf("routes = %v, want the held route then %s", routes, warmRouteName)
	}
	// No RPC matches: the header must be present and absent.
	hs := routes[1].GetMatch().GetHeaders()
	if len(hs) != 2 || hs[0].GetName() != hs[1].GetName() || !hs[0].GetPresentMatch() || !hs[1].GetPresentMatch() || hs[0].GetInvertMatch() == hs[1].GetInvertMatch() {
		t.Errorf("warming route match %v can match an RPC", routes[1].GetMatch())
	}

	// Warming on top of a warming version: its routes, one warming route,
	// a new marker.
	w2 := c.warmedRoute(g, w, routeTo(t, "B", "C"))
	r2 := routeRefs(w2)
	if !maps.Equal(r2.Used, refs.Used) || !r2.Warm["B"] || !r2.Warm["C"] || len(r2.Warm) != 3 || r2.Marker == refs.Marker {
		t.Errorf("second warming: used %v, warm %v (marker %q after %q)", slices.Sorted(maps.Keys(r2.Used)), slices.Sorted(maps.Keys(r2.Warm)), r2.Marker, refs.Marker)
	}
	if n := len(w2.Msg.(*routev3.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()); n != 2 {
		t.Errorf("second warming has %d routes, want 2", n)
	}

	// The marker is served as an EDS cluster without endpoints.
	g = &gen.Generation{Types: map[string]*gen.ResourceMap{}}
	cds, eds := lookup(g, resourcev3.ClusterType, refs.Marker), lookup(g, resourcev3.EndpointType, refs.Marker)
	if cds == nil || eds == nil {
		t.Fatalf("marker resources: CDS %v, EDS %v", cds, eds)
	}
	validAll(t, cds.Msg)
	validAll(t, eds.Msg)
	if cl := cds.Msg.(*clusterv3.Cluster); cl.GetType() != clusterv3.Cluster_EDS || cl.GetEdsClusterConfig().GetServiceName() != refs.Marker {
		t.Errorf("marker cluster %v", cl)
	}
	if cla := eds.Msg.(*endpointv3.ClusterLoadAssignment); cla.GetClusterName() != refs.Marker || len(cla.GetEndpoints()) != 0 {
		t.Errorf("marker assignment %v", cla)
	}
	if lookup(g, resourcev3.ClusterType, refs.Marker) != cds {
		t.Error("marker resources are made again on every lookup")
	}
}

// withClusters is a proxyless generation holding (empty) clusters of the
// given names.
func withClusters(t *testing.T, names ...string) *gen.Generation {
	t.Helper()
	e := cowmap.New[string, *gen.Resource]().Edit()
	for _, n := range names {
		r, err := gen.NewResource(n, &clusterv3.Cluster{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		e.Set(n, r)
	}
	return &gen.Generation{Types: map[string]*gen.ResourceMap{resourcev3.ClusterType: e.Map()}, Workload: model.Workload{Kind: KindGRPC}}
}

// A route destination the proxy has no cluster for (issue 15 item 6) is
// not warmed: there is no balancer to build before RPCs reach it, which
// fail either way. A route whose only new cluster is such a one goes out
// at once, and one naming it besides a new real cluster warms the real one
// only and then follows without waiting for the missing one.
func TestStagingSkipsMissingClusters(t *testing.T) {
	c := newCache(testLog(t), mustMetrics(t))
	g := withClusters(t, "A", "B")
	held := routeTo(t, "A")
	// The stream holds the CDS of A, the held route's cluster.
	cds := newSotwSubscription([]string{"A", "missing"}, false)
	cds.held["A"] = g.Get(resourcev3.ClusterType, "A").Hash
	st := &stagedStream{
		routes: map[string][]*gen.Resource{held.Name: {held}}, markers: map[string]bool{}, cds: true,
		open: map[string]*watch{resourcev3.ClusterType: {typeURL: resourcev3.ClusterType, sub: cds}},
	}

	x := routeTo(t, "A", "missing")
	if got := c.stageRoute(st, g, x, held.Hash); got != x {
		t.Fatalf("only a missing cluster is new: staged %v, want the route itself", got)
	}

	y := routeTo(t, "A", "B", "missing")
	w := c.stageRoute(st, g, y, held.Hash)
	if w == nil || w == y {
		t.Fatalf("a new real cluster: staged %v, want a warming version", w)
	}
	refs := routeRefs(w)
	if !refs.Warm["B"] || refs.Warm["missing"] || len(refs.Warm) != 2 {
		t.Errorf("warming route names %v, want B and the marker (not the missing cluster)", slices.Sorted(maps.Keys(refs.Warm)))
	}
	if !maps.Equal(refs.Used, routeRefs(held).Used) {
		t.Errorf("warming version routes RPCs to %v, want the held %v", refs.Used, routeRefs(held).Used)
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
	g := &gen.Generation{Types: map[string]*gen.ResourceMap{}}
	routes := cowmap.New[string, *gen.Resource]().Edit()
	next := routeTo(t, "A")
	routes.Set(next.Name, next)
	g.Types[resourcev3.RouteType] = routes.Map()
	marker := markerPrefix + "p/1"
	held := map[string]string{"A": "1", "B": "1", marker: "1"}

	st := &stagedStream{routes: map[string][]*gen.Resource{}}
	if got := st.withheldEDS(g, held); len(got) != 0 {
		t.Errorf("no routes known yet: withheld %v, want none", got)
	}
	st.routes[next.Name] = []*gen.Resource{routeTo(t, "A", "B", "C"), next} // the old version is not ACKed yet
	if got, want := st.withheldEDS(g, held), map[string]bool{"B": true, "C": true}; !maps.Equal(got, want) {
		t.Errorf("old route still held: withheld %v, want %v", got, want)
	}
	st.routes[next.Name] = []*gen.Resource{next} // ACKed
	if got, want := st.withheldEDS(g, held), map[string]bool{"B": true}; !maps.Equal(got, want) {
		t.Errorf("new route ACKed: withheld %v, want %v (the endpoints the client holds of the cluster it left)", got, want)
	}
}
