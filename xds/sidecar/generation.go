package sidecar

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// An Envoy sidecar's config is made of two parts (issue 20). What depends
// only on its scope (model.OutboundKey: namespace, Sidecar, labels,
// locality) — its outbound listeners, every route configuration, the
// outbound clusters and every assignment — is an outboundPart, generated
// and serialised once per scope and snapshot and shared by every VM of the
// scope. What depends on the VM itself (its IPs, workload name, ports and
// the policies that select it) — virtualInbound and the inbound clusters —
// is its own part, small. A sidecar group's generation is the two put
// together (composeSidecar): its listener and cluster maps are versions of
// the scope's maps with the VM's few resources added, sharing everything
// else (cowmap), and its route and endpoint maps are the scope's.

// outboundPart is the scope-only part of an Envoy sidecar's config at one
// snapshot. Immutable once made.
type outboundPart struct {
	snap *model.Snapshot
	key  string // model.OutboundKey
	// w is the workload of the proxy the part was first generated for:
	// any proxy of the scope generates the same part.
	w model.Workload
	// types holds LDS, RDS, CDS and EDS (and an empty name table).
	types map[string]*gen.ResourceMap
}

// outboundChange is a scope's new part and which names changed from base,
// its part at the previous snapshot (nil when generated without one).
type outboundChange struct {
	part    *outboundPart
	base    *outboundPart
	changed map[string]map[string]bool // by type; nil: not known
	err     error
}

// part is what a sidecar group keeps with its generation: its two parts,
// its scope's (shared with every group of the scope) and its own.
type part struct {
	out *outboundPart
	own ownPart
}

var _ gen.Part = (*part)(nil)

// Lookup makes nothing: a sidecar group makes nothing on demand.
func (*part) Lookup(*gen.Generation, string, string) *gen.Resource { return nil }

// TakeRefused is 0: a sidecar group makes nothing on demand.
func (*part) TakeRefused() (int64, int) { return 0, 0 }

// generation is a sidecar group's generation and its part, in one
// allocation.
type generation struct {
	gen.Generation
	part part
}

// partOf returns a sidecar group's part; nil for another kind's.
func partOf(g *gen.Generation) *part {
	p, _ := g.Part.(*part)
	return p
}

// outOf returns a sidecar group's scope part; nil for another kind's.
func outOf(g *gen.Generation) *outboundPart {
	if p := partOf(g); p != nil {
		return p.out
	}
	return nil
}

// ownPart is the resources of a sidecar's own (per-VM) part, by type:
// virtualInbound (LDS) and the inbound clusters (CDS).
type ownPart map[string][]*gen.Resource

// sidecarTypes are the types an outboundPart holds besides the name table.
var sidecarTypes = []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType}

// outboundResource makes a scope part's resource of type typeURL. Its
// clusters and assignments keep only their serialised form: once the part
// is checked nothing reads them as messages (updates regenerate the ones
// that change, the debug dump decodes), and every VM of the scope shares
// them, so their messages would be most of what a fleet of sidecars holds
// (and most of what the collector scans). Listeners and route
// configurations keep theirs: composing a VM's group checks the listeners'
// references, and updates edit route configurations in place of
// regenerating them.
func outboundResource(typeURL, name string, m proto.Message) (*gen.Resource, error) {
	r, err := gen.NewResource(name, m)
	if err != nil {
		return nil, err
	}
	if typeURL == resourcev3.ClusterType || typeURL == resourcev3.EndpointType {
		r.Msg = nil
	}
	return r, nil
}

// serialised serialises msgs of type typeURL into a scope part's resource
// map.
func serialised[T proto.Message](typeURL string, msgs []T, name func(T) string) (*gen.ResourceMap, error) {
	e := cowmap.New[string, *gen.Resource]().Edit()
	for _, m := range msgs {
		r, err := outboundResource(typeURL, name(m), m)
		if err != nil {
			return nil, err
		}
		e.Set(r.Name, r)
	}
	return e.Map(), nil
}

func listenerName(l *listenerv3.Listener) string { return l.GetName() }

// generateOutbound generates a scope's part in full, for proxy p of it,
// taking the clusters other scopes generated at s from memo (nil: none).
func generateOutbound(s *model.Snapshot, p model.Workload, key string, memo *clusterMemo) (*outboundPart, error) {
	v := model.NewView(s, p)
	og := NewOutbound(v) // listeners and routes share the scope's targets
	lds, err := og.Listeners(nil)
	if err != nil {
		return nil, err
	}
	rds, err := og.Routes(nil)
	if err != nil {
		return nil, err
	}
	fixed := FixedClusters(v)
	mcs, err := memo.of(v, s, v.Clusters())
	if err != nil {
		return nil, err
	}
	cds := append(make([]*clusterv3.Cluster, 0, len(fixed)+len(mcs)), fixed...)
	var eds []*endpointv3.ClusterLoadAssignment
	for _, mc := range mcs {
		cds = append(cds, mc.cluster)
		if mc.cla != nil {
			eds = append(eds, mc.cla)
		}
	}
	r := &Resources{Listeners: lds, Routes: rds, Clusters: cds, Endpoints: eds, Missing: v.MissingCluster}
	if err := r.Consistent(); err != nil {
		return nil, fmt.Errorf("scope %s: %w", key, err)
	}
	o := &outboundPart{snap: s, key: key, w: p, types: make(map[string]*gen.ResourceMap, gen.NumTypes)}
	if o.types[resourcev3.ListenerType], err = serialised(resourcev3.ListenerType, lds, listenerName); err != nil {
		return nil, err
	}
	e := cowmap.New[string, *gen.Resource]().Edit()
	for _, rc := range rds {
		r, _, err := routeResource(rc, nil)
		if err != nil {
			return nil, err
		}
		e.Set(r.Name, r)
	}
	o.types[resourcev3.RouteType] = e.Map()
	ce := cowmap.New[string, *gen.Resource]().Edit()
	for _, c := range fixed {
		res, err := outboundResource(resourcev3.ClusterType, c.GetName(), c)
		if err != nil {
			return nil, err
		}
		ce.Set(res.Name, res)
	}
	ee := cowmap.New[string, *gen.Resource]().Edit()
	for _, mc := range mcs {
		ce.Set(mc.clusterRes.Name, mc.clusterRes)
		if mc.claRes != nil {
			ee.Set(mc.claRes.Name, mc.claRes)
		}
	}
	o.types[resourcev3.ClusterType], o.types[resourcev3.EndpointType] = ce.Map(), ee.Map()
	// Sidecars get no name table and no WorkloadGroups (their agents ask
	// on a proxyless stream of their own): every type has a map.
	o.types[gen.NameTableType] = cowmap.New[string, *gen.Resource]()
	o.types[gen.WorkloadGroupType] = cowmap.New[string, *gen.Resource]()
	return o, nil
}

// rebaseOutbound is o at snapshot s when nothing the generators read
// differs (model.Diff.Empty).
func rebaseOutbound(o *outboundPart, s *model.Snapshot) *outboundChange {
	n := &outboundPart{snap: s, key: o.key, w: o.w, types: o.types}
	ch := make(map[string]map[string]bool, gen.NumTypes)
	for _, t := range gen.TypeURLs() {
		ch[t] = map[string]bool{}
	}
	return &outboundChange{part: n, base: o, changed: ch}
}

// diffOutbound returns the names whose resources differ between two parts
// of a scope, by type.
func diffOutbound(a, b *outboundPart) map[string]map[string]bool {
	out := make(map[string]map[string]bool, gen.NumTypes)
	same := func(x, y *gen.Resource) bool { return x == y || x.Hash == y.Hash }
	for _, t := range gen.TypeURLs() {
		ch := map[string]bool{}
		for n := range cowmap.Changed(a.types[t], b.types[t], same) {
			ch[n] = true
		}
		out[t] = ch
	}
	return out
}

// updateOutbound brings a scope's part from o's snapshot to s, given what
// differs (a non-global diff): the listeners and route configurations of
// the ports of the affected hosts (a route configuration holds every HTTP
// service of its port; with the same services, only the listeners of their
// TCP and TLS ports), and the clusters and assignments of the affected
// hosts, are generated again; everything else is o's, shared with its
// serialised form. With only endpoints differing, listeners and routes
// (which do not read endpoints) are kept. The result equals
// generateOutbound for s (TestSidecarIncrementalMatchesFull).
func updateOutbound(o *outboundPart, s *model.Snapshot, d *model.Diff) (*outboundPart, map[string]map[string]bool, error) {
	dirty := AffectedHosts(o.snap, s, d)
	v := model.NewView(s, o.w)
	svcs := v.ServicesOf(slices.Collect(maps.Keys(dirty)))
	refs := v.ClustersOf(svcs)
	fresh := make(map[string]map[string]*gen.Resource, len(sidecarTypes))
	drop := make(map[string]func(string) bool, len(sidecarTypes))
	add := func(t string, name string, m proto.Message) error {
		r, err := outboundResource(t, name, m)
		if err != nil {
			return err
		}
		if fresh[t] == nil {
			fresh[t] = map[string]*gen.Resource{}
		}
		fresh[t][name] = r
		return nil
	}
	var lds []*listenerv3.Listener
	var freshHosts []*routev3.VirtualHost
	if !d.EndpointsOnly() {
		ports := PortsOf(dirty, o.snap, s)
		// With the same services (so the same targets), a listener differs
		// only where it reads the touched hosts' VirtualServices: the ports
		// where they have TCP or TLS services. A change of HTTP routes
		// regenerates no listener.
		lports := ports
		if len(d.Services) == 0 {
			lports = ListenerRoutedPorts(dirty, s)
		}
		og := NewOutbound(v)
		var err error
		if len(lports) > 0 {
			if lds, err = og.Listeners(lports); err != nil {
				return nil, nil, err
			}
		}
		for _, l := range lds {
			if err := add(resourcev3.ListenerType, l.GetName(), l); err != nil {
				return nil, nil, err
			}
		}
		var rds []*routev3.RouteConfiguration
		// from holds the configuration each was updated from: its virtual
		// hosts' bytes are reused (routeResource).
		from := map[string]*gen.Resource{}
		if len(d.Services) == 0 {
			// The same services: each port's route configuration keeps the
			// virtual hosts of the hosts the change does not touch.
			for p := range ports {
				old, ok := o.types[resourcev3.RouteType].Get(RouteName(p))
				if !ok {
					continue // no HTTP service on the port, then or now
				}
				rc, err := og.UpdateRoute(old.Msg.(*routev3.RouteConfiguration), dirty)
				if err != nil {
					return nil, nil, err
				}
				rds = append(rds, rc)
				from[rc.GetName()] = old
			}
		} else if rds, err = og.Routes(ports); err != nil {
			return nil, nil, err
		}
		for _, rc := range rds {
			r, fh, err := routeResource(rc, from[rc.GetName()])
			if err != nil {
				return nil, nil, err
			}
			freshHosts = append(freshHosts, fh...)
			if fresh[resourcev3.RouteType] == nil {
				fresh[resourcev3.RouteType] = map[string]*gen.Resource{}
			}
			fresh[resourcev3.RouteType][r.Name] = r
		}
		drop[resourcev3.ListenerType] = func(n string) bool {
			i := strings.LastIndexByte(n, '_')
			p, err := strconv.ParseUint(n[i+1:], 10, 32)
			return i >= 0 && err == nil && lports[uint32(p)]
		}
		drop[resourcev3.RouteType] = func(n string) bool {
			p, err := strconv.ParseUint(n, 10, 32)
			return err == nil && ports[uint32(p)]
		}
	}
	cds := ClustersOf(v, refs)
	for _, c := range cds {
		if err := add(resourcev3.ClusterType, c.GetName(), c); err != nil {
			return nil, nil, err
		}
	}
	for _, a := range EndpointsOf(v, refs) {
		if err := add(resourcev3.EndpointType, a.GetClusterName(), a); err != nil {
			return nil, nil, err
		}
	}
	// The clusters and endpoints the part may drop are the touched hosts'
	// at the part's snapshot (a part is what generating at its snapshot
	// gives), not every one it holds; listeners and routes are few.
	ov := model.NewView(o.snap, o.w)
	var oldNames []string
	for _, ref := range ov.ClustersOf(ov.ServicesOf(slices.Collect(maps.Keys(dirty)))) {
		oldNames = append(oldNames, ref.Name())
	}
	dropCandidates := func(t string, old *gen.ResourceMap) iter.Seq[string] {
		if t == resourcev3.ClusterType || t == resourcev3.EndpointType {
			return slices.Values(oldNames)
		}
		return old.Keys()
	}
	byHost := func(string) func(string) bool {
		return func(n string) bool { return strings.HasPrefix(n, "outbound|") && dirty[clusterHost(n)] }
	}
	drop[resourcev3.ClusterType], drop[resourcev3.EndpointType] = byHost(resourcev3.ClusterType), byHost(resourcev3.EndpointType)

	n := &outboundPart{snap: s, key: o.key, w: o.w, types: make(map[string]*gen.ResourceMap, gen.NumTypes)}
	changed := make(map[string]map[string]bool, gen.NumTypes)
	for _, t := range gen.TypeURLs() {
		old := o.types[t]
		ch := map[string]bool{}
		changed[t] = ch
		for name, r := range fresh[t] {
			if x, ok := old.Get(name); !ok || x.Hash != r.Hash {
				ch[name] = true
			}
		}
		if gone := drop[t]; gone != nil {
			for name := range dropCandidates(t, old) {
				if _, had := old.Get(name); had && fresh[t][name] == nil && gone(name) {
					ch[name] = true
				}
			}
		}
		n.types[t] = gen.Apply(old, ch, fresh[t])
	}
	// The regenerated resources' references resolve in the new part (or
	// are among the clusters the View named for destinations the proxy has
	// none for); the others' do too: they name only hosts the change did
	// not touch.
	has := func(t string) func(string) bool {
		return func(name string) bool { _, ok := n.types[t].Get(name); return ok }
	}
	routeCluster := func(name string) bool { return has(resourcev3.ClusterType)(name) || v.MissingCluster(name) }
	for _, l := range lds {
		// An unchanged listener names what it named: the hosts it names
		// were not touched, or it would have changed.
		if !changed[resourcev3.ListenerType][l.GetName()] {
			continue
		}
		if err := CheckReferences("scope "+o.key, l, has(resourcev3.RouteType), routeCluster); err != nil {
			return nil, nil, err
		}
	}
	if err := routeClustersExist(freshHosts, routeCluster); err != nil {
		return nil, nil, fmt.Errorf("scope %s: %w", o.key, err)
	}
	for _, c := range cds {
		if c.GetType() == clusterv3.Cluster_EDS && !has(resourcev3.EndpointType)(c.GetEdsClusterConfig().GetServiceName()) {
			return nil, nil, fmt.Errorf("scope %s: cluster %s: no endpoints resource", o.key, c.GetName())
		}
	}
	return n, changed, nil
}

// routeResource serialises a sidecar's route configuration. The virtual
// hosts it shares with old (the configuration of the port it was updated
// from, nil for none) are not serialised again: their bytes are copied from
// old's. fresh are the virtual hosts serialised anew. The bytes are what
// proto.Marshal makes of rc: the Go encoder writes fields in number order
// and an embedded message as its own encoding, so a configuration is its
// name (field 1), each virtual host (field 2) in order, then the rest.
func routeResource(rc *routev3.RouteConfiguration, old *gen.Resource) (*gen.Resource, []*routev3.VirtualHost, error) {
	// Only the fields the sidecar generator sets can be put together so.
	extra := false
	rc.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		switch fd.Number() {
		case 1, 2, 7, 11, 14: // name, virtual_hosts, validate_clusters, max_direct_response_body_size_bytes, ignore_port_in_host_matching
			return true
		}
		extra = true
		return false
	})
	if extra {
		r, err := gen.NewResource(rc.GetName(), rc)
		return r, rc.GetVirtualHosts(), err
	}
	opts := proto.MarshalOptions{Deterministic: true}
	shell, err := opts.Marshal(&routev3.RouteConfiguration{Name: rc.GetName(), ValidateClusters: rc.GetValidateClusters(), MaxDirectResponseBodySizeBytes: rc.GetMaxDirectResponseBodySizeBytes(), IgnorePortInHostMatching: rc.GetIgnorePortInHostMatching()})
	if err != nil {
		return nil, nil, fmt.Errorf("marshal %s: %w", rc.GetName(), err)
	}
	head := 0
	if rc.GetName() != "" {
		_, _, n := protowire.ConsumeField(shell)
		if n < 0 {
			return nil, nil, fmt.Errorf("marshal %s: %w", rc.GetName(), protowire.ParseError(n))
		}
		head = n
	}
	var olds []*routev3.VirtualHost
	var oldBytes [][]byte
	if old != nil {
		olds = old.Msg.(*routev3.RouteConfiguration).GetVirtualHosts()
		if oldBytes, err = virtualHostBytes(old.Any.GetValue(), len(olds)); err != nil {
			return nil, nil, fmt.Errorf("route configuration %s: %w", rc.GetName(), err)
		}
	}
	// An update keeps old's virtual hosts in their order (UpdateRoute), so
	// old is walked alongside: a shared host is found ahead of next, and a
	// host serialised anew passes over the one of its name it replaces.
	var fresh []*routev3.VirtualHost
	vhs := rc.GetVirtualHosts()
	parts := make([][]byte, len(vhs))
	sizes := make([]int, len(vhs))
	size := len(shell)
	next := 0
	for i, vh := range vhs {
		k := -1
		switch {
		case next < len(olds) && olds[next] == vh:
			k = next
		case next < len(olds) && olds[next].GetName() == vh.GetName():
			next++ // vh replaces it
		default: // old's hosts before it were dropped, or it is new
			if k = slices.Index(olds[next:], vh); k >= 0 {
				k += next
			}
		}
		if k >= 0 {
			parts[i], next = oldBytes[k], k+1
			size += 1 + protowire.SizeBytes(len(parts[i]))
			continue
		}
		fresh = append(fresh, vh)
		sizes[i] = opts.Size(vh)
		size += 1 + protowire.SizeBytes(sizes[i])
	}
	buf := make([]byte, 0, size)
	buf = append(buf, shell[:head]...)
	for i, vh := range vhs {
		buf = protowire.AppendTag(buf, 2, protowire.BytesType)
		if parts[i] != nil {
			buf = protowire.AppendBytes(buf, parts[i])
			continue
		}
		buf = protowire.AppendVarint(buf, uint64(sizes[i]))
		if buf, err = opts.MarshalAppend(buf, vh); err != nil {
			return nil, nil, fmt.Errorf("marshal %s: %w", rc.GetName(), err)
		}
	}
	buf = append(buf, shell[head:]...)
	return gen.ResourceFromBytes(rc.GetName(), rc, buf), fresh, nil
}

// virtualHostBytes returns the encodings of the n virtual hosts (field 2)
// of a serialised route configuration, in order.
func virtualHostBytes(b []byte, n int) ([][]byte, error) {
	out := make([][]byte, 0, n)
	for len(b) > 0 {
		num, typ, tn := protowire.ConsumeTag(b)
		if tn < 0 {
			return nil, protowire.ParseError(tn)
		}
		if num == 2 && typ == protowire.BytesType {
			v, vn := protowire.ConsumeBytes(b[tn:])
			if vn < 0 {
				return nil, protowire.ParseError(vn)
			}
			out = append(out, v)
			b = b[tn+vn:]
			continue
		}
		fn := protowire.ConsumeFieldValue(num, typ, b[tn:])
		if fn < 0 {
			return nil, protowire.ParseError(fn)
		}
		b = b[tn+fn:]
	}
	if len(out) != n {
		return nil, fmt.Errorf("%d virtual hosts serialised, %d in the message", len(out), n)
	}
	return out, nil
}

// routeClustersExist checks that every cluster the routes of vhs name
// exists.
func routeClustersExist(vhs []*routev3.VirtualHost, has func(string) bool) error {
	check := func(vh *routev3.VirtualHost, rt *routev3.Route, n string) error {
		if n != "" && !has(n) {
			return fmt.Errorf("virtual host %s route %s: cluster %q missing", vh.GetName(), rt.GetName(), n)
		}
		return nil
	}
	for _, vh := range vhs {
		for _, rt := range vh.GetRoutes() {
			a := rt.GetRoute()
			if a == nil {
				continue
			}
			if err := check(vh, rt, a.GetCluster()); err != nil {
				return err
			}
			for _, wc := range a.GetWeightedClusters().GetClusters() {
				if err := check(vh, rt, wc.GetName()); err != nil {
					return err
				}
			}
			for _, mp := range a.GetRequestMirrorPolicies() {
				if err := check(vh, rt, mp.GetCluster()); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// generateOwn generates a sidecar's own part.
func generateOwn(s *model.Snapshot, p model.Workload) (ownPart, error) {
	v := model.NewView(s, p)
	lds, err := InboundListeners(v)
	if err != nil {
		return nil, err
	}
	cds, err := InboundClusters(v)
	if err != nil {
		return nil, err
	}
	own := ownPart{}
	for _, l := range lds {
		r, err := gen.NewResource(l.GetName(), l)
		if err != nil {
			return nil, err
		}
		own[resourcev3.ListenerType] = append(own[resourcev3.ListenerType], r)
	}
	for _, c := range cds {
		r, err := gen.NewResource(c.GetName(), c)
		if err != nil {
			return nil, err
		}
		own[resourcev3.ClusterType] = append(own[resourcev3.ClusterType], r)
	}
	return own, nil
}

// ownChanges returns the names of own that differ from prev's; own's
// resources that do not are replaced by prev's (shared, as the scope's
// unchanged resources are).
func ownChanges(prev, own ownPart) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, t := range []string{resourcev3.ListenerType, resourcev3.ClusterType} {
		old := map[string]string{}
		was := map[string]*gen.Resource{}
		for _, r := range prev[t] {
			old[r.Name] = r.Hash
			was[r.Name] = r
		}
		for i, r := range own[t] {
			if h, ok := old[r.Name]; ok && h == r.Hash {
				own[t][i] = was[r.Name]
			}
			if h, ok := old[r.Name]; !ok || h != r.Hash {
				if out[t] == nil {
					out[t] = map[string]bool{}
				}
				out[t][r.Name] = true
			}
			delete(old, r.Name)
		}
		for n := range old {
			if out[t] == nil {
				out[t] = map[string]bool{}
			}
			out[t][n] = true
		}
	}
	return out
}

// composeSidecar puts a sidecar group's generation together from its
// scope's part and its own, checking (when check is set) that its own
// listeners' references resolve. kept holds, by type, maps already
// composed from this own part and resources of out's equal to the part
// they were composed on (see updateSidecar); they are taken as they are.
func composeSidecar(s *model.Snapshot, p model.Workload, key string, out *outboundPart, own ownPart, check bool, kept map[string]*gen.ResourceMap) (*gen.Generation, error) {
	x := &generation{Generation: gen.Generation{Snap: s, Workload: p, Key: key, Version: gen.Version(s), Types: maps.Clone(out.types)}, part: part{out: out, own: own}}
	x.Generation.Part = &x.part
	g := &x.Generation
	for t, rs := range own {
		if m := kept[t]; m != nil {
			g.Types[t] = m
			continue
		}
		base := out.types[t]
		e := base.Edit()
		for _, r := range rs {
			if _, dup := base.Get(r.Name); dup {
				return nil, fmt.Errorf("group %s: %s %q is both the scope's and the proxy's own", key, gen.ShortType(t), r.Name)
			}
			e.Set(r.Name, r)
		}
		g.Types[t] = e.Map()
	}
	for _, r := range own[resourcev3.ListenerType] {
		if !check {
			break
		}
		if err := CheckReferences("listener "+r.Name, r.Msg, func(n string) bool { return g.Get(resourcev3.RouteType, n) != nil },
			func(n string) bool { return g.Get(resourcev3.ClusterType, n) != nil }); err != nil {
			return nil, fmt.Errorf("group %s: %w", key, err)
		}
	}
	return g, nil
}

// generateSidecar generates a sidecar group in full: its scope's part
// (out, or generated when nil) and its own.
func generateSidecar(s *model.Snapshot, p model.Workload, key string, out *outboundPart) (*gen.Generation, error) {
	if out == nil {
		var err error
		if out, err = generateOutbound(s, p, model.OutboundKey(s, p), nil); err != nil {
			return nil, err
		}
	}
	own, err := generateOwn(s, p)
	if err != nil {
		return nil, err
	}
	return composeSidecar(s, p, key, out, own, true, nil)
}

// updateSidecar brings sidecar group g to snapshot s on its scope's new
// part (ch, from g's scope part when ch.base is g.out): its own part is
// kept when nothing it reads differs, and the names that changed are the
// scope's changed names plus its own. The diff is nil when not known
// (the cache then compares the generations).
func updateSidecar(g *gen.Generation, s *model.Snapshot, d *model.Diff, ch *outboundChange) (*gen.Generation, *gen.Diff, error) {
	gs := partOf(g)
	own := gs.own
	var ownCh map[string]map[string]bool
	fresh := gs.own == nil || !OwnUnchanged(g.Workload, g.Snap, s, d)
	if fresh {
		var err error
		if own, err = generateOwn(s, g.Workload); err != nil {
			return nil, nil, err
		}
		ownCh = ownChanges(gs.own, own)
	}
	// Kept, its listeners name its own clusters (InboundPassthroughCluster
	// among them) and the scope's BlackHoleCluster, there in every part;
	// and a type the scope's change leaves alone keeps g's composed map
	// (a change of route configurations only, the common one, then copies
	// nothing per VM).
	var kept map[string]*gen.ResourceMap
	if !fresh && ch.changed != nil && ch.base == gs.out {
		kept = map[string]*gen.ResourceMap{}
		for t := range own {
			if len(ch.changed[t]) == 0 {
				kept[t] = g.Types[t]
			}
		}
	}
	n, err := composeSidecar(s, g.Workload, g.Key, ch.part, own, fresh, kept)
	if err != nil {
		return nil, nil, err
	}
	if ch.changed == nil || ch.base != gs.out || gs.own == nil {
		return n, nil, nil
	}
	// Sidecars have no listeners made on demand: the changed names cover
	// every listener.
	gd := &gen.Diff{Prev: g, Changed: ch.changed, InboundSame: true}
	if len(ownCh) > 0 {
		gd.Changed = make(map[string]map[string]bool, len(ch.changed))
		for t, names := range ch.changed {
			if len(ownCh[t]) == 0 {
				gd.Changed[t] = names
				continue
			}
			m := maps.Clone(names)
			maps.Copy(m, ownCh[t])
			gd.Changed[t] = m
		}
	}
	return n, gd, nil
}

// clusterHost returns the service host of an outbound cluster or
// assignment name ("outbound|port|subset|host").
func clusterHost(name string) string {
	if i := strings.LastIndexByte(name, '|'); i >= 0 {
		return name[i+1:]
	}
	return name
}
