package model

import (
	"maps"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// LocalityLB is how one proxy balances one cluster's endpoints by locality,
// by the rules of Istio's endpoint builder: the DestinationRule's
// localityLbSetting for the cluster's port and subset, else MeshConfig's
// (nil there: Istio's default, enabled with no rules); distribute applies
// always, failover (priorities by locality, or by failoverPriority labels)
// only under outlier detection, without which no endpoint is ever ejected
// and traffic never moves down a priority. The View attaches it to each
// Cluster (Cluster.LocalityLB); both kinds' EDS generators apply it with one
// function (xds/translate.LoadAssignment).
type LocalityLB struct {
	// Proxy is the proxy's locality, region/zone/subzone.
	Proxy string
	// ProxyLabels are the proxy's labels that failoverPriority names.
	ProxyLabels map[string]string
	// Setting is the localityLbSetting that applies (never disabled).
	Setting *networking.LocalityLoadBalancerSetting
	// Failover: the cluster has outlier detection, so failover and
	// failoverPriority apply.
	Failover bool
}

// localityLB returns the LocalityLB of the proxy's cluster of port and
// subset under dr; nil when the proxy has no locality, the setting is
// disabled, or nothing of it applies (no distribute, no outlier
// detection).
func (v *View) localityLB(dr *DestinationRule, port uint32, subset string) *LocalityLB {
	if v.proxy.Locality == "" {
		return nil
	}
	p := dr.policy(port, subset)
	ls := p.lb.GetLocalityLbSetting()
	if ls == nil {
		ls = v.snap.Mesh.LocalityLB
	}
	if ls == nil {
		ls = &networking.LocalityLoadBalancerSetting{}
	}
	if ls.GetEnabled() != nil && !ls.GetEnabled().GetValue() {
		return nil
	}
	failover := p.od != nil
	if len(ls.GetDistribute()) == 0 && !failover {
		return nil
	}
	return &LocalityLB{Proxy: v.proxy.Locality, ProxyLabels: v.proxy.Labels, Setting: ls, Failover: failover}
}

// LocalityKey is what locality load balancing reads of the proxy: its
// locality and the labels failoverPriority lists name ("key=value,...");
// proxies of one scope with one LocalityKey get the same load assignments
// (a sidecar's OutboundKey and cluster memo carry it).
func (v *View) LocalityKey() string { return localityKey(v.snap, v.proxy) }

func localityKey(s *Snapshot, w Workload) string {
	var b strings.Builder
	b.WriteString(w.Locality)
	for _, k := range s.failoverLabelKeys {
		if v, ok := w.Labels[k]; ok {
			b.WriteString("|" + k + "=" + v)
		}
	}
	return b.String()
}

// localityMatters reports whether a locality setting can apply to some
// proxy's cluster in a snapshot with these DestinationRules and mesh: a
// distribute rule that is not disabled, or outlier detection anywhere
// (Istio fails over by locality under it by default). Only then does a
// kind that reads the locality where it matters (Reads.Locality) see it,
// and its group key carry it.
func localityMatters(mesh Mesh, drs []*DestinationRule) bool {
	enabled := func(ls *networking.LocalityLoadBalancerSetting) bool {
		return ls.GetEnabled() == nil || ls.GetEnabled().GetValue()
	}
	if ls := mesh.LocalityLB; ls != nil && enabled(ls) && len(ls.GetDistribute()) > 0 {
		return true
	}
	policy := func(tp *networking.TrafficPolicy) bool {
		if tp.GetOutlierDetection() != nil {
			return true
		}
		if ls := tp.GetLoadBalancer().GetLocalityLbSetting(); enabled(ls) && len(ls.GetDistribute()) > 0 {
			return true
		}
		for _, pl := range tp.GetPortLevelSettings() {
			if pl.GetOutlierDetection() != nil {
				return true
			}
			if ls := pl.GetLoadBalancer().GetLocalityLbSetting(); enabled(ls) && len(ls.GetDistribute()) > 0 {
				return true
			}
		}
		return false
	}
	for _, dr := range drs {
		if policy(dr.Spec.GetTrafficPolicy()) {
			return true
		}
		for _, ss := range dr.Spec.GetSubsets() {
			if policy(ss.GetTrafficPolicy()) {
				return true
			}
		}
	}
	return false
}

// failoverLabelKeys returns the label keys the failoverPriority lists of
// the DestinationRules and the mesh name ("key" or "key=value"), sorted:
// the labels of a proxy a kind that reads the locality where it matters
// also sees.
func failoverLabelKeys(mesh Mesh, drs []*DestinationRule) []string {
	keys := map[string]bool{}
	add := func(ls *networking.LocalityLoadBalancerSetting) {
		for _, l := range ls.GetFailoverPriority() {
			k, _, _ := strings.Cut(l, "=")
			keys[k] = true
		}
	}
	add(mesh.LocalityLB)
	policy := func(tp *networking.TrafficPolicy) {
		add(tp.GetLoadBalancer().GetLocalityLbSetting())
		for _, pl := range tp.GetPortLevelSettings() {
			add(pl.GetLoadBalancer().GetLocalityLbSetting())
		}
	}
	for _, dr := range drs {
		policy(dr.Spec.GetTrafficPolicy())
		for _, ss := range dr.Spec.GetSubsets() {
			policy(ss.GetTrafficPolicy())
		}
	}
	return slices.Sorted(maps.Keys(keys))
}
