package grpc

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
	"google.golang.org/protobuf/proto"
)

// incremental reports whether a proxyless group's generation can be
// brought from its snapshot to the next one by update rather than
// generated again: its inputs differ only in host-bound config.
func incremental(d *model.Diff) bool {
	return d != nil && !d.Global
}

// update returns the generation for snapshot s, given what differs from
// g's snapshot: the resources of the hosts whose inputs differ (see
// grpc.AffectedHosts) are generated again by the same generators as generate;
// every other resource is g's, shared with its serialised form. The result
// is what generate would return for s (TestIncrementalMatchesFull). It also
// returns which names changed, so the cache need not compare every
// resource.
func update(g *gen.Generation, s *model.Snapshot, d *model.Diff) (*gen.Generation, *gen.Diff, error) {
	types := gen.TypeURLs()
	dirty := AffectedHosts(g.Snap, s, d)
	// The proxy's services among the dirty hosts, in host order as its
	// View's Services are.
	v := model.NewView(s, g.Workload)
	svcs := v.ServicesOf(slices.Collect(maps.Keys(dirty)))
	lds, err := ListenersOf(svcs)
	if err != nil {
		return nil, nil, err
	}
	rds, err := RoutesOf(v, svcs)
	if err != nil {
		return nil, nil, err
	}
	refs := v.ClustersOf(svcs)
	cds := ClustersOf(v, refs)
	eds := EndpointsOf(refs)

	n, np := newGeneration(s, g.Workload, g.Key, make(map[string]*gen.ResourceMap, len(types)))
	gp := partOf(g)
	gd := &gen.Diff{Prev: g, Changed: make(map[string]map[string]bool, len(types)), InboundSame: true}
	fresh := make(map[string]map[string]*gen.Resource, len(types))
	for _, t := range types {
		fresh[t] = map[string]*gen.Resource{}
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
	for _, t := range types {
		old := g.Types[t]
		ch := map[string]bool{}
		gd.Changed[t] = ch
		for name, r := range fresh[t] {
			if o := g.Get(t, name); o == nil || o.Hash != r.Hash {
				ch[name] = true
			}
		}
		// Resources of dirty hosts that are no longer generated: found
		// through the previous generation's resources of those hosts.
		for _, name := range hostNames(g, t, dirty) {
			if fresh[t][name] == nil {
				ch[name] = true
			}
		}
		n.Types[t] = gen.Apply(old, ch, fresh[t]) // nothing differs: the map is shared
	}
	// Server listeners depend only on the proxy and on policies, which a
	// non-global diff leaves alone. A short-name listener changes with the
	// listener it copies.
	gp.mu.Lock()
	for name, a := range gp.aliases {
		if gd.Changed[resourcev3.ListenerType][a.target.Name] {
			gd.Changed[resourcev3.ListenerType][name] = true
			continue
		}
		if np.aliases == nil {
			np.aliases = map[string]alias{}
		}
		np.aliases[name] = a
	}
	np.inbound = make(map[string]*gen.Resource, len(gp.inbound))
	for k, v := range gp.inbound {
		np.inbound[k] = v
	}
	// Carry the host index forward, fixing up the dirty hosts.
	for t, idx := range gp.hostIndex {
		if len(gd.Changed[t]) > 0 {
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
	if err := consistentFresh(n, fresh, v.MissingCluster); err != nil {
		return nil, nil, fmt.Errorf("group %s: %w", g.Key, err)
	}
	if err := updateNameTable(g, n, gd, dirty); err != nil {
		return nil, nil, err
	}
	if err := refreshWorkloadGroups(g, n, gd); err != nil {
		return nil, nil, err
	}
	return n, gd, nil
}

// hostNames returns the names of g's resources of type t that belong to
// the given hosts.
func hostNames(g *gen.Generation, t string, hosts map[string]bool) []string {
	var out []string
	if len(hosts) == 0 {
		return nil
	}
	if len(hosts) > g.Count(t)/8 {
		for name := range g.Types[t].Keys() {
			if hosts[resourceHost(t, name)] {
				out = append(out, name)
			}
		}
		return out
	}
	idx := byHost(g, t)
	for h := range hosts {
		names, _ := idx.Get(h)
		out = append(out, names...)
	}
	return out
}

// byHost indexes g's resources of type t by host, once per generation.
func byHost(g *gen.Generation, t string) *cowmap.Map[string, []string] {
	gp := partOf(g)
	gp.mu.Lock()
	defer gp.mu.Unlock()
	if idx := gp.hostIndex[t]; idx != nil {
		return idx
	}
	byHost := map[string][]string{}
	for name := range g.Types[t].Keys() {
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
func addFresh(m map[string]*gen.Resource, name string, msg proto.Message) error {
	r, err := gen.NewResource(name, msg)
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
func consistentFresh(g *gen.Generation, fresh map[string]map[string]*gen.Resource, missing func(string) bool) error {
	var lds []*listenerv3.Listener
	var rds []*routev3.RouteConfiguration
	var cds []*clusterv3.Cluster
	for _, r := range fresh[resourcev3.ListenerType] {
		lds = append(lds, r.Msg.(*listenerv3.Listener))
	}
	for _, r := range fresh[resourcev3.RouteType] {
		rds = append(rds, r.Msg.(*routev3.RouteConfiguration))
	}
	for _, r := range fresh[resourcev3.ClusterType] {
		cds = append(cds, r.Msg.(*clusterv3.Cluster))
	}
	has := func(t string) func(string) bool {
		return func(n string) bool { return g.Get(t, n) != nil }
	}
	cluster := func(n string) bool { return g.Get(resourcev3.ClusterType, n) != nil || missing(n) }
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
func rebase(g *gen.Generation, s *model.Snapshot) (*gen.Generation, *gen.Diff) {
	n, np := newGeneration(s, g.Workload, g.Key, maps.Clone(g.Types))
	gp := partOf(g)
	gd := &gen.Diff{Prev: g, Changed: make(map[string]map[string]bool, gen.NumTypes), InboundSame: true}
	gp.mu.Lock()
	np.inbound = maps.Clone(gp.inbound)
	np.aliases = maps.Clone(gp.aliases)
	np.hostIndex = gp.hostIndex
	gp.mu.Unlock()
	if np.inbound == nil {
		np.inbound = map[string]*gen.Resource{}
	}
	// A WorkloadGroup that cannot be serialised (decoded protos always
	// can) keeps the previous ones.
	if err := refreshWorkloadGroups(g, n, gd); err != nil {
		n.Types[gen.WorkloadGroupType] = g.Types[gen.WorkloadGroupType]
	}
	return n, gd
}

// cache is proxyless gRPC's part of a server cache: across groups it
// keeps only the EDS assignments made at the latest snapshot (edsShare).
type cache struct {
	mu    sync.Mutex
	share *edsShare
}

var _ gen.KindCache = (*cache)(nil)

// shareAt returns the assignments shared at s, starting anew when s is
// not the snapshot of the ones kept.
func (c *cache) shareAt(s *model.Snapshot) *edsShare {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.share == nil || c.share.snap != s {
		c.share = newEDSShare(s)
	}
	return c.share
}

// Build generates a proxyless group in full.
func (c *cache) Build(s *model.Snapshot, w model.Workload, key string) (*gen.Generation, error) {
	return generateShared(s, w, key, c.shareAt(s))
}

// Push brings a proxyless group forward: by update when only host-bound
// inputs differ (incremental), as it was when nothing the generators read
// differs (rebase), EDS only when only endpoints differ (withEndpoints),
// else generated again. The groups it generates share their assignments.
func (c *cache) Push(s *model.Snapshot, md *model.Diff, _ []*gen.Generation) gen.PushStep {
	share := c.shareAt(s)
	return func(old *gen.Generation, key string) (*gen.Generation, *gen.Diff, error) {
		switch {
		case key == old.Key && incremental(md):
			return update(old, s, md)
		case key == old.Key && md != nil && md.Empty():
			g, d := rebase(old, s)
			return g, d, nil
		case key == old.Key && md != nil && md.EndpointsOnly():
			g, _, err := withEndpointsShared(old, s, share)
			return g, nil, err
		default:
			g, err := generateShared(s, old.Workload, key, share)
			return g, nil, err
		}
	}
}

// Adopt keeps nothing.
func (*cache) Adopt(*gen.Generation) {}

// Installed keeps nothing.
func (*cache) Installed(*model.Snapshot, map[string]*gen.Generation) {}

// Dropped keeps nothing.
func (*cache) Dropped(*gen.Generation, map[string]*gen.Generation) {}
