package sidecar

import (
	"cmp"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/xds/translate"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Endpoints returns the ClusterLoadAssignment of every EDS cluster
// Clusters returns, endpoints grouped by locality. With a proxy locality and
// a DestinationRule that enables locality load balancing, localities get
// priorities (failover, when outlier detection is on, as Istio requires)
// or weights (distribute).
func Endpoints(v *model.View) ([]*endpointv3.ClusterLoadAssignment, error) {
	return EndpointsOf(v, v.Clusters()), nil
}

// EndpointsOf returns the ClusterLoadAssignments of the EDS clusters among
// refs, for an update that regenerates the hosts a change touches.
// Endpoints depend only on the proxy's scope (model.View.OutboundKey).
func EndpointsOf(v *model.View, refs []model.Cluster) []*endpointv3.ClusterLoadAssignment {
	sc := baseScope(v)
	var out []*endpointv3.ClusterLoadAssignment
	for _, ref := range refs {
		tp := ref.DestinationRule.TrafficPolicy(ref.Port.Number, ref.Subset)
		if isPassthrough(ref, tp) || !usesEDS(ref.Service) {
			continue
		}
		out = append(out, sc.loadAssignment(ref, tp))
	}
	return out
}

func (sc *scope) loadAssignment(ref model.Cluster, tp *networking.TrafficPolicy) *endpointv3.ClusterLoadAssignment {
	name := ref.Name()
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	byLoc := make(map[string]*endpointv3.LocalityLbEndpoints)
	var locs []string
	for _, e := range ref.Service.SubsetEndpoints(ref.SubsetLabels) {
		lle := byLoc[e.Locality]
		if lle == nil {
			lle = &endpointv3.LocalityLbEndpoints{Locality: translate.Locality(e.Locality), LoadBalancingWeight: wrapperspb.UInt32(0)}
			byLoc[e.Locality] = lle
			locs = append(locs, e.Locality)
		}
		lle.LoadBalancingWeight.Value += e.EffectiveWeight()
		lle.LbEndpoints = append(lle.LbEndpoints, lbEndpoint(e, e.PortFor(ref.Port)))
	}
	slices.Sort(locs)
	weights := sc.localityWeights(ref, tp)
	prios := sc.localityPriorities(locs, tp)
	for _, l := range locs {
		lle := byLoc[l]
		if weights != nil {
			w := weights[l]
			if w == 0 {
				continue // distribute sends nothing here
			}
			lle.LoadBalancingWeight = wrapperspb.UInt32(w)
		}
		lle.Priority = prios[l]
		cla.Endpoints = append(cla.Endpoints, lle)
	}
	slices.SortStableFunc(cla.Endpoints, func(a, b *endpointv3.LocalityLbEndpoints) int { return cmp.Compare(a.Priority, b.Priority) })
	return cla
}

// localityLB returns the locality setting that applies to this proxy's
// cluster: the rule's, else the mesh's (MeshConfig localityLbSetting), else
// Istio's default (enabled, no distribute or failover rules: failover by
// locality under outlier detection); nil when the proxy has no locality or
// the setting is disabled.
func (sc *scope) localityLB(tp *networking.TrafficPolicy) *networking.LocalityLoadBalancerSetting {
	ls := cmp.Or(tp.GetLoadBalancer().GetLocalityLbSetting(), sc.v.Mesh().LocalityLB, &networking.LocalityLoadBalancerSetting{})
	if sc.p.Locality == "" || (ls.GetEnabled() != nil && !ls.GetEnabled().GetValue()) {
		return nil
	}
	return ls
}

// localityWeights returns the weight of each endpoint locality of the
// cluster from the first distribute rule whose "from" matches the proxy;
// a "to" weight is shared evenly by the localities it matches. nil when no
// rule applies.
func (sc *scope) localityWeights(ref model.Cluster, tp *networking.TrafficPolicy) map[string]uint32 {
	ls := sc.localityLB(tp)
	if ls == nil {
		return nil
	}
	for _, d := range ls.GetDistribute() {
		if !localityMatch(d.GetFrom(), sc.p.Locality) {
			continue
		}
		var locs []string
		for _, e := range ref.Service.SubsetEndpoints(ref.SubsetLabels) {
			if !slices.Contains(locs, e.Locality) {
				locs = append(locs, e.Locality)
			}
		}
		out := make(map[string]uint32, len(locs))
		for pattern, w := range d.GetTo() {
			var match []string
			for _, l := range locs {
				if localityMatch(pattern, l) {
					match = append(match, l)
				}
			}
			for _, l := range match {
				out[l] += w / uint32(len(match))
			}
		}
		return out
	}
	return nil
}

// localityPriorities implements failover: priority 0 for the proxy's own
// subzone, then zone, region, a failover target region, and the rest,
// renumbered densely. Only with outlier detection, as in Istio.
func (sc *scope) localityPriorities(locs []string, tp *networking.TrafficPolicy) map[string]uint32 {
	ls := sc.localityLB(tp)
	if ls == nil || len(ls.GetDistribute()) > 0 || tp.GetOutlierDetection() == nil {
		return nil
	}
	me := translate.Locality(sc.p.Locality)
	raw := make(map[string]uint32, len(locs))
	for _, l := range locs {
		o := translate.Locality(l)
		switch {
		case o.Region == me.Region && o.Zone == me.Zone && o.SubZone == me.SubZone:
			raw[l] = 0
		case o.Region == me.Region && o.Zone == me.Zone:
			raw[l] = 1
		case o.Region == me.Region:
			raw[l] = 2
		default:
			raw[l] = 4
			for _, f := range ls.GetFailover() {
				if f.GetFrom() == me.Region && f.GetTo() == o.Region {
					raw[l] = 3
				}
			}
		}
	}
	levels := make([]uint32, 0, len(raw))
	for _, p := range raw {
		levels = append(levels, p)
	}
	slices.Sort(levels)
	levels = slices.Compact(levels)
	out := make(map[string]uint32, len(raw))
	for l, p := range raw {
		out[l] = uint32(slices.Index(levels, p))
	}
	return out
}

// localityMatch matches "region/zone/subzone" patterns where "*" matches
// the rest and a shorter pattern matches everything below it.
func localityMatch(pattern, l string) bool {
	ps := strings.Split(pattern, "/")
	ls := strings.Split(l, "/")
	for i, p := range ps {
		if p == "*" {
			return true
		}
		if i >= len(ls) || ls[i] != p {
			return false
		}
	}
	return true
}
