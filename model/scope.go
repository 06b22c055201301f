package model

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// SidecarFor returns the Sidecar that scopes a workload: the first one in its
// namespace whose selector matches its labels, else the first one in the
// namespace without a selector, else nil (no scoping).
func (s *Snapshot) SidecarFor(ns string, labels map[string]string) *Sidecar {
	var fallback *Sidecar
	for _, sc := range s.sidecarsNS[ns] {
		if len(sc.Selector) == 0 {
			if fallback == nil {
				fallback = sc
			}
			continue
		}
		if LabelsMatch(sc.Selector, labels) {
			return sc
		}
	}
	return fallback
}

// allows reports whether the Sidecar lets its workloads reach svc.
func (sc *Sidecar) allows(svc *Service) bool {
	if sc == nil || sc.Egress == nil {
		return true
	}
	matches := func(e EgressHost) bool {
		return (e.Namespace == "*" || e.Namespace == svc.Namespace) && HostMatches(e.Host, svc.Hostname)
	}
	// Exclusions ("~ns/host") win over imports, as in Istio.
	for _, e := range sc.Egress {
		if e.Exclude && matches(e) {
			return false
		}
	}
	for _, e := range sc.Egress {
		if !e.Exclude && matches(e) {
			return true
		}
	}
	return false
}

// VisibleServices returns the services a workload in ns, scoped by sc (may
// be nil), can reach: exported to ns and allowed by the Sidecar. When several
// namespaces define one host, the workload's own namespace wins, else the
// first namespace in order. The result is sorted by host.
func (s *Snapshot) VisibleServices(ns string, sc *Sidecar) []*Service {
	var out []*Service
	for i := 0; i < len(s.Services); {
		j := i
		for j < len(s.Services) && s.Services[j].Hostname == s.Services[i].Hostname {
			j++
		}
		if svc := pickService(s.Services[i:j], ns, sc); svc != nil {
			out = append(out, svc)
		}
		i = j
	}
	return out
}

// ServiceFor returns the service for host as seen from ns and sc, or nil.
func (s *Snapshot) ServiceFor(host, ns string, sc *Sidecar) *Service {
	return pickService(s.ServicesForHost(host), ns, sc)
}

func pickService(cands []*Service, ns string, sc *Sidecar) *Service {
	var first *Service
	for _, svc := range cands {
		if !Visible(svc.ExportTo, ns) || !sc.allows(svc) {
			continue
		}
		if svc.Namespace == ns {
			return svc
		}
		if first == nil {
			first = svc
		}
	}
	return first
}

// VirtualServiceFor returns the VirtualService that routes host for a
// workload in ns: among those exported to ns, one from ns first, else the
// first in order (exact host matches before wildcards).
func (s *Snapshot) VirtualServiceFor(host, ns string) *VirtualService {
	var first *VirtualService
	for _, vs := range s.vsByHost[host] {
		if !Visible(vs.ExportTo, ns) {
			continue
		}
		if vs.Namespace == ns {
			return vs
		}
		if first == nil {
			first = vs
		}
	}
	return first
}

// DestinationRuleFor returns the DestinationRule for host as seen from a
// workload in ns, looked up as Istio does: the workload's namespace, then the
// service's namespace, then the root namespace, each rule exported to ns; a
// rule of any other namespace does not apply (Istio's destinationRule).
func (s *Snapshot) DestinationRuleFor(host, ns, svcNS string) *DestinationRule {
	cands := s.drByHost[host]
	for _, want := range []string{ns, svcNS, s.Mesh.RootNamespace} {
		for _, dr := range cands {
			if dr.Namespace == want && Visible(dr.ExportTo, ns) {
				return dr
			}
		}
	}
	return nil
}

// Subset returns the named subset of the rule, or nil.
func (dr *DestinationRule) Subset(name string) *networking.Subset {
	if dr == nil {
		return nil
	}
	for _, ss := range dr.Spec.GetSubsets() {
		if ss.GetName() == name {
			return ss
		}
	}
	return nil
}

// Subsets returns the rule's subsets; nil for a nil rule.
func (dr *DestinationRule) Subsets() []*networking.Subset {
	if dr == nil {
		return nil
	}
	return dr.Spec.GetSubsets()
}

// SubsetNames returns the rule's subset names in order.
func (dr *DestinationRule) SubsetNames() []string {
	if dr == nil {
		return nil
	}
	var out []string
	for _, ss := range dr.Spec.GetSubsets() {
		out = append(out, ss.GetName())
	}
	return out
}

// TrafficPolicy returns the effective policy for a service port and subset
// ("" for none), merged as Istio merges it (retryBudget and proxyProtocol
// too: a level's, replaced by the subset's when it sets one; a port-level
// entry has neither, so one for the port drops its level's): the rule's top-level policy,
// replaced by its port-level settings for the port when it has an entry for
// it, then overlaid by the subset's policy (itself replaced by the subset's
// port-level entry for the port). Port-level settings do not inherit: an
// entry for the port replaces loadBalancer, connectionPool, outlierDetection
// and tls together, so a field it leaves out takes its default even when the
// level above sets it (the API's documented meaning). A subset's policy
// replaces each field it sets. The result holds loadBalancer,
// connectionPool and outlierDetection as new messages (nil when none is
// set); inputs are not modified.
func (dr *DestinationRule) TrafficPolicy(port uint32, subset string) *networking.TrafficPolicy {
	p := dr.policy(port, subset)
	if p.lb == nil && p.cp == nil && p.od == nil && p.rb == nil && p.pp == nil {
		return nil
	}
	out := &networking.TrafficPolicy{}
	if p.pp != nil {
		out.ProxyProtocol = proto.Clone(p.pp).(*networking.TrafficPolicy_ProxyProtocol)
	}
	if p.rb != nil {
		out.RetryBudget = proto.Clone(p.rb).(*networking.TrafficPolicy_RetryBudget)
	}
	if p.lb != nil {
		out.LoadBalancer = proto.Clone(p.lb).(*networking.LoadBalancerSettings)
	}
	if p.cp != nil {
		out.ConnectionPool = proto.Clone(p.cp).(*networking.ConnectionPoolSettings)
	}
	if p.od != nil {
		out.OutlierDetection = proto.Clone(p.od).(*networking.OutlierDetection)
	}
	return out
}

// policyFields are the parts of a traffic policy that a port-level entry
// replaces together.
type policyFields struct {
	lb  *networking.LoadBalancerSettings
	cp  *networking.ConnectionPoolSettings
	od  *networking.OutlierDetection
	tls *networking.ClientTLSSettings
	rb  *networking.TrafficPolicy_RetryBudget   // not part of a port-level entry
	pp  *networking.TrafficPolicy_ProxyProtocol // nor this
}

// levelFields returns tp's fields for port: those of tp's port-level entry
// for the port when it has one (and true), else tp's own.
func levelFields(tp *networking.TrafficPolicy, port uint32) (policyFields, bool) {
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() == port {
			return policyFields{pl.GetLoadBalancer(), pl.GetConnectionPool(), pl.GetOutlierDetection(), pl.GetTls(), nil, nil}, true
		}
	}
	return policyFields{tp.GetLoadBalancer(), tp.GetConnectionPool(), tp.GetOutlierDetection(), tp.GetTls(), tp.GetRetryBudget(), tp.GetProxyProtocol()}, false
}

// policy merges the rule's levels for port and subset (see TrafficPolicy).
func (dr *DestinationRule) policy(port uint32, subset string) policyFields {
	if dr == nil {
		return policyFields{}
	}
	out, _ := levelFields(dr.Spec.GetTrafficPolicy(), port)
	ss := dr.Subset(subset)
	if ss.GetTrafficPolicy() == nil {
		return out
	}
	sub, portLevel := levelFields(ss.GetTrafficPolicy(), port)
	if sub.lb != nil || portLevel {
		out.lb = sub.lb
	}
	if sub.cp != nil || portLevel {
		out.cp = sub.cp
	}
	if sub.od != nil || portLevel {
		out.od = sub.od
	}
	if sub.tls != nil || portLevel {
		out.tls = sub.tls
	}
	if sub.rb != nil {
		out.rb = sub.rb
	}
	if sub.pp != nil {
		out.pp = sub.pp
	}
	return out
}

// SubsetEndpoints returns the service endpoints that carry every label of
// the subset; all endpoints for subset "" or an unknown subset name.
func (svc *Service) SubsetEndpoints(labels map[string]string) []*Endpoint {
	if len(labels) == 0 {
		return svc.Endpoints
	}
	return slices.DeleteFunc(slices.Clone(svc.Endpoints), func(e *Endpoint) bool { return !LabelsMatch(labels, e.Labels) })
}

// Port returns the service port with the number, and whether it exists.
func (svc *Service) Port(number uint32) (Port, bool) {
	for _, p := range svc.Ports {
		if p.Number == number {
			return p, true
		}
	}
	return Port{}, false
}

// SameEndpoints reports whether two endpoint lists are equal field by field,
// so a generator can reuse what it built for a previous snapshot.
func SameEndpoints(a, b []*Endpoint) bool {
	return slices.EqualFunc(a, b, func(x, y *Endpoint) bool {
		return x.Address == y.Address && x.Locality == y.Locality && x.Weight == y.Weight && x.Network == y.Network &&
			x.ServiceAccount == y.ServiceAccount && x.Origin == y.Origin && maps.Equal(x.Ports, y.Ports) && maps.Equal(x.Labels, y.Labels)
	})
}
