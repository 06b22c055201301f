package sidecar

import "github.com/vmesh/vmesh/model"

// ListenerRoutedPorts returns the ports of the services of hosts at s
// whose VirtualService routes are in their outbound listeners
// (RoutedInListener): TCP and TLS ports.
func ListenerRoutedPorts(hosts map[string]bool, s *model.Snapshot) map[uint32]bool {
	out := map[uint32]bool{}
	for h := range hosts {
		for _, svc := range s.ServicesForHost(h) {
			for _, p := range svc.Ports {
				if RoutedInListener(p.Protocol) {
					out[p.Number] = true
				}
			}
		}
	}
	return out
}

// PortsOf returns every port of the services of hosts in either snapshot,
// and port 80 where a VirtualService host that no service has is involved.
func PortsOf(hosts map[string]bool, snaps ...*model.Snapshot) map[uint32]bool {
	out := map[uint32]bool{}
	for _, s := range snaps {
		for h := range hosts {
			svcs := s.ServicesForHost(h)
			for _, svc := range svcs {
				for _, p := range svc.Ports {
					out[p.Number] = true
				}
			}
			// A VirtualService host that no service has routes on port 80
			// when its VirtualService is bound to no HTTP service
			// (Outbound.Routes), so its changes and its VirtualService's
			// (bound services come and go) touch port 80 too.
			if len(svcs) == 0 {
				out[80] = true
			}
			for _, vs := range s.VirtualServicesForHost(h) {
				for _, vh := range vs.Hosts {
					if len(s.ServicesForHost(vh)) == 0 {
						out[80] = true
					}
				}
			}
		}
	}
	return out
}

// AffectedHosts returns the hosts whose sidecar resources may differ
// between prev and next, given d (model.AffectedHosts): a sidecar's route
// also names clusters through its mirrors and TCP and TLS routes
// (routesToAny).
func AffectedHosts(prev, next *model.Snapshot, d *model.Diff) map[string]bool {
	return model.AffectedHosts(prev, next, d, routesToAny)
}

// routesToAny reports whether a route of vs (HTTP destination or
// mirror, TCP or TLS destination) names a host of either set.
func routesToAny(vs *model.VirtualService, a, b map[string]bool) bool {
	in := func(host string) bool {
		if host == "" {
			return false
		}
		h := model.DestinationHost(host, vs.Namespace)
		return a[h] || b[h]
	}
	for _, hr := range vs.Spec.GetHttp() {
		for _, dst := range hr.GetRoute() {
			if in(dst.GetDestination().GetHost()) {
				return true
			}
		}
		if in(hr.GetMirror().GetHost()) {
			return true
		}
		for _, m := range hr.GetMirrors() {
			if in(m.GetDestination().GetHost()) {
				return true
			}
		}
	}
	for _, tr := range vs.Spec.GetTcp() {
		for _, dst := range tr.GetRoute() {
			if in(dst.GetDestination().GetHost()) {
				return true
			}
		}
	}
	for _, tr := range vs.Spec.GetTls() {
		for _, dst := range tr.GetRoute() {
			if in(dst.GetDestination().GetHost()) {
				return true
			}
		}
	}
	return false
}

// OwnUnchanged reports whether a sidecar's own part is the same at s as at
// prev, given what differs (a non-global diff): it reads the services and
// their DestinationRules only through the endpoints it owns, so only a
// changed service or DestinationRule of a host with such an endpoint in
// either snapshot can change it.
func OwnUnchanged(w model.Workload, prev, s *model.Snapshot, d *model.Diff) bool {
	if d == nil || d.Global {
		return false
	}
	// Its inbound clusters read its services and their DestinationRules
	// (the connection pool, applied server-side).
	for _, hosts := range []map[string]bool{d.Services, d.DestinationRules} {
		if ownsAny(w, hosts, prev, s) {
			return false
		}
	}
	return true
}

// ownsAny reports whether w has an endpoint in a service of one of hosts
// at either snapshot.
func ownsAny(w model.Workload, hosts map[string]bool, prev, s *model.Snapshot) bool {
	for h := range hosts {
		for _, snap := range []*model.Snapshot{prev, s} {
			for _, svc := range snap.ServicesForHost(h) {
				for _, e := range svc.Endpoints {
					if OwnsEndpoint(w, e) {
						return true
					}
				}
			}
		}
	}
	return false
}
