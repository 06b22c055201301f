package xds

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
	grpcgen "github.com/vmesh/vmesh/xds/grpc"
	"google.golang.org/protobuf/proto"
)

// incremental reports whether a proxyless group's generation can be
// brought from its snapshot to the next one by update rather than
// generated again: its inputs differ only in host-bound config.
func (g *generation) incremental(d *model.Diff) bool {
	return d != nil && !d.Global
}

// update returns the generation for snapshot s, given what differs from
// g's snapshot: the resources of the hosts whose inputs differ (see
// grpc.AffectedHosts) are generated again by the same generators as generate;
// every other resource is g's, shared with its serialised form. The result
// is what generate would return for s (TestIncrementalMatchesFull). It also
// returns which names changed, so the cache need not compare every
// resource.
func (g *generation) update(s *model.Snapshot, d *model.Diff) (*generation, *genDiff, error) {
	dirty := grpcgen.AffectedHosts(g.snap, s, d)
	// The proxy's services among the dirty hosts, in host order as its
	// View's Services are.
	v := model.NewView(s, g.proxy.Workload())
	svcs := v.ServicesOf(slices.Collect(maps.Keys(dirty)))
	lds, err := grpcgen.ListenersOf(svcs)
	if err != nil {
		return nil, nil, err
	}
	rds, err := grpcgen.RoutesOf(v, svcs)
	if err != nil {
		return nil, nil, err
	}
	refs := v.ClustersOf(svcs)
	cds := grpcgen.ClustersOf(v, refs)
	eds := grpcgen.EndpointsOf(refs)

	n, np := newProxyless(s, g.proxy, g.kind, g.key, make(map[string]*resourceMap, len(typeURLs)))
	gp := proxylessOf(g)
	gd := &genDiff{prev: g, changed: make(map[string]map[string]bool, len(typeURLs)), inboundSame: true}
	fresh := make(map[string]map[string]*resource, len(typeURLs))
	for _, t := range typeURLs {
		fresh[t] = map[string]*resource{}
	}
	for _, l := range lds {
		if err := addFresh(fresh[resourcev3.ListenerType], l.GetName(), l); err != nil {
			return nil, nil, err
		}
	}
	for _, r := range rds {
		if err := addFresh(fresh[resourcev3.RouteType], r.GetName(), r); err != nil {
			return nil, nil, err
		}
	}
	for _, c := range cds {
		if err := addFresh(fresh[resourcev3.ClusterType], c.GetName(), c); err != nil {
			return nil, nil, err
		}
	}
	for _, a := range eds {
		if err := addFresh(fresh[resourcev3.EndpointType], a.GetClusterName(), a); err != nil {
			return nil, nil, err
		}
	}
	for _, t := range typeURLs {
		old := g.types[t]
		ch := map[string]bool{}
		gd.changed[t] = ch
		for name, r := range fresh[t] {
			if o := g.get(t, name); o == nil || o.hash != r.hash {
				ch[name] = true
			}
		}
		// Resources of dirty hosts that are no longer generated: found
		// through the previous generation's resources of those hosts.
		for _, name := range g.hostNames(t, dirty) {
			if fresh[t][name] == nil {
				ch[name] = true
			}
		}
		if len(ch) == 0 {
			n.types[t] = old // nothing differs: share the map
			continue
		}
		m := old.Edit() // shares what the changed names do not touch
		for name := range ch {
			if r := fresh[t][name]; r != nil {
				m.Set(name, r)
			} else {
				m.Delete(name)
			}
		}
		n.types[t] = m.Map()
	}
	// Server listeners depend only on the proxy and on policies, which a
	// non-global diff leaves alone. A short-name listener changes with the
	// listener it copies.
	gp.mu.Lock()
	for name, a := range gp.aliases {
		if gd.changed[resourcev3.ListenerType][a.target.name] {
			gd.changed[resourcev3.ListenerType][name] = true
			continue
		}
		if np.aliases == nil {
			np.aliases = map[string]alias{}
		}
		np.aliases[name] = a
	}
	np.inbound = make(map[string]*resource, len(gp.inbound))
	for k, v := range gp.inbound {
		np.inbound[k] = v
	}
	// Carry the host index forward, fixing up the dirty hosts.
	for t, idx := range gp.hostIndex {
		if len(gd.changed[t]) > 0 {
			e := idx.Edit()
			for h := range dirty {
				e.Delete(h)
			}
			for name := range fresh[t] {
				h := resourceHost(t, name)
				names, _ := e.Get(h)
				e.Set(h, append(slices.Clip(names), name))
			}
			idx = e.Map()
		}
		if np.hostIndex == nil {
			np.hostIndex = map[string]*cowmap.Map[string, []string]{}
		}
		np.hostIndex[t] = idx
	}
	gp.mu.Unlock()
	if err := n.consistentFresh(fresh, v.MissingCluster); err != nil {
		return nil, nil, fmt.Errorf("group %s: %w", g.key, err)
	}
	if err := g.updateNameTable(n, gd, dirty); err != nil {
		return nil, nil, err
	}
	if err := g.refreshWorkloadGroups(n, gd); err != nil {
		return nil, nil, err
	}
	return n, gd, nil
}

// hostNames returns the names of g's resources of type t that belong to
// the given hosts.
func (g *generation) hostNames(t string, hosts map[string]bool) []string {
	var out []string
	if len(hosts) == 0 {
		return nil
	}
	if len(hosts) > g.count(t)/8 {
		for name := range g.types[t].Keys() {
			if hosts[resourceHost(t, name)] {
				out = append(out, name)
			}
		}
		return out
	}
	idx := g.byHost(t)
	for h := range hosts {
		names, _ := idx.Get(h)
		out = append(out, names...)
	}
	return out
}

// byHost indexes g's resources of type t by host, once per generation.
func (g *generation) byHost(t string) *cowmap.Map[string, []string] {
	gp := proxylessOf(g)
	gp.mu.Lock()
	defer gp.mu.Unlock()
	if idx := gp.hostIndex[t]; idx != nil {
		return idx
	}
	byHost := map[string][]string{}
	for name := range g.types[t].Keys() {
		h := resourceHost(t, name)
		byHost[h] = append(byHost[h], name)
	}
	idx := cowmap.From(byHost)
	if gp.hostIndex == nil {
		gp.hostIndex = map[string]*cowmap.Map[string, []string]{}
	}
	gp.hostIndex[t] = idx
	return idx
}

// addFresh serialises a regenerated resource into m.
func addFresh(m map[string]*resource, name string, msg proto.Message) error {
	r, err := newResource(name, msg)
	if err != nil {
		return err
	}
	m[name] = r
	return nil
}

// consistentFresh checks the references of the regenerated resources
// against the whole new generation (unchanged resources were checked when
// they were made, and their references are to hosts that did not change).
// missing says which clusters the regenerated routes name on purpose
// although there is none (model.View.MissingCluster of the View they were
// made from).
func (g *generation) consistentFresh(fresh map[string]map[string]*resource, missing func(string) bool) error {
	var lds []*listenerv3.Listener
	var rds []*routev3.RouteConfiguration
	var cds []*clusterv3.Cluster
	for _, r := range fresh[resourcev3.ListenerType] {
		lds = append(lds, r.msg.(*listenerv3.Listener))
	}
	for _, r := range fresh[resourcev3.RouteType] {
		rds = append(rds, r.msg.(*routev3.RouteConfiguration))
	}
	for _, r := range fresh[resourcev3.ClusterType] {
		cds = append(cds, r.msg.(*clusterv3.Cluster))
	}
	has := func(t string) func(string) bool {
		return func(n string) bool { return g.get(t, n) != nil }
	}
	cluster := func(n string) bool { return g.get(resourcev3.ClusterType, n) != nil || missing(n) }
	return consistentWith(lds, rds, cds, has(resourcev3.RouteType), cluster, has(resourcev3.EndpointType))
}

// resourceHost returns the service host a proxyless resource belongs to:
// listeners and route configurations are "host:port", clusters and
// assignments "outbound|port|subset|host".
func resourceHost(typeURL, name string) string {
	switch typeURL {
	case resourcev3.ListenerType, resourcev3.RouteType:
		if i := strings.LastIndexByte(name, ':'); i >= 0 {
			return name[:i]
		}
	case resourcev3.ClusterType, resourcev3.EndpointType:
		if i := strings.LastIndexByte(name, '|'); i >= 0 {
			return name[i+1:]
		}
	}
	return name
}

// rebase returns a proxyless group g for snapshot s when nothing the generators read differs
// (model.Diff.Empty): the same resources under s's version.
func (g *generation) rebase(s *model.Snapshot) (*generation, *genDiff) {
	n, np := newProxyless(s, g.proxy, g.kind, g.key, maps.Clone(g.types))
	gp := proxylessOf(g)
	gd := &genDiff{prev: g, changed: make(map[string]map[string]bool, len(typeURLs)), inboundSame: true}
	gp.mu.Lock()
	np.inbound = maps.Clone(gp.inbound)
	np.aliases = maps.Clone(gp.aliases)
	np.hostIndex = gp.hostIndex
	gp.mu.Unlock()
	if np.inbound == nil {
		np.inbound = map[string]*resource{}
	}
	// A WorkloadGroup that cannot be serialised (decoded protos always
	// can) keeps the previous ones.
	if err := g.refreshWorkloadGroups(n, gd); err != nil {
		n.types[WorkloadGroupType] = g.types[WorkloadGroupType]
	}
	return n, gd
}

// proxylessCache is proxyless gRPC's part of a cache: it keeps nothing
// across groups.
type proxylessCache struct{}

func newProxylessCache(*cache) kindCache { return proxylessCache{} }

var _ kindCache = proxylessCache{}

func (proxylessCache) build(s *model.Snapshot, p *Proxy, key string) (*generation, error) {
	return generateProxyless(s, p, key)
}

// push brings a proxyless group forward: by update when only host-bound
// inputs differ (incremental), as it was when nothing the generators read
// differs (rebase), EDS only when only endpoints differ (withEndpoints),
// else generated again.
func (proxylessCache) push(s *model.Snapshot, md *model.Diff, _ []*generation) pushStep {
	return func(old *generation, key string) (*generation, *genDiff, error) {
		switch {
		case key == old.key && old.incremental(md):
			return old.update(s, md)
		case key == old.key && md != nil && md.Empty():
			g, d := old.rebase(s)
			return g, d, nil
		case key == old.key && md != nil && md.EndpointsOnly():
			g, _, err := old.withEndpoints(s)
			return g, nil, err
		default:
			g, err := generateProxyless(s, old.proxy, key)
			return g, nil, err
		}
	}
}

func (proxylessCache) adopt(*generation)                                 {}
func (proxylessCache) installed(*model.Snapshot, map[string]*generation) {}
func (proxylessCache) dropped(*generation, map[string]*generation)       {}
