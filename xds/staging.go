package xds

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/xds/gen"
	"github.com/vmesh/vmesh/xds/translate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Make-before-break for proxyless gRPC clients.
//
// grpc-go applies a new route configuration in two steps that RPCs fall
// between: the channel first swaps in the config selector that picks a
// cluster for each RPC, then hands the new cluster list to its
// xds_cluster_manager balancer. An RPC routed to a cluster the balancer
// does not have yet fails at once, wait-for-ready or not: "unknown
// cluster selected for RPC" (UNAVAILABLE, not retried). grpc-go waits for
// the CDS and EDS of a route's clusters before applying the route (gRFC
// A74), but not for its own balancer, so every route change that names a
// new cluster (a canary's first weight, a cut-over to another host, a
// destination whose weight comes back from 0) fails the RPCs that start
// in that window.
//
// vmesh therefore never sends a proxyless state-of-the-world client a
// route configuration naming a cluster that the configuration the client
// holds under that name does not name already. It first sends what the
// client holds plus one route that matches no RPC (warmRoute) and names
// the new clusters and a marker cluster, a name never used before that
// vmesh serves as an empty EDS cluster: the client subscribes to them,
// builds their balancers and connects, while its RPCs keep their old
// routes. grpc-go applies that configuration once it holds the CDS and
// EDS of all its clusters, and it asks for the marker only after it has
// processed the configuration, so once the stream has asked for the
// marker and holds the current CDS and EDS of the marker and of every
// cluster of the new routes, the client's balancer has them, and the new
// routes follow. (The marker is what makes this observable: a cluster the
// client was just dropping may still look subscribed, its unsubscription
// and new subscription not yet read from the stream.)
//
// Endpoints get the symmetric rule (break after make): EDS changes of a
// cluster that the new routes do not use wait until a route uses it again
// (or the client drops it), so providers leaving together with the route
// that used them do not empty a cluster under RPCs still routed to it,
// even RPCs routed just before the client applied the new routes.
//
// The state is per stream (stagedStream) and is kept under cache.mu.
// Another type's subscription of the stream is read only while that
// type's watch is open: the stream loop changes a subscription
// only between a response and the next request of its type.

// warmRouteName names the route that makes a client build the balancers
// of clusters before any route sends RPCs to them.
const warmRouteName = "vmesh.io/warm"

// warmHeader is the header whose presence and absence warmRoute's match
// requires at once: no RPC can match it.
const warmHeader = "x-vmesh-warm"

// markerPrefix starts the names of marker clusters: markerPrefix, a
// process id, "/", a sequence number.
const markerPrefix = "vmesh.io/warm/"

// stagedStream is what the cache knows of one proxyless SotW stream.
type stagedStream struct {
	// open is the stream's open watch of each type.
	open map[string]*watch
	// routes holds, per route configuration name, the versions the
	// client may hold: the one it ACKed last, then those sent since.
	routes map[string][]*gen.Resource
	// waiting says, per type, that the open watch holds something back.
	waiting map[string]bool
	// warming are the route names whose last version sent is a warming
	// one, for /debug/syncz.
	warming map[string]bool
	// markers are the marker clusters of the warming versions the stream
	// may hold, and whether the stream has asked for each.
	markers map[string]bool
	// cds says the stream has subscribed to clusters: one that does not
	// (a stream of one type, as in some tests) cannot be staged.
	cds bool
}

// stagedFor returns w's stream state when w's stream is staged (state of
// the world, of a kind whose row says staged: proxyless gRPC), creating it
// when create is set; else nil.
func (c *cache) stagedFor(w *watch, create bool) *stagedStream {
	if w.sotw == nil || !c.kindFor(w.proxy.Kind).row.Staged {
		return nil
	}
	st := c.staged[w.sotw]
	if st == nil && create {
		st = &stagedStream{open: map[string]*watch{}, routes: map[string][]*gen.Resource{}, waiting: map[string]bool{}, warming: map[string]bool{}, markers: map[string]bool{}}
		c.staged[w.sotw] = st
	}
	return st
}

// settle records what the client holds of its route configurations, on
// its RDS request: the versions sent before the one it holds are gone, and
// so are the markers no version it may hold names.
func (st *stagedStream) settle(held map[string]string) {
	for n, vs := range st.routes {
		h, ok := held[n]
		if !ok {
			delete(st.routes, n)
			delete(st.warming, n)
			continue
		}
		for i := len(vs) - 1; i >= 0; i-- {
			if vs[i].Hash == h {
				st.routes[n] = vs[i : i+1 : i+1]
				break
			}
		}
	}
	for m := range st.markers {
		used := false
		for _, vs := range st.routes {
			for _, r := range vs {
				used = used || routeRefs(r).Marker == m
			}
		}
		if !used {
			delete(st.markers, m)
		}
	}
}

// asked records the markers a CDS request of the stream names.
func (st *stagedStream) asked(names map[string]struct{}) {
	st.cds = true
	for m, seen := range st.markers {
		if _, ok := names[m]; ok && !seen {
			st.markers[m] = true
		}
	}
}

// version returns the version of route configuration name whose hash is
// h, when the stream may hold it.
func (st *stagedStream) version(name, h string) *gen.Resource {
	if h == "" {
		return nil
	}
	for _, r := range st.routes[name] {
		if r.Hash == h {
			return r
		}
	}
	return nil
}

// sent records route configurations sent to the stream.
func (st *stagedStream) sent(rs []*gen.Resource, warming map[string]bool) {
	for _, r := range rs {
		vs := st.routes[r.Name]
		if len(vs) >= 8 { // a client that never ACKs: keep the oldest, the held one
			vs = append(vs[:1], vs[2:]...)
		}
		st.routes[r.Name] = append(vs, r)
		if warming[r.Name] {
			st.warming[r.Name] = true
		} else {
			delete(st.warming, r.Name)
		}
	}
}

// withheldEDS returns the clusters whose EDS changes the stream must not
// get yet (break after make): those a route version the client may hold
// sends RPCs to and g's routes of the same names do not, and those whose
// endpoints the client holds (held) although none of g's routes uses them.
// An RPC the client routed to such a cluster just before its routes
// changed may still be picking an endpoint there after the client ACKed
// the new routes, so emptying the cluster (its providers leaving with the
// route that used it) would fail that RPC ("no targets to pick from"). The
// client unsubscribes from the cluster once no RPC uses it; until then its
// endpoints stay as they were, and a route that names it again first
// makes the client hold its current endpoints (stageRoute). Markers are
// never withheld.
func (st *stagedStream) withheldEDS(g *gen.Generation, held map[string]string) map[string]bool {
	if len(st.routes) == 0 {
		return nil
	}
	var liveSet map[string]bool // the clusters g's routes use, built on first need
	live := func(cl string) bool {
		if liveSet == nil {
			liveSet = map[string]bool{}
			for n := range st.routes {
				if r := g.Get(resourcev3.RouteType, n); r != nil {
					maps.Copy(liveSet, routeRefs(r).Used)
				}
			}
		}
		return liveSet[cl]
	}
	var out map[string]bool
	hold := func(cl string) {
		if out[cl] || strings.HasPrefix(cl, markerPrefix) || live(cl) {
			return
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[cl] = true
	}
	for _, vs := range st.routes {
		for _, r := range vs {
			for cl := range routeRefs(r).Used {
				hold(cl)
			}
		}
	}
	for cl := range held {
		hold(cl)
	}
	return out
}

// holdsClusters reports whether the stream holds g's CDS and EDS resource
// of every cluster in clusters. It knows only while the stream's CDS and
// EDS watches are open; otherwise it answers false, and the next request
// of those types asks again.
func (st *stagedStream) holdsClusters(g *gen.Generation, clusters map[string]bool) bool {
	cw, ew := st.open[resourcev3.ClusterType], st.open[resourcev3.EndpointType]
	if cw == nil {
		return false
	}
	cds := cw.sub.ReturnedResources()
	var eds map[string]string
	if ew != nil {
		eds = ew.sub.ReturnedResources()
	}
	for cl := range clusters {
		r := lookup(g, resourcev3.ClusterType, cl)
		if r == nil {
			// A route destination g has no cluster for
			// (model.View.RouteCluster): nothing to hold.
			continue
		}
		if cds[cl] != r.Hash {
			return false
		}
		if e := lookup(g, resourcev3.EndpointType, cl); e != nil && (eds == nil || eds[cl] != e.Hash) {
			return false
		}
	}
	return true
}

// stageRoute returns what to send the stream for route configuration x
// of g, which differs from the version the stream holds (hash held): x
// itself; or, when x names clusters the held version does not, the held
// version with a warming route naming them; or nil when x must wait for
// the stream to hold its clusters.
func (c *cache) stageRoute(st *stagedStream, g *gen.Generation, x *gen.Resource, held string) *gen.Resource {
	h := st.version(x.Name, held)
	if h == nil || !st.cds {
		// The client holds nothing under this name (a new channel has no
		// RPCs yet), or a version this stream state has forgotten, or the
		// stream does not fetch clusters.
		return x
	}
	xr, hr := routeRefs(x), routeRefs(h)
	for cl := range xr.Used {
		// A cluster g does not have (a route destination the proxy has no
		// cluster for) has no balancer to build first: its RPCs fail
		// either way.
		if !hr.Used[cl] && !hr.Warm[cl] && lookup(g, resourcev3.ClusterType, cl) != nil {
			w := c.warmedRoute(g, h, x)
			if w != nil {
				st.markers[routeRefs(w).Marker] = false
				return w
			}
			return x
		}
	}
	need := xr.Used
	if m := hr.Marker; m != "" {
		if !st.markers[m] {
			return nil
		}
		need = maps.Clone(need)
		need[m] = true
	}
	if st.holdsClusters(g, need) {
		return x
	}
	return nil
}

// respondStagedLocked answers a staged stream's RDS or EDS watch from g,
// sending each subscribed resource whose version the stream does not hold
// as stageRoute (RDS) and withheldEDS (EDS) allow. force answers even when
// there is nothing to send (the stream's first request). Callers hold
// c.mu.
func (c *cache) respondStagedLocked(w *watch, g *gen.Generation, st *stagedStream, force bool, changed time.Time) bool {
	w.seen = g
	held := w.sub.ReturnedResources()
	var gone map[string]bool
	if w.typeURL == resourcev3.EndpointType {
		gone = st.withheldEDS(g, held)
	}
	var send []*gen.Resource
	var removed []string
	var warming map[string]bool
	waiting, altered := false, false
	for n := range w.sub.SubscribedResources() {
		r := lookup(g, w.typeURL, n)
		if r == nil {
			if _, ok := held[n]; ok && !gone[n] {
				removed = append(removed, n)
			}
			continue
		}
		if held[n] == r.Hash {
			continue
		}
		if gone[n] {
			waiting = true
			continue
		}
		if w.typeURL == resourcev3.RouteType {
			out := c.stageRoute(st, g, r, held[n])
			if out == nil || out.Hash == held[n] {
				waiting = true
				continue
			}
			if out != r {
				altered = true
				if warming == nil {
					warming = map[string]bool{}
				}
				warming[n] = true
			}
			r = out
		}
		send = append(send, r)
	}
	if waiting {
		// Examine the watch again at every push and request of the stream.
		st.waiting[w.typeURL] = true
		w.seen = nil
	} else {
		delete(st.waiting, w.typeURL)
	}
	if len(send) == 0 && !force {
		return false
	}
	if held == nil {
		held = map[string]string{}
	}
	u := &heldUpdate{held: held, set: send, removed: removed}
	var info *routeStaging
	if w.typeURL == resourcev3.RouteType {
		was := len(st.warming)
		st.sent(send, warming)
		if was > 0 || len(st.warming) > 0 {
			info = &routeStaging{warming: slices.Sorted(maps.Keys(st.warming))}
		}
	}
	if !c.sendSotWLocked(w, g, send, held, u, info, changed) {
		return false
	}
	if waiting || altered {
		// The stream does not hold g's view: its next request must be
		// compared resource by resource.
		c.sent[w.key()].gen = nil
	}
	return true
}

// retryStagedLocked examines a staged stream's waiting RDS and EDS watches
// (but the request's own, just examined) again after request w of the
// stream changed what it holds. Callers hold c.mu.
func (c *cache) retryStagedLocked(st *stagedStream, req *watch) {
	if c.snap == nil {
		return
	}
	for _, t := range []string{resourcev3.RouteType, resourcev3.EndpointType} {
		w := st.open[t]
		if w == nil || w == req || !st.waiting[t] {
			continue
		}
		if g := c.gens[w.groupKey(c.snap)]; g != nil {
			c.respondStagedLocked(w, g, st, false, time.Time{})
		}
	}
}

// routeRefs returns the clusters r, a route configuration, names: in the
// routes that take RPCs, and in the warming route (warmRouteName), whose
// marker cluster is the one named with markerPrefix. Made once per
// resource.
func routeRefs(r *gen.Resource) *gen.RouteRefs {
	if p := r.Refs.Load(); p != nil {
		return p
	}
	p := &gen.RouteRefs{Used: map[string]bool{}, Warm: map[string]bool{}}
	rc, _ := r.Msg.(*routev3.RouteConfiguration)
	for _, vh := range rc.GetVirtualHosts() {
		for _, rt := range vh.GetRoutes() {
			into := p.Used
			if rt.GetName() == warmRouteName {
				into = p.Warm
			}
			a := rt.GetRoute()
			if cl := a.GetCluster(); cl != "" {
				into[cl] = true
			}
			for _, wc := range a.GetWeightedClusters().GetClusters() {
				into[wc.GetName()] = true
			}
		}
	}
	for cl := range p.Warm {
		if strings.HasPrefix(cl, markerPrefix) {
			p.Marker = cl
		}
	}
	r.Refs.Store(p)
	return p
}

// markerSeq numbers marker clusters; markerProcess tells this process's
// from those a client may still hold from another vmesh process.
var (
	markerSeq     atomic.Uint64
	markerProcess = func() string {
		var b [4]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
)

// warmedRoute returns h, a route configuration a client holds, with a
// warming route (in place of h's own) naming the clusters of x that h's
// routes do not use and g has, and a new marker cluster; nil if it cannot
// be made.
func (c *cache) warmedRoute(g *gen.Generation, h, x *gen.Resource) *gen.Resource {
	hr := routeRefs(h)
	var add []string
	for cl := range routeRefs(x).Used {
		if !hr.Used[cl] && lookup(g, resourcev3.ClusterType, cl) != nil {
			add = append(add, cl)
		}
	}
	slices.Sort(add)
	add = append(add, markerPrefix+markerProcess+"/"+strconv.FormatUint(markerSeq.Add(1), 10))
	rc := proto.Clone(h.Msg).(*routev3.RouteConfiguration)
	for _, vh := range rc.GetVirtualHosts() {
		vh.Routes = slices.DeleteFunc(vh.Routes, func(rt *routev3.Route) bool { return rt.GetName() == warmRouteName })
		vh.Routes = append(vh.Routes, warmRoute(add))
	}
	r, err := gen.NewResource(h.Name, rc)
	if err != nil {
		c.logger.Error("making a warming route configuration", "route", h.Name, "error", err)
		return nil
	}
	return r
}

// markerResource returns the CDS or EDS resource of a marker cluster: an
// EDS cluster without endpoints.
func markerResource(typeURL, name string) *gen.Resource {
	var m proto.Message
	switch typeURL {
	case resourcev3.ClusterType:
		m = &clusterv3.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: translate.ADSConfigSource(), ServiceName: name},
		}
	case resourcev3.EndpointType:
		m = &endpointv3.ClusterLoadAssignment{ClusterName: name}
	default:
		return nil
	}
	r, _ := gen.NewResource(name, m)
	return r
}

// warmRoute is a route naming clusters that no RPC can match: it requires
// warmHeader to be present and absent.
func warmRoute(clusters []string) *routev3.Route {
	a := &routev3.RouteAction{}
	if len(clusters) == 1 {
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: clusters[0]}
	} else {
		wc := &routev3.WeightedCluster{}
		for _, cl := range clusters {
			wc.Clusters = append(wc.Clusters, &routev3.WeightedCluster_ClusterWeight{Name: cl, Weight: wrapperspb.UInt32(1)})
		}
		a.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	return &routev3.Route{
		Name: warmRouteName,
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
			Headers: []*routev3.HeaderMatcher{
				{Name: warmHeader, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}},
				{Name: warmHeader, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}, InvertMatch: true},
			},
		},
		Action: &routev3.Route_Route{Route: a},
	}
}

// routeStaging travels with an RDS response to /debug/syncz: the route
// configurations the stream holds in their warming form once the
// response is applied.
type routeStaging struct {
	warming []string
}

type routeStagingKey struct{}

// withRouteStaging returns a context carrying s.
func withRouteStaging(s *routeStaging) context.Context {
	if s == nil {
		return context.Background()
	}
	return context.WithValue(context.Background(), routeStagingKey{}, s)
}

// routeStagingFrom returns the routeStaging a response's context carries.
func routeStagingFrom(ctx context.Context) *routeStaging {
	s, _ := ctx.Value(routeStagingKey{}).(*routeStaging)
	return s
}
