package xds

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
	grpcgen "github.com/vmesh/vmesh/xds/grpc"
)

// The resource types vmesh serves, in push order.
var typeURLs = []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType, NameTableType, WorkloadGroupType}

// shortType names a type URL for logs, metrics and /debug/syncz.
func shortType(typeURL string) string {
	switch typeURL {
	case resourcev3.ListenerType:
		return "LDS"
	case resourcev3.RouteType:
		return "RDS"
	case resourcev3.ClusterType:
		return "CDS"
	case resourcev3.EndpointType:
		return "EDS"
	case NameTableType:
		return "NDS"
	case WorkloadGroupType:
		return "WorkloadGroup"
	}
	return typeURL
}

// Version returns the version_info for config generated from s: "r<store
// revision>", plus "@<short commit>" when the config came from git.
func Version(s *model.Snapshot) string {
	v := "r" + strconv.FormatInt(s.Revision, 10)
	if s.Commit != "" {
		v += "@" + s.Commit
	}
	return v
}

// resource is one generated resource, serialised once and shared by every
// response that carries it.
type resource struct {
	name string
	// msg is the resource as generated; nil for a resource kept only in
	// its serialised form (outboundResource). Read it through message
	// where it may be nil.
	msg proto.Message
	any *anypb.Any
	// hash is the resource's version: a hash of its serialised form.
	hash string
	// refs are the clusters a route configuration names, made on first
	// use (routeRefs).
	refs atomic.Pointer[routeRefs]
}

func newResource(name string, m proto.Message) (*resource, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", name, err)
	}
	return resourceFromBytes(name, m, b), nil
}

// message returns the resource as a message: msg, or decoded from its
// serialised form when only that is kept.
func (r *resource) message() (proto.Message, error) {
	if r.msg != nil {
		return r.msg, nil
	}
	m, err := r.any.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", r.name, err)
	}
	return m, nil
}

// resourceFromBytes is newResource for m serialised as b.
func resourceFromBytes(name string, m proto.Message, b []byte) *resource {
	return &resource{
		name: name,
		msg:  m,
		any:  &anypb.Any{TypeUrl: resourcev3.APITypePrefix + string(m.ProtoReflect().Descriptor().FullName()), Value: b},
		hash: strconv.FormatUint(xxhash.Sum64(b), 36),
	}
}

// generation is the config of one proxy group at one model snapshot. Its
// resource maps are immutable; what the group's kind keeps besides them
// (what it makes on demand, the parts it was composed from) is its part.
type generation struct {
	snap  *model.Snapshot
	proxy *Proxy // the proxy that defined the group
	// kind is the row of the group's kind (kindTable).
	kind    kindRow
	key     string
	version string
	// types holds each type's resources by name. A generation derived
	// from another (update, endpointsOnly, rebase) shares what it does
	// not change, down to parts of these maps (cowmap).
	types map[string]*resourceMap

	mu sync.Mutex
	// markers holds the marker clusters' resources served from this
	// generation, by type and name (see staging.go); guarded by mu.
	markers map[[2]string]*resource

	// part is what the group's kind keeps with it (proxylessPart,
	// sidecarPart); only the kind reads it. It is allocated with the
	// generation (proxylessGeneration, sidecarGeneration).
	part kindPart
}

// takeRefused returns, and resets, how many names g's kind refused to
// make on demand.
func (g *generation) takeRefused() int64 {
	if g.part == nil {
		return 0
	}
	return g.part.takeRefused()
}

// kindPart is what a group's kind keeps with its generation.
type kindPart interface {
	// takeRefused returns, and resets, how many names the kind's lookup
	// refused because the group had made the most it may.
	takeRefused() int64
}

// proxylessPart is what a proxyless group keeps: the resources made on
// demand, whose names only the proxies know.
type proxylessPart struct {
	mu      sync.Mutex
	inbound map[string]*resource
	// hostIndex maps type -> host -> resource names, built on demand for
	// proxyless updates (see hostNames); guarded by mu.
	hostIndex map[string]*cowmap.Map[string, []string]
	// aliases holds the short-name listeners served from this generation
	// (shortNameListener); guarded by mu.
	aliases map[string]alias
	// inboundRefused counts the server listener names not answered
	// because inbound held maxInboundListeners already.
	inboundRefused atomic.Int64
}

func (p *proxylessPart) takeRefused() int64 { return p.inboundRefused.Swap(0) }

// proxylessGeneration is a proxyless group's generation and its part, in
// one allocation.
type proxylessGeneration struct {
	generation
	part proxylessPart
}

// newProxyless returns a proxyless generation of p's group key at s with
// types, and its part.
func newProxyless(s *model.Snapshot, p *Proxy, kind kindRow, key string, types map[string]*resourceMap) (*generation, *proxylessPart) {
	x := &proxylessGeneration{generation: generation{snap: s, proxy: p, kind: kind, key: key, version: Version(s), types: types}}
	x.generation.part = &x.part
	return &x.generation, &x.part
}

// proxylessOf returns a proxyless group's part; nil for another kind's.
func proxylessOf(g *generation) *proxylessPart {
	p, _ := g.part.(*proxylessPart)
	return p
}

// resourceMap is one type's resources by name.
type resourceMap = cowmap.Map[string, *resource]

// maxInboundListeners bounds the server listeners one generation makes on
// demand: a gRPC process serves a handful of ports, a VM's proxies share
// a generation only with identical peers. Names past it are not answered
// (the client sees the listener as missing) and counted.
const maxInboundListeners = 4096

// maxMarkers bounds the marker clusters one generation serves: a client
// asks only for the few vmesh's staged routes name.
const maxMarkers = 256

// get returns g's resource of a type by name, or nil (inbound listeners
// made on demand are lookup's).
func (g *generation) get(typeURL, name string) *resource {
	m := g.types[typeURL]
	if m == nil {
		return nil
	}
	r, _ := m.Get(name)
	return r
}

// count returns how many resources of a type g holds.
func (g *generation) count(typeURL string) int {
	if m := g.types[typeURL]; m != nil {
		return m.Len()
	}
	return 0
}

// generateProxyless builds all resource types for a proxyless gRPC group.
func generateProxyless(s *model.Snapshot, p *Proxy, key string) (*generation, error) {
	kind, err := kindNamed(p.Kind)
	if err != nil {
		return nil, err
	}
	g, gp := newProxyless(s, p, kind, key, make(map[string]*resourceMap, 4))
	gp.inbound = map[string]*resource{}
	v := model.NewView(s, p.Workload())
	gens, err := generatorsFor(v.Workload())
	if err != nil {
		return nil, err
	}
	lds, err := gens.listeners(v)
	if err != nil {
		return nil, err
	}
	rds, err := gens.routes(v)
	if err != nil {
		return nil, err
	}
	cds, err := gens.clusters(v)
	if err != nil {
		return nil, err
	}
	if err := g.add(lds, rds, cds); err != nil {
		return nil, err
	}
	if err := g.generateEDSFrom(v, gens, nil); err != nil {
		return nil, err
	}
	if err := g.addNameTable(v, gens); err != nil {
		return nil, err
	}
	if err := g.addWorkloadGroups(v); err != nil {
		return nil, err
	}
	if err := g.consistent(lds, rds, cds, v.MissingCluster); err != nil {
		return nil, fmt.Errorf("group %s: %w", key, err)
	}
	return g, nil
}

// consistent checks the references between a proxyless group's generated
// resources (Consistent). missing says which clusters routes name on purpose although there is
// none (model.View.MissingCluster).
func (g *generation) consistent(lds []*listenerv3.Listener, rds []*routev3.RouteConfiguration, cds []*clusterv3.Cluster, missing func(string) bool) error {
	eds := make(map[string]bool, g.count(resourcev3.EndpointType))
	for n := range g.types[resourcev3.EndpointType].Keys() {
		eds[n] = true
	}
	return Consistent(lds, rds, cds, eds, missing)
}

// withEndpoints returns a proxyless group's generation for s that shares
// everything but EDS with g: used when only endpoints changed. When the
// endpoint change reaches beyond EDS (a LOGICAL_DNS cluster carries its
// endpoint in CDS; endpoints decide automatic mTLS and the SANs a cluster
// verifies), it generates everything again and reports full.
func (g *generation) withEndpoints(s *model.Snapshot) (n *generation, full bool, err error) {
	v := model.NewView(s, g.proxy.Workload())
	svcs := v.Services()
	for _, svc := range svcs {
		if grpcgen.UsesEDS(svc) && grpcgen.UsesEDS(&model.Service{Resolution: svc.Resolution, Endpoints: prevEndpoints(g.snap, svc)}) {
			continue
		}
		if !model.SameEndpoints(prevEndpoints(g.snap, svc), svc.Endpoints) {
			n, err := generate(s, g.proxy, g.key)
			return n, true, err
		}
	}
	if grpcgen.TLSChanged(g.snap, model.NewView(g.snap, g.proxy.Workload()), v, svcs) {
		// Endpoints decide automatic mTLS and the SANs a cluster verifies.
		n, err := generate(s, g.proxy, g.key)
		return n, true, err
	}
	n, err = g.endpointsOnly(s, v)
	return n, false, err
}

func (g *generation) endpointsOnly(s *model.Snapshot, v *model.View) (*generation, error) {
	gens, err := generatorsFor(v.Workload())
	if err != nil {
		return nil, err
	}
	n, np := newProxyless(s, g.proxy, g.kind, g.key, maps.Clone(g.types))
	gp := proxylessOf(g)
	gp.mu.Lock()
	np.inbound = make(map[string]*resource, len(gp.inbound))
	for k, v := range gp.inbound {
		np.inbound[k] = v
	}
	gp.mu.Unlock()
	if err := n.generateEDSFrom(v, gens, g); err != nil {
		return nil, err
	}
	return n, nil
}

// generateEDSFrom builds a proxyless group's EDS resources. With prev (an
// EDS-only change), assignments of services whose endpoints did not change
// are reused, so only the changed ones are built and serialised again.
func (g *generation) generateEDSFrom(v *model.View, gens generators, prev *generation) error {
	if prev == nil {
		eds, err := gens.endpoints(v)
		if err != nil {
			return err
		}
		m := cowmap.New[string, *resource]().Edit()
		for _, cla := range eds {
			r, err := newResource(cla.GetClusterName(), cla)
			if err != nil {
				return err
			}
			m.Set(r.name, r)
		}
		g.types[resourcev3.EndpointType] = m.Map()
		return nil
	}
	m := cowmap.New[string, *resource]().Edit()
	for _, ref := range v.Clusters() {
		if !grpcgen.UsesEDS(ref.Service) {
			continue
		}
		name := ref.Name()
		if r := prev.get(resourcev3.EndpointType, name); r != nil && model.SameEndpoints(prevEndpoints(prev.snap, ref.Service), ref.Service.Endpoints) {
			m.Set(name, r)
			continue
		}
		r, err := newResource(name, grpcgen.LoadAssignment(ref))
		if err != nil {
			return err
		}
		m.Set(name, r)
	}
	g.types[resourcev3.EndpointType] = m.Map()
	return nil
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

func (g *generation) add(lds []*listenerv3.Listener, rds []*routev3.RouteConfiguration, cds []*clusterv3.Cluster) error {
	edits := map[string]*cowmap.Editor[string, *resource]{}
	for _, t := range []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType} {
		edits[t] = cowmap.New[string, *resource]().Edit()
	}
	put := func(t, name string, msg proto.Message) error {
		r, err := newResource(name, msg)
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
		g.types[t] = e.Map()
	}
	return nil
}

// lookup returns the named resource of a type, generating inbound listeners
// on demand; nil when there is none.
func (g *generation) lookup(typeURL, name string) *resource {
	if r := g.get(typeURL, name); r != nil {
		return r
	}
	if strings.HasPrefix(name, markerPrefix) {
		g.mu.Lock()
		defer g.mu.Unlock()
		k := [2]string{typeURL, name}
		r, ok := g.markers[k]
		if !ok {
			if len(g.markers) >= maxMarkers {
				return nil // a client naming markers vmesh never sent
			}
			r = markerResource(typeURL, name)
			if g.markers == nil {
				g.markers = map[[2]string]*resource{}
			}
			g.markers[k] = r
		}
		return r
	}
	if g.kind.lookup != nil {
		return g.kind.lookup(g, typeURL, name)
	}
	return nil
}

// proxylessLookup makes a proxyless group's resources on demand: the
// server listeners named by their address and the short-name listeners
// (shortNameListener).
func proxylessLookup(g *generation, typeURL, name string) *resource {
	if typeURL == resourcev3.ListenerType && !strings.HasPrefix(name, InboundListenerPrefix) {
		return g.shortNameListener(name)
	}
	if typeURL != resourcev3.ListenerType || len(name) <= len(InboundListenerPrefix) || name[:len(InboundListenerPrefix)] != InboundListenerPrefix {
		return nil
	}
	gp := proxylessOf(g)
	if gp == nil {
		return nil
	}
	gp.mu.Lock()
	defer gp.mu.Unlock()
	if r, ok := gp.inbound[name]; ok {
		return r
	}
	if len(gp.inbound) >= maxInboundListeners {
		// Any address makes a listener: without a bound, one request
		// naming 85,000 of them makes (and keeps) 85,000.
		gp.inboundRefused.Add(1)
		return nil
	}
	var r *resource
	if l, err := InboundListener(g.snap, g.proxy, name); err == nil {
		r, _ = newResource(name, l)
	}
	gp.inbound[name] = r // remember failures too: nil
	return r
}

// maxAliases bounds the short-name listeners one generation makes on
// demand (see shortNameListener).
const maxAliases = 4096

// shortNameListener answers a proxyless client's listener name in a short
// form ("reviews:9080" from namespace default) with the listener of the
// service it stands for (grpcgen.ExpandShortName), under the name asked
// for, as Istio's grpcgen does; nil when it stands for none. Made on first
// request and kept with the generation, like inbound listeners.
func (g *generation) shortNameListener(name string) *resource {
	full, ok := grpcgen.ExpandShortName(name, g.proxy.Namespace)
	if !ok {
		return nil
	}
	target := g.get(resourcev3.ListenerType, full)
	if target == nil {
		return nil
	}
	gp := proxylessOf(g)
	if gp == nil {
		return nil
	}
	gp.mu.Lock()
	defer gp.mu.Unlock()
	if r, ok := gp.aliases[name]; ok && r.target == target {
		return r.resource
	}
	if len(gp.aliases) >= maxAliases {
		return nil
	}
	l := proto.Clone(target.msg).(*listenerv3.Listener)
	l.Name = name
	r, err := newResource(name, l)
	if err != nil {
		return nil
	}
	if gp.aliases == nil {
		gp.aliases = map[string]alias{}
	}
	gp.aliases[name] = alias{resource: r, target: target}
	return r
}

// alias is a short-name listener and the listener it copies.
type alias struct {
	*resource
	target *resource
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
