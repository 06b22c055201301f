package router

import (
	"fmt"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// cache is the router's KindCache. Every push generates a live group's
// listeners and route configurations again; its clusters and endpoints it
// brings forward from the group's previous generation host by host, the
// same maps when nothing of them changed, when the push's diff leaves the
// global inputs alone (clustersKept) and the group has the same
// AUTO_PASSTHROUGH setting: a VirtualService change rebuilds (and
// re-sends) only the route configuration it touches, as the sidecar's
// cluster memo spares its scopes the clusters. That holds for a router
// with an AUTO_PASSTHROUGH server too, whose SNI-DNAT clusters (one per
// port and subset of every mesh-internal service it sees) are brought
// forward by the same rule. It keeps nothing across groups.
type cache struct{}

// Build generates the group in full.
func (cache) Build(s *model.Snapshot, w model.Workload, key string) (*gen.Generation, error) {
	return generate(s, w, key, nil, nil)
}

// Push returns the step that generates a live group again at s, keeping
// its clusters and endpoints when md allows.
func (cache) Push(s *model.Snapshot, md *model.Diff, _ []*gen.Generation) gen.PushStep {
	var dirty map[string]bool
	if clustersKept(md) {
		dirty = dirtyHosts(md)
	}
	return func(old *gen.Generation, key string) (*gen.Generation, *gen.Diff, error) {
		var prev *gen.Generation
		if dirty != nil {
			prev = old
		}
		g, err := generate(s, old.Workload, key, prev, dirty)
		return g, nil, err
	}
}

// Adopt keeps nothing.
func (cache) Adopt(*gen.Generation) {}

// Installed keeps nothing.
func (cache) Installed(*model.Snapshot, map[string]*gen.Generation) {}

// Dropped keeps nothing.
func (cache) Dropped(*gen.Generation, map[string]*gen.Generation) {}

// clustersKept reports whether md allows a router's clusters and
// endpoints to be brought forward host by host (updateClusters): no global
// input (mesh settings, Sidecars, policies) differs and the group keys are
// the same. What does differ is then bound to hosts (dirtyHosts).
func clustersKept(md *model.Diff) bool {
	return md != nil && md.SameViewKeys()
}

// dirtyHosts are the hosts whose clusters and endpoints may differ under
// md: those whose services, endpoint lists or DestinationRules differ.
// (A VirtualService change alone changes no cluster of a host.)
func dirtyHosts(md *model.Diff) map[string]bool {
	out := make(map[string]bool, len(md.Services)+len(md.Endpoints)+len(md.DestinationRules))
	for _, m := range []map[string]bool{md.Services, md.Endpoints, md.DestinationRules} {
		for h := range m {
			out[h] = true
		}
	}
	return out
}

// part is what a router keeps with its generation: what its clusters and
// endpoints were generated for. It makes nothing on demand.
type part struct {
	// hosts are the destination hosts, sorted.
	hosts []string
	// autoPassthrough: the router has the SNI-DNAT clusters.
	autoPassthrough bool
	// dnat are the hosts of the SNI-DNAT clusters (dnatHosts), sorted;
	// nil without autoPassthrough.
	dnat []string
}

var _ gen.Part = (*part)(nil)

// Lookup makes nothing on demand.
func (*part) Lookup(*gen.Generation, string, string) *gen.Resource { return nil }

// TakeRefused: nothing is refused.
func (*part) TakeRefused() (int64, int) { return 0, 0 }

// generate generates a router's group: LDS and RDS, and CDS and EDS
// brought forward from prev when both have the same AUTO_PASSTHROUGH
// setting: the clusters of the hosts the router still routes to (and the
// SNI-DNAT clusters of the hosts it still sees) not in dirty are prev's
// resources, those of the others generated (prev nil: all generated);
// checked for references that do not resolve.
func generate(s *model.Snapshot, w model.Workload, key string, prev *gen.Generation, dirty map[string]bool) (*gen.Generation, error) {
	v := model.NewView(s, w)
	hosts := destinationHosts(v)
	p := &part{hosts: slices.Sorted(slices.Values(hosts)), autoPassthrough: autoPassthrough(v)}
	if p.autoPassthrough {
		p.dnat = dnatHosts(v)
	}
	var r sidecar.Resources
	var err error
	if r.Listeners, err = Listeners(v); err != nil {
		return nil, fmt.Errorf("group %s: %w", key, err)
	}
	if r.Routes, err = Routes(v); err != nil {
		return nil, fmt.Errorf("group %s: %w", key, err)
	}
	types := make(map[string]*gen.ResourceMap, gen.NumTypes)
	if pp, ok := partOf(prev); ok && pp.autoPassthrough == p.autoPassthrough {
		types[resourcev3.ClusterType], types[resourcev3.EndpointType], err = updateClusters(v, prev, pp, p, dirty)
		if err != nil {
			return nil, fmt.Errorf("group %s: %w", key, err)
		}
		if r.Clusters, err = messages[*clusterv3.Cluster](types[resourcev3.ClusterType]); err != nil {
			return nil, fmt.Errorf("group %s: %w", key, err)
		}
		if r.Endpoints, err = messages[*endpointv3.ClusterLoadAssignment](types[resourcev3.EndpointType]); err != nil {
			return nil, fmt.Errorf("group %s: %w", key, err)
		}
	} else {
		r.Clusters, r.Endpoints = clustersAndEndpoints(v, hosts, p.autoPassthrough)
	}
	r.Missing = v.MissingCluster
	if err := r.Consistent(); err != nil {
		return nil, fmt.Errorf("group %s: proxy %s: %w", key, v.Workload().ID, err)
	}
	byType := map[string]map[string]*gen.Resource{}
	put := func(t string, name string, m proto.Message) error {
		if types[t] != nil {
			return nil
		}
		res, err := gen.NewResource(name, m)
		if err != nil {
			return fmt.Errorf("group %s: %w", key, err)
		}
		if byType[t] == nil {
			byType[t] = map[string]*gen.Resource{}
		}
		byType[t][name] = res
		return nil
	}
	for _, m := range r.Listeners {
		if err := put(resourcev3.ListenerType, m.GetName(), m); err != nil {
			return nil, err
		}
	}
	for _, m := range r.Routes {
		if err := put(resourcev3.RouteType, m.GetName(), m); err != nil {
			return nil, err
		}
	}
	for _, m := range r.Clusters {
		if err := put(resourcev3.ClusterType, m.GetName(), m); err != nil {
			return nil, err
		}
	}
	for _, m := range r.Endpoints {
		if err := put(resourcev3.EndpointType, m.GetClusterName(), m); err != nil {
			return nil, err
		}
	}
	for _, t := range gen.TypeURLs() {
		if types[t] == nil {
			types[t] = cowmap.From(byType[t])
		}
	}
	g := gen.New(s, w, key, types)
	g.Part = p
	return g, nil
}

// partOf returns the router part of g; false when g is nil or has none.
func partOf(g *gen.Generation) (*part, bool) {
	if g == nil {
		return nil, false
	}
	p, ok := g.Part.(*part)
	return p, ok
}

// messages returns the messages of the resources of m.
func messages[M proto.Message](m *gen.ResourceMap) ([]M, error) {
	out := make([]M, 0, m.Len())
	for _, r := range m.All() {
		msg, err := r.Message()
		if err != nil {
			return nil, err
		}
		x, ok := msg.(M)
		if !ok {
			return nil, fmt.Errorf("resource %s: a %T", r.Name, msg)
		}
		out = append(out, x)
	}
	return out, nil
}

// updateClusters brings prev's CDS and EDS maps forward to v: a resource
// of an outbound cluster ("outbound|port|subset|host") whose host the
// router no longer routes to (pp.hosts, p.hosts) or that is dirty is
// dropped, and the clusters of the hosts it routes to that are dirty or
// new are generated; so for the SNI-DNAT clusters
// ("outbound_.port_.subset_.host") of the hosts it sees (pp.dnat, p.dnat).
// The others, and the fixed clusters (which read only global inputs), are
// prev's. The maps are prev's own when nothing changed.
func updateClusters(v *model.View, prev *gen.Generation, pp, p *part, dirty map[string]bool) (cds, eds *gen.ResourceMap, err error) {
	routed, dnat := setOf(p.hosts), setOf(p.dnat)
	regen := changedHosts(p.hosts, setOf(pp.hosts), dirty)
	regenDNAT := changedHosts(p.dnat, setOf(pp.dnat), dirty)
	stale := func(name string) bool {
		if h, ok := dnatHost(name); ok {
			return !dnat[h] || dirty[h]
		}
		i := strings.LastIndexByte(name, '|')
		if i < 0 {
			return false
		}
		h := name[i+1:]
		return !routed[h] || dirty[h]
	}
	refs := v.ClustersOf(v.ServicesOf(regen))
	cs, es := sidecar.ClustersOf(v, refs), sidecar.EndpointsOf(v, refs)
	if len(regenDNAT) > 0 {
		dc, de := sidecar.SNIDNATClusters(v, v.ClustersOf(v.ServicesOf(regenDNAT)))
		cs, es = append(cs, dc...), append(es, de...)
	}
	freshC := map[string]*gen.Resource{}
	for _, c := range cs {
		if freshC[c.GetName()], err = gen.NewResource(c.GetName(), c); err != nil {
			return nil, nil, err
		}
	}
	freshE := map[string]*gen.Resource{}
	for _, e := range es {
		if freshE[e.GetClusterName()], err = gen.NewResource(e.GetClusterName(), e); err != nil {
			return nil, nil, err
		}
	}
	apply := func(old *gen.ResourceMap, fresh map[string]*gen.Resource) *gen.ResourceMap {
		changed := map[string]bool{}
		for name := range old.All() {
			if stale(name) {
				changed[name] = true
			}
		}
		for name, r := range fresh {
			if o, ok := old.Get(name); !ok || o.Hash != r.Hash {
				changed[name] = true
			} else {
				delete(changed, name) // unchanged: keep prev's resource
			}
		}
		return gen.Apply(old, changed, fresh)
	}
	return apply(prev.Types[resourcev3.ClusterType], freshC), apply(prev.Types[resourcev3.EndpointType], freshE), nil
}

// changedHosts are the hosts of now that are dirty or not in before.
func changedHosts(now []string, before, dirty map[string]bool) []string {
	var out []string
	for _, h := range now {
		if dirty[h] || !before[h] {
			out = append(out, h)
		}
	}
	return out
}

// setOf returns the set of hosts.
func setOf(hosts []string) map[string]bool {
	m := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		m[h] = true
	}
	return m
}

// dnatHosts are the hosts of a router's SNI-DNAT clusters: those of the
// services it sees that are not mesh-external (sidecar.SNIDNATClusters),
// sorted.
func dnatHosts(v *model.View) []string {
	var out []string
	for _, svc := range v.Services() {
		if !svc.MeshExternal {
			out = append(out, svc.Hostname)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// dnatHost returns the host of an SNI-DNAT cluster's name
// (sidecar.SNIDNATName); false for another name. Subset names hold no
// "_." (they are DNS labels), so the host is what follows the third.
func dnatHost(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "outbound_.")
	if !ok {
		return "", false
	}
	parts := strings.SplitN(rest, "_.", 3)
	if len(parts) != 3 {
		return "", false
	}
	return parts[2], true
}
