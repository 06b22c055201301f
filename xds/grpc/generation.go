package grpc

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
)

// part is what a proxyless group keeps with its generation: the
// resources made on demand, whose names only the proxies know.
type part struct {
	mu      sync.Mutex
	inbound map[string]*gen.Resource
	// hostIndex maps type -> host -> resource names, built on demand for
	// updates (see hostNames); guarded by mu.
	hostIndex map[string]*cowmap.Map[string, []string]
	// aliases holds the short-name listeners served from this generation
	// (shortNameListener); guarded by mu.
	aliases map[string]alias
	// inboundRefused counts the server listener names not answered
	// because inbound held MaxInboundListeners already.
	inboundRefused atomic.Int64
}

var _ gen.Part = (*part)(nil)

// TakeRefused returns, and resets, how many server listener names were
// refused.
func (p *part) TakeRefused() (int64, int) { return p.inboundRefused.Swap(0), MaxInboundListeners }

// generation is a proxyless group's generation and its part, in one
// allocation.
type generation struct {
	gen.Generation
	part part
}

// newGeneration returns a proxyless generation of w's group key at s with
// types, and its part.
func newGeneration(s *model.Snapshot, w model.Workload, key string, types map[string]*gen.ResourceMap) (*gen.Generation, *part) {
	x := &generation{Generation: gen.Generation{Snap: s, Workload: w, Key: key, Version: gen.Version(s), Types: types}}
	x.Generation.Part = &x.part
	return &x.Generation, &x.part
}

// partOf returns a proxyless group's part; nil for another kind's.
func partOf(g *gen.Generation) *part {
	p, _ := g.Part.(*part)
	return p
}

// MaxInboundListeners bounds the server listeners one generation makes on
// demand: a gRPC process serves a handful of ports, a VM's proxies share
// a generation only with identical peers. Names past it are not answered
// (the client sees the listener as missing) and counted.
const MaxInboundListeners = 4096

// generate builds all resource types for a proxyless gRPC group.
func generate(s *model.Snapshot, w model.Workload, key string) (*gen.Generation, error) {
	return generateShared(s, w, key, nil)
}

// generateShared is generate taking the assignments other groups made at
// s from share (nil: none shared).
func generateShared(s *model.Snapshot, w model.Workload, key string, share *edsShare) (*gen.Generation, error) {
	g, gp := newGeneration(s, w, key, make(map[string]*gen.ResourceMap, 4))
	gp.inbound = map[string]*gen.Resource{}
	v := model.NewView(s, w)
	lds, err := Listeners(v)
	if err != nil {
		return nil, err
	}
	rds, err := Routes(v)
	if err != nil {
		return nil, err
	}
	cds, err := Clusters(v)
	if err != nil {
		return nil, err
	}
	if err := add(g, lds, rds, cds); err != nil {
		return nil, err
	}
	if err := generateEDSFrom(g, v, nil, share); err != nil {
		return nil, err
	}
	if err := addNameTable(g, v); err != nil {
		return nil, err
	}
	if err := addWorkloadGroups(g, v); err != nil {
		return nil, err
	}
	if err := consistent(g, lds, rds, cds, v.MissingCluster); err != nil {
		return nil, fmt.Errorf("group %s: %w", key, err)
	}
	return g, nil
}

// consistent checks the references between a proxyless group's generated
// resources (Consistent). missing says which clusters routes name on
// purpose although there is none (model.View.MissingCluster).
func consistent(g *gen.Generation, lds []*listenerv3.Listener, rds []*routev3.RouteConfiguration, cds []*clusterv3.Cluster, missing func(string) bool) error {
	eds := make(map[string]bool, g.Count(resourcev3.EndpointType))
	for n := range g.Types[resourcev3.EndpointType].Keys() {
		eds[n] = true
	}
	return Consistent(lds, rds, cds, eds, missing)
}

// withEndpoints returns a proxyless group's generation for s that shares
// everything but EDS with g: used when only endpoints changed. When the
// endpoint change reaches beyond EDS (a LOGICAL_DNS cluster carries its
// endpoint in CDS; endpoints decide automatic mTLS and the SANs a cluster
// verifies), it generates everything again and reports full.
func withEndpoints(g *gen.Generation, s *model.Snapshot) (n *gen.Generation, full bool, err error) {
	return withEndpointsShared(g, s, nil)
}

// withEndpointsShared is withEndpoints taking the assignments other groups
// made at s from share.
func withEndpointsShared(g *gen.Generation, s *model.Snapshot, share *edsShare) (n *gen.Generation, full bool, err error) {
	v := model.NewView(s, g.Workload)
	svcs := v.Services()
	for _, svc := range svcs {
		if UsesEDS(svc) && UsesEDS(&model.Service{Resolution: svc.Resolution, Endpoints: prevEndpoints(g.Snap, svc)}) {
			continue
		}
		if !model.SameEndpoints(prevEndpoints(g.Snap, svc), svc.Endpoints) {
			n, err := generateShared(s, g.Workload, g.Key, share)
			return n, true, err
		}
	}
	if TLSChanged(g.Snap, model.NewView(g.Snap, g.Workload), v, svcs) {
		// Endpoints decide automatic mTLS and the SANs a cluster verifies.
		n, err := generateShared(s, g.Workload, g.Key, share)
		return n, true, err
	}
	n, err = endpointsOnly(g, s, v, share)
	return n, false, err
}

func endpointsOnly(g *gen.Generation, s *model.Snapshot, v *model.View, share *edsShare) (*gen.Generation, error) {
	n, np := newGeneration(s, g.Workload, g.Key, maps.Clone(g.Types))
	gp := partOf(g)
	gp.mu.Lock()
	np.inbound = make(map[string]*gen.Resource, len(gp.inbound))
	for k, v := range gp.inbound {
		np.inbound[k] = v
	}
	gp.mu.Unlock()
	if err := generateEDSFrom(n, v, g, share); err != nil {
		return nil, err
	}
	return n, nil
}

// generateEDSFrom builds a proxyless group's EDS resources into g. With
// prev (an EDS-only change), assignments of services whose endpoints did
// not change are reused, so only the changed ones are built and
// serialised again; the others come from share when another group made
// the same assignment at the same snapshot.
func generateEDSFrom(g *gen.Generation, v *model.View, prev *gen.Generation, share *edsShare) error {
	m := cowmap.New[string, *gen.Resource]().Edit()
	for _, ref := range v.Clusters() {
		if !UsesEDS(ref.Service) {
			continue
		}
		name := ref.Name()
		if prev != nil {
			if r := prev.Get(resourcev3.EndpointType, name); r != nil && model.SameEndpoints(prevEndpoints(prev.Snap, ref.Service), ref.Service.Endpoints) {
				m.Set(name, r)
				continue
			}
		}
		r, err := share.assignment(ref)
		if err != nil {
			return err
		}
		m.Set(name, r)
	}
	g.Types[resourcev3.EndpointType] = m.Map()
	return nil
}

// edsShare holds the EDS resources proxyless groups made at one model
// snapshot, so that groups seeing a cluster alike (the same service, port
// and subset endpoints, no locality load balancing of their own) share its
// assignment instead of each building and serialising it: with one group
// per namespace or per server workload, a connect storm or an endpoint
// change built every assignment once per group. Safe for concurrent use;
// a nil share shares nothing.
type edsShare struct {
	snap *model.Snapshot
	mu   sync.Mutex
	made map[edsKey]sharedAssignment
}

// edsKey names an assignment in an edsShare: the snapshot's service and
// the cluster's name (port and subset).
type edsKey struct {
	svc  *model.Service
	name string
}

// sharedAssignment is an assignment an edsShare holds and the subset
// labels it was built for (a subset's labels come from the
// DestinationRule the group sees, which may differ between namespaces).
type sharedAssignment struct {
	subset map[string]string
	r      *gen.Resource
}

func newEDSShare(s *model.Snapshot) *edsShare {
	return &edsShare{snap: s, made: map[edsKey]sharedAssignment{}}
}

// assignment returns the EDS resource of ref: the one another group made
// alike, or a new one (kept for the next group).
func (e *edsShare) assignment(ref model.Cluster) (*gen.Resource, error) {
	if e == nil || ref.LocalityLB != nil {
		return edsResource(ref)
	}
	k := edsKey{svc: ref.Service, name: ref.Name()}
	e.mu.Lock()
	a, ok := e.made[k]
	e.mu.Unlock()
	if ok && maps.Equal(a.subset, ref.SubsetLabels) {
		return a.r, nil
	}
	r, err := edsResource(ref)
	if err != nil {
		return nil, err
	}
	if !ok {
		e.mu.Lock()
		e.made[k] = sharedAssignment{subset: ref.SubsetLabels, r: r}
		e.mu.Unlock()
	}
	return r, nil
}

// edsResource builds and serialises ref's assignment, keeping only its
// serialised form: nothing reads a proxyless assignment's message again
// (Resource.Message decodes it for the debug views).
func edsResource(ref model.Cluster) (*gen.Resource, error) {
	r, err := gen.NewResource(ref.Name(), LoadAssignment(ref))
	if err != nil {
		return nil, err
	}
	r.Msg = nil
	return r, nil
}

// prevEndpoints returns the endpoints svc had in an earlier snapshot; nil
// when it did not exist.
func prevEndpoints(s *model.Snapshot, svc *model.Service) []*model.Endpoint {
	for _, o := range s.ServicesForHost(svc.Hostname) {
		if o.Namespace == svc.Namespace {
			return o.Endpoints
		}
	}
	return nil
}

func add(g *gen.Generation, lds []*listenerv3.Listener, rds []*routev3.RouteConfiguration, cds []*clusterv3.Cluster) error {
	edits := map[string]*cowmap.Editor[string, *gen.Resource]{}
	for _, t := range []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType} {
		edits[t] = cowmap.New[string, *gen.Resource]().Edit()
	}
	put := func(t, name string, msg proto.Message) error {
		r, err := gen.NewResource(name, msg)
		if err != nil {
			return err
		}
		edits[t].Set(name, r)
		return nil
	}
	for _, l := range lds {
		if err := put(resourcev3.ListenerType, l.GetName(), l); err != nil {
			return err
		}
	}
	for _, r := range rds {
		if err := put(resourcev3.RouteType, r.GetName(), r); err != nil {
			return err
		}
	}
	for _, c := range cds {
		if err := put(resourcev3.ClusterType, c.GetName(), c); err != nil {
			return err
		}
	}
	for t, e := range edits {
		g.Types[t] = e.Map()
	}
	return nil
}

// Lookup makes a proxyless group's resources on demand: the server
// listeners named by their address and the short-name listeners
// (shortNameListener).
func (gp *part) Lookup(g *gen.Generation, typeURL, name string) *gen.Resource {
	if typeURL == resourcev3.ListenerType && !strings.HasPrefix(name, InboundListenerPrefix) {
		return shortNameListener(g, gp, name)
	}
	if typeURL != resourcev3.ListenerType || len(name) <= len(InboundListenerPrefix) || name[:len(InboundListenerPrefix)] != InboundListenerPrefix {
		return nil
	}
	gp.mu.Lock()
	defer gp.mu.Unlock()
	if r, ok := gp.inbound[name]; ok {
		return r
	}
	if len(gp.inbound) >= MaxInboundListeners {
		// Any address makes a listener: without a bound, one request
		// naming 85,000 of them makes (and keeps) 85,000.
		gp.inboundRefused.Add(1)
		return nil
	}
	var r *gen.Resource
	if l, err := InboundListener(model.NewView(g.Snap, g.Workload), name); err == nil {
		r, _ = gen.NewResource(name, l)
	}
	gp.inbound[name] = r // remember failures too: nil
	return r
}

// maxAliases bounds the short-name listeners one generation makes on
// demand (see shortNameListener).
const maxAliases = 4096

// shortNameListener answers a proxyless client's listener name in a short
// form ("reviews:9080" from namespace default) with the listener of the
// service it stands for (ExpandShortName), under the name asked for, as
// Istio's grpcgen does; nil when it stands for none. Made on first
// request and kept with the generation, like inbound listeners.
func shortNameListener(g *gen.Generation, gp *part, name string) *gen.Resource {
	full, ok := ExpandShortName(name, g.Workload.Namespace)
	if !ok {
		return nil
	}
	target := g.Get(resourcev3.ListenerType, full)
	if target == nil {
		return nil
	}
	gp.mu.Lock()
	defer gp.mu.Unlock()
	if r, ok := gp.aliases[name]; ok && r.target == target {
		return r.Resource
	}
	if len(gp.aliases) >= maxAliases {
		return nil
	}
	l := proto.Clone(target.Msg).(*listenerv3.Listener)
	l.Name = name
	r, err := gen.NewResource(name, l)
	if err != nil {
		return nil
	}
	if gp.aliases == nil {
		gp.aliases = map[string]alias{}
	}
	gp.aliases[name] = alias{Resource: r, target: target}
	return r
}

// alias is a short-name listener and the listener it copies.
type alias struct {
	*gen.Resource
	target *gen.Resource
}

// Consistent checks the references between generated resources: every RDS
// name an LDS listener uses is in rds, every cluster a route names is in
// cds or missing, and every EDS cluster has an assignment in eds (when
// eds is not nil). missing says which clusters the generators may name for
// route destinations the proxy has no cluster for (model.View.MissingCluster
// of the View they read; nil: none): a route naming any other absent
// cluster is a generator's error.
func Consistent(lds []*listenerv3.Listener, rds []*routev3.RouteConfiguration, cds []*clusterv3.Cluster, eds map[string]bool, missing func(string) bool) error {
	routes := make(map[string]bool, len(rds))
	for _, r := range rds {
		routes[r.GetName()] = true
	}
	clusters := make(map[string]bool, len(cds))
	for _, c := range cds {
		clusters[c.GetName()] = true
	}
	hasEDS := func(n string) bool { return eds[n] }
	if eds == nil {
		hasEDS = func(string) bool { return true }
	}
	return consistentWith(lds, rds, cds, func(n string) bool { return routes[n] }, func(n string) bool { return clusters[n] || missing != nil && missing(n) }, hasEDS)
}

// consistentWith checks that the references of lds, rds and cds resolve
// by the given lookups (cluster answers true for the clusters routes may
// name: those that exist and the deliberately missing ones).
func consistentWith(lds []*listenerv3.Listener, rds []*routev3.RouteConfiguration, cds []*clusterv3.Cluster, route, cluster, eds func(string) bool) error {
	routes, clusters := route, cluster
	for _, c := range cds {
		if c.GetType() == clusterv3.Cluster_EDS && !eds(c.GetEdsClusterConfig().GetServiceName()) {
			return fmt.Errorf("cluster %s: no endpoints resource %q", c.GetName(), c.GetEdsClusterConfig().GetServiceName())
		}
	}
	for _, l := range lds {
		if l.GetApiListener() == nil {
			continue
		}
		hcm := &hcmv3.HttpConnectionManager{}
		if err := l.GetApiListener().GetApiListener().UnmarshalTo(hcm); err != nil {
			return fmt.Errorf("listener %s: %w", l.GetName(), err)
		}
		if n := hcm.GetRds().GetRouteConfigName(); n != "" && !routes(n) {
			return fmt.Errorf("listener %s: route configuration %q missing", l.GetName(), n)
		}
	}
	for _, r := range rds {
		for _, vh := range r.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				a := rt.GetRoute()
				if a == nil {
					continue
				}
				if c := a.GetCluster(); c != "" && !clusters(c) {
					return fmt.Errorf("route %s/%s: cluster %q missing", r.GetName(), rt.GetName(), c)
				}
				for _, wc := range a.GetWeightedClusters().GetClusters() {
					if !clusters(wc.GetName()) {
						return fmt.Errorf("route %s/%s: cluster %q missing", r.GetName(), rt.GetName(), wc.GetName())
					}
				}
			}
		}
	}
	return nil
}
