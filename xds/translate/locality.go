package translate

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// The topology labels Istio adds to a workload's labels from its locality
// (for failoverPriority).
const (
	labelRegion  = "topology.kubernetes.io/region"
	labelZone    = "topology.kubernetes.io/zone"
	labelSubzone = "topology.istio.io/subzone"
)

// LoadAssignment is the ClusterLoadAssignment of ref for both kinds of
// proxy: the endpoints of its subset that lbEndpoint turns into an
// LbEndpoint (nil leaves one out), grouped by locality in locality order,
// each locality weighing the sum of its endpoints' weights; then the
// proxy's locality load balancing (ref.LocalityLB), by Istio's rules:
// distribute sets locality weights, failover priorities (by locality,
// failoverPriority labels first when set); localities sorted by priority.
func LoadAssignment(ref model.Cluster, lbEndpoint func(*model.Endpoint) *endpointv3.LbEndpoint) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: ref.Name()}
	type group struct {
		lle *endpointv3.LocalityLbEndpoints
		eps []*model.Endpoint
	}
	byLoc := make(map[string]*group)
	for _, e := range ref.Service.SubsetEndpoints(ref.SubsetLabels) {
		lb := lbEndpoint(e)
		if lb == nil {
			continue
		}
		g := byLoc[e.Locality]
		if g == nil {
			g = &group{lle: &endpointv3.LocalityLbEndpoints{Locality: Locality(e.Locality), LoadBalancingWeight: wrapperspb.UInt32(0)}}
			byLoc[e.Locality] = g
		}
		g.lle.LoadBalancingWeight.Value += lb.GetLoadBalancingWeight().GetValue()
		g.lle.LbEndpoints = append(g.lle.LbEndpoints, lb)
		g.eps = append(g.eps, e)
	}
	var eps [][]*model.Endpoint
	for _, l := range slices.Sorted(maps.Keys(byLoc)) {
		cla.Endpoints = append(cla.Endpoints, byLoc[l].lle)
		eps = append(eps, byLoc[l].eps)
	}
	ApplyLocalityLB(cla, eps, ref.LocalityLB)
	return cla
}

// ApplyLocalityLB applies lb to cla, whose i-th locality holds the
// endpoints eps[i] (in the order of its LbEndpoints), as Istio's
// ApplyLocalityLoadBalancer does: distribute rules, else (with outlier
// detection only) failoverPriority and failover. Nothing for nil.
func ApplyLocalityLB(cla *endpointv3.ClusterLoadAssignment, eps [][]*model.Endpoint, lb *model.LocalityLB) {
	if lb == nil || len(cla.GetEndpoints()) == 0 {
		return
	}
	ls := lb.Setting
	switch {
	case len(ls.GetDistribute()) > 0:
		applyDistribute(lb.Proxy, cla, ls.GetDistribute())
	case !lb.Failover:
		return
	case len(ls.GetFailoverPriority()) > 0:
		applyFailoverPriority(cla, eps, withTopology(lb.ProxyLabels, lb.Proxy), ls.GetFailoverPriority())
		if len(ls.GetFailover()) > 0 {
			applyFailover(lb.Proxy, cla, ls.GetFailover())
		}
	default:
		applyFailover(lb.Proxy, cla, ls.GetFailover())
	}
	slices.SortStableFunc(cla.Endpoints, func(a, b *endpointv3.LocalityLbEndpoints) int { return cmp.Compare(a.Priority, b.Priority) })
}

// Distributes reports whether a distribute rule of lb applies to the
// proxy (its from matches the proxy's locality): an Envoy cluster then
// balances by locality weight.
func Distributes(lb *model.LocalityLB) bool {
	if lb == nil {
		return false
	}
	for _, d := range lb.Setting.GetDistribute() {
		if d != nil && LocalityMatch(lb.Proxy, d.GetFrom()) {
			return true
		}
	}
	return false
}

// LocalityMatch reports whether locality l (region/zone/subzone) matches
// a rule's locality pattern as Istio matches them: "*" or an empty zone
// or subzone matches any.
func LocalityMatch(l, pattern string) bool {
	me := Locality(l)
	p := Locality(pattern)
	return (p.Region == "*" || p.Region == me.Region) &&
		(p.Zone == "*" || p.Zone == "" || p.Zone == me.Zone) &&
		(p.SubZone == "*" || p.SubZone == "" || p.SubZone == me.SubZone)
}

// applyDistribute applies the first distribute rule whose from matches the
// proxy's locality: each "to" pattern's weight is shared by the localities
// it matches (first pattern wins; patterns in sorted order) in proportion
// to their own weights, rounded up; the localities no pattern matches keep
// their place but lose their endpoints.
func applyDistribute(proxy string, cla *endpointv3.ClusterLoadAssignment, rules []*networking.LocalityLoadBalancerSetting_Distribute) {
	for _, d := range rules {
		if d == nil || !LocalityMatch(proxy, d.GetFrom()) {
			continue
		}
		unmatched := make(map[int]bool, len(cla.Endpoints))
		for i := range cla.Endpoints {
			unmatched[i] = true
		}
		for _, pattern := range slices.Sorted(maps.Keys(d.GetTo())) {
			weight := d.GetTo()[pattern]
			dest := map[int]uint32{}
			var total uint32
			for i, lle := range cla.Endpoints {
				if !unmatched[i] || !LocalityMatch(localityString(lle), pattern) {
					continue
				}
				delete(unmatched, i)
				w := uint32(1)
				if lle.GetLoadBalancingWeight() != nil {
					w = lle.GetLoadBalancingWeight().GetValue()
				}
				dest[i] = w
				total += w
			}
			for i, w := range dest {
				if share := float64(w*weight) / float64(total); share > 0 {
					cla.Endpoints[i].LoadBalancingWeight = wrapperspb.UInt32(uint32(math.Ceil(share)))
				}
			}
		}
		for i := range unmatched {
			cla.Endpoints[i].LbEndpoints = nil
		}
		return
	}
}

// applyFailover sets each locality's priority by its distance from the
// proxy's: same subzone 0, same zone 1, same region 2, another region 3,
// but 4 for one other than the failover target of the first rule from the
// proxy's region; on top of priorities failoverPriority gave (five levels
// each); then renumbered densely from 0.
func applyFailover(proxy string, cla *endpointv3.ClusterLoadAssignment, failover []*networking.LocalityLoadBalancerSetting_Failover) {
	me := Locality(proxy)
	for _, lle := range cla.Endpoints {
		o := lle.GetLocality()
		var p uint32
		switch {
		case o.GetRegion() != me.Region:
			p = 3
			for _, f := range failover {
				if f.GetFrom() == me.Region {
					if o.GetRegion() != f.GetTo() {
						p = 4
					}
					break
				}
			}
		case o.GetZone() != me.Zone:
			p = 2
		case o.GetSubZone() != me.SubZone:
			p = 1
		}
		lle.Priority = lle.Priority*5 + p
	}
	densePriorities(cla.Endpoints)
}

// applyFailoverPriority splits each locality by the failoverPriority
// labels: an endpoint matching the proxy on all of them has priority 0,
// one differing first on the j-th of n has n-j (a "label=value" entry
// compares with value instead of the proxy's label); each part weighs its
// endpoints' weights; priorities renumbered densely from 0. Istio applies
// nothing to a proxy without labels.
func applyFailoverPriority(cla *endpointv3.ClusterLoadAssignment, eps [][]*model.Endpoint, proxyLabels map[string]string, priorities []string) {
	if len(proxyLabels) == 0 {
		return
	}
	keys := make([]string, len(priorities))
	want := make(map[string]string, len(priorities))
	for i, p := range priorities {
		k, v, ok := strings.Cut(p, "=")
		keys[i] = k
		if ok {
			want[k] = v
		}
	}
	includesNetwork := keys[0] == "topology.istio.io/network"
	var out []*endpointv3.LocalityLbEndpoints
	for i, lle := range cla.Endpoints {
		if i >= len(eps) {
			break
		}
		byPrio := map[uint32][]int{}
		for j, e := range eps[i] {
			labels := withTopology(e.Labels, e.Locality)
			var prio, adjust int
			for n, k := range keys {
				v, ok := want[k]
				if !ok {
					v = proxyLabels[k]
				}
				if v != labels[k] {
					if n == 0 && includesNetwork {
						adjust = len(keys)
						continue
					}
					prio = len(keys) - n
					break
				}
			}
			byPrio[uint32(prio+adjust)] = append(byPrio[uint32(prio+adjust)], j)
		}
		for _, p := range slices.Sorted(maps.Keys(byPrio)) {
			part := &endpointv3.LocalityLbEndpoints{Locality: lle.GetLocality(), Priority: p}
			var w uint32
			for _, j := range byPrio[p] {
				part.LbEndpoints = append(part.LbEndpoints, lle.LbEndpoints[j])
				w += lle.LbEndpoints[j].GetLoadBalancingWeight().GetValue()
			}
			part.LoadBalancingWeight = wrapperspb.UInt32(w)
			out = append(out, part)
		}
	}
	cla.Endpoints = out
	densePriorities(cla.Endpoints)
}

// densePriorities renumbers priorities 0, 1, 2... keeping their order.
func densePriorities(ls []*endpointv3.LocalityLbEndpoints) {
	levels := make([]uint32, 0, len(ls))
	for _, l := range ls {
		levels = append(levels, l.Priority)
	}
	slices.Sort(levels)
	levels = slices.Compact(levels)
	for _, l := range ls {
		l.Priority = uint32(slices.Index(levels, l.Priority))
	}
}

// withTopology returns labels with the topology labels Istio derives from
// a locality added (Istio's AugmentLabels).
func withTopology(labels map[string]string, locality string) map[string]string {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	l := Locality(locality)
	for k, v := range map[string]string{labelRegion: l.Region, labelZone: l.Zone, labelSubzone: l.SubZone} {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

func localityString(lle *endpointv3.LocalityLbEndpoints) string {
	l := lle.GetLocality()
	return strings.TrimRight(l.GetRegion()+"/"+l.GetZone()+"/"+l.GetSubZone(), "/")
}
