package model

import (
	"maps"
	"slices"
	"strings"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
)

// Diff says which inputs of the generators differ between two snapshots,
// so that a generator can rebuild only what reads them. Hosts are service
// hosts (Service.Hostname).
type Diff struct {
	// Global is set when an input that is not bound to hosts differs: the
	// mesh settings, Sidecars, PeerAuthentications, AuthorizationPolicies,
	// RequestAuthentications, Telemetries or fetched JWKS, or the set of label keys that
	// VirtualService sourceLabels name (group keys read it). (WorkloadGroups feed only the
	// agents' WorkloadGroup resources: see SameWorkloadGroups.)
	// Anything may then differ; the host sets are left empty.
	Global bool
	// Services holds the hosts whose services (in any namespace) were
	// added, removed or changed in any field.
	Services map[string]bool
	// Endpoints holds the hosts of Services whose endpoint lists differ;
	// EndpointsOnly reports whether that is all that differs between them.
	Endpoints map[string]bool
	// VirtualServices and DestinationRules hold the hosts whose bound
	// VirtualServices or DestinationRules differ (added, removed, changed,
	// or reordered).
	VirtualServices  map[string]bool
	DestinationRules map[string]bool
	// Gateways is set when the Gateways or the VirtualServices bound to
	// gateways differ (only router proxies read them).
	Gateways bool

	endpointsOnly bool
	// gatewaySelection: which Gateways exist or what they select differs,
	// so routers' group keys may (SameViewKeys).
	gatewaySelection bool
}

// Empty reports whether the two snapshots feed the generators the same
// inputs.
func (d *Diff) Empty() bool {
	return !d.Global && !d.Gateways && len(d.Services) == 0 && len(d.VirtualServices) == 0 && len(d.DestinationRules) == 0
}

// SameViewKeys reports whether every workload's ViewKey is the same at
// both snapshots: a key reads only the Sidecars, the workload policies
// (PeerAuthentications, AuthorizationPolicies, RequestAuthentications),
// the label keys sourceLabels and failoverPriority name, and whether a
// locality setting or outlier detection applies anywhere (a proxyless
// key's locality), and any difference in those makes the diff Global; a
// router's also reads which Gateways exist and what they select.
func (d *Diff) SameViewKeys() bool { return d != nil && !d.Global && !d.gatewaySelection }

// EndpointsOnly reports whether nothing but endpoint lists of services
// differ.
func (d *Diff) EndpointsOnly() bool {
	return !d.Global && !d.Gateways && d.endpointsOnly && len(d.VirtualServices) == 0 && len(d.DestinationRules) == 0
}

// Hosts returns every host in the diff's host sets.
func (d *Diff) Hosts() map[string]bool {
	out := make(map[string]bool, len(d.Services)+len(d.VirtualServices)+len(d.DestinationRules))
	for _, m := range []map[string]bool{d.Services, d.VirtualServices, d.DestinationRules} {
		maps.Copy(out, m)
	}
	return out
}

// Compare returns what differs between prev and next. Unchanged values
// shared by both snapshots (see Rebuild) compare by pointer, so the cost
// is proportional to the number of hosts plus what changed.
func Compare(prev, next *Snapshot) *Diff {
	d := &Diff{Services: map[string]bool{}, Endpoints: map[string]bool{}, VirtualServices: map[string]bool{}, DestinationRules: map[string]bool{}, endpointsOnly: true}
	if !sameMesh(prev.Mesh, next.Mesh) ||
		!slices.EqualFunc(prev.Sidecars, next.Sidecars, sameSidecar) ||
		!slices.EqualFunc(prev.PeerAuthentications, next.PeerAuthentications, samePeerAuthentication) ||
		!slices.EqualFunc(prev.AuthorizationPolicies, next.AuthorizationPolicies, sameAuthorizationPolicy) ||
		!sameAuthn(prev, next) ||
		!slices.EqualFunc(prev.Telemetries, next.Telemetries, sameTelemetry) ||
		!slices.Equal(prev.sourceLabelKeys, next.sourceLabelKeys) ||
		prev.localityMatters != next.localityMatters || !slices.Equal(prev.failoverLabelKeys, next.failoverLabelKeys) {
		d.Global = true
		d.endpointsOnly = false
		return d
	}
	d.compareGateways(prev, next)
	defer d.tracingCollector(next)
	if next.delta != nil && next.delta.from == prev.id {
		// Rebuilt from prev by replacing the services of these hosts; the
		// rest, routing included, is prev's.
		for h := range next.delta.hosts {
			d.compareHost(h, prev.ServicesForHost(h), next.ServicesForHost(h))
		}
		return d
	}
	for h := range next.byHost {
		d.compareHost(h, prev.ServicesForHost(h), next.ServicesForHost(h))
	}
	for h := range prev.byHost {
		if _, ok := next.byHost[h]; !ok {
			d.Services[h] = true
			d.endpointsOnly = false
		}
	}
	diffBound(prev.vsByHost, next.vsByHost, sameVirtualService, d.VirtualServices)
	diffBound(prev.drByHost, next.drByHost, sameDestinationRule, d.DestinationRules)
	return d
}

// tracingCollector makes d Global when the service of a tracing or
// OpenTelemetry access log provider (the mesh's default or one a Telemetry
// names) differs: every HTTP connection manager of Envoy proxies names its
// cluster (or, without it, has no tracer or log), and routers have its
// cluster, not only the proxies of the ports its host has.
func (d *Diff) tracingCollector(s *Snapshot) {
	if d.Global {
		return
	}
	names := []string{s.Mesh.Tracing.DefaultProvider}
	if s.Mesh.AccessLog.DefaultProviders != "" {
		names = append(names, strings.Split(s.Mesh.AccessLog.DefaultProviders, ",")...)
	}
	for _, t := range s.Telemetries {
		for _, tr := range t.Spec.GetTracing() {
			names = append(names, providerNames(tr.GetProviders())...)
		}
		for _, l := range t.Spec.GetAccessLogging() {
			names = append(names, providerNames(l.GetProviders())...)
		}
	}
	for _, n := range names {
		p := s.Mesh.TelemetryProvider(n)
		if p == nil {
			continue
		}
		service := p.GetZipkin().GetService()
		if service == "" {
			service = p.GetOpentelemetry().GetService()
		}
		if service == "" {
			service = p.GetEnvoyOtelAls().GetService()
		}
		if _, h, ok := strings.Cut(service, "/"); ok {
			service = h
		}
		if service != "" && d.Services[service] {
			d.Global = true
			d.endpointsOnly = false
			return
		}
	}
}

// compareHost adds host to the diff when its services o (prev's) and n
// differ.
func (d *Diff) compareHost(h string, o, n []*Service) {
	if len(o) != len(n) {
		d.Services[h] = true
		d.endpointsOnly = false
		return
	}
	for i := range n {
		if o[i] == n[i] {
			continue
		}
		if !sameServiceBesidesEndpoints(o[i], n[i]) {
			d.Services[h] = true
			d.endpointsOnly = false
		} else if !SameEndpoints(o[i].Endpoints, n[i].Endpoints) {
			d.Services[h] = true
			d.Endpoints[h] = true
		}
	}
}

// diffBound adds to out the hosts whose bound lists differ.
func diffBound[T any](prev, next map[string][]*T, same func(a, b *T) bool, out map[string]bool) {
	for h, n := range next {
		if !slices.EqualFunc(prev[h], n, same) {
			out[h] = true
		}
	}
	for h, o := range prev {
		if _, ok := next[h]; !ok && len(o) > 0 {
			out[h] = true
		}
	}
}

func sameServiceBesidesEndpoints(a, b *Service) bool {
	return a.Hostname == b.Hostname && a.Namespace == b.Namespace && a.Name == b.Name &&
		slices.Equal(a.Ports, b.Ports) && a.Resolution == b.Resolution && a.MeshExternal == b.MeshExternal &&
		slices.Equal(a.ExportTo, b.ExportTo) && slices.Equal(a.Addresses, b.Addresses) && a.AutoAddress == b.AutoAddress &&
		slices.Equal(a.SubjectAltNames, b.SubjectAltNames)
}

func sameVirtualService(a, b *VirtualService) bool {
	return a == b || (a.Namespace == b.Namespace && a.Name == b.Name && slices.Equal(a.Hosts, b.Hosts) &&
		slices.Equal(a.ExportTo, b.ExportTo) && a.GatewaySemantics == b.GatewaySemantics && a.FromTLSRoute == b.FromTLSRoute &&
		(a.Spec == b.Spec || proto.Equal(a.Spec, b.Spec)))
}

func sameDestinationRule(a, b *DestinationRule) bool {
	return a == b || (a.Namespace == b.Namespace && a.Name == b.Name && a.Host == b.Host &&
		slices.Equal(a.ExportTo, b.ExportTo) && (a.Spec == b.Spec || proto.Equal(a.Spec, b.Spec)))
}

func sameSidecar(a, b *Sidecar) bool {
	return a == b || (a.Namespace == b.Namespace && a.Name == b.Name && maps.Equal(a.Selector, b.Selector) &&
		slices.Equal(a.Egress, b.Egress) && (a.Egress == nil) == (b.Egress == nil) && (a.Spec == b.Spec || proto.Equal(a.Spec, b.Spec)))
}

func samePeerAuthentication(a, b *PeerAuthentication) bool {
	return a == b || (a.Namespace == b.Namespace && a.Name == b.Name && maps.Equal(a.Selector, b.Selector) &&
		a.Mode == b.Mode && maps.Equal(a.PortModes, b.PortModes))
}

func sameAuthorizationPolicy(a, b *AuthorizationPolicy) bool {
	return a == b || (a.Namespace == b.Namespace && a.Name == b.Name && maps.Equal(a.Selector, b.Selector) &&
		a.Action == b.Action && a.DryRun == b.DryRun && slices.EqualFunc(a.Rules, b.Rules, func(x, y *security.Rule) bool { return proto.Equal(x, y) }))
}

// sameMesh compares mesh settings, their messages by content: a mesh.yaml
// in the config source is read into new messages on every full build.
func sameMesh(a, b Mesh) bool {
	if a.ExtensionProviders != nil && b.ExtensionProviders != nil &&
		slices.EqualFunc(a.ExtensionProviders.List, b.ExtensionProviders.List, func(x, y *meshv1alpha1.MeshConfig_ExtensionProvider) bool { return proto.Equal(x, y) }) {
		a.ExtensionProviders = b.ExtensionProviders
	}
	if proto.Equal(a.DefaultHTTPRetry, b.DefaultHTTPRetry) {
		a.DefaultHTTPRetry = b.DefaultHTTPRetry
	}
	if proto.Equal(a.LocalityLB, b.LocalityLB) {
		a.LocalityLB = b.LocalityLB
	}
	if proto.Equal(a.TCPKeepalive, b.TCPKeepalive) {
		a.TCPKeepalive = b.TCPKeepalive
	}
	if proto.Equal(a.Tracing.Proxy, b.Tracing.Proxy) {
		a.Tracing.Proxy = b.Tracing.Proxy
	}
	return a == b
}

// AffectedHosts returns the hosts whose generated resources may differ
// between prev and next, given d, their Diff: every host in the diff, and
// every host whose VirtualService (in either snapshot) routes to a host
// whose services or DestinationRules differ (routesTo says whether a
// VirtualService names a host of either set: each kind's generators name
// clusters from their own parts of a route), since the cluster a route
// names for a destination depends on the host's ports (a destination
// without a port takes the host's only port) and on whether the cluster
// exists.
func AffectedHosts(prev, next *Snapshot, d *Diff, routesTo func(vs *VirtualService, a, b map[string]bool) bool) map[string]bool {
	out := d.Hosts()
	if len(d.Services) == 0 && len(d.DestinationRules) == 0 {
		return out
	}
	for _, s := range []*Snapshot{prev, next} {
		for _, vs := range s.VirtualServices {
			if !routesTo(vs, d.Services, d.DestinationRules) {
				continue
			}
			for _, h := range vs.Hosts {
				if !strings.HasPrefix(h, "*") {
					out[h] = true
					continue
				}
				for _, svc := range s.Services {
					if HostMatches(h, svc.Hostname) {
						out[svc.Hostname] = true
					}
				}
			}
		}
	}
	return out
}
