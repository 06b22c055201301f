package model

import "strings"

// UnregisteredHost is a host of a mesh VirtualService the proxy sees that
// no service it sees has (an alias such as api.example.com, or a wildcard
// that matches no service). Istio's sidecars route requests whose Host is
// such a name by the VirtualService, on the HTTP ports of the services the
// VirtualService is bound to, or on port 80 when it is bound to none.
type UnregisteredHost struct {
	Host           string
	VirtualService *VirtualService
	// Services are the services the VirtualService is bound to for the
	// proxy (its other hosts'), whose HTTP ports carry the host.
	Services []*Service
}

// UnregisteredHosts returns the proxy's UnregisteredHosts in VirtualService
// order: of every mesh VirtualService exported to the proxy's namespace, the
// hosts that name no service the proxy sees. An exact host binds the
// VirtualService to its service; a wildcard to the services it matches for
// which it is the proxy's VirtualService (Istio's most specific wildcard).
// The slice is shared: callers must not change it.
func (v *View) UnregisteredHosts() []UnregisteredHost {
	v.unregOnce.Do(v.listUnregistered)
	return v.unregistered
}

// listUnregistered lists UnregisteredHosts' answer, once.
func (v *View) listUnregistered() {
	var out []UnregisteredHost
	for _, vs := range v.snap.VirtualServices {
		if !Visible(vs.ExportTo, v.proxy.Namespace) {
			continue
		}
		first := len(out)
		for _, h := range vs.Hosts {
			if !v.namesService(h) {
				out = append(out, UnregisteredHost{Host: h, VirtualService: vs})
			}
		}
		if len(out) == first {
			continue // every host names a service: the usual case
		}
		bound := v.boundServices(vs)
		for i := first; i < len(out); i++ {
			out[i].Services = bound
		}
	}
	v.unregistered = out
}

// namesService reports whether a VirtualService host names a service the
// proxy sees: exactly, or as a wildcard that matches one.
func (v *View) namesService(h string) bool {
	if !strings.HasPrefix(h, "*") {
		return v.ServiceFor(h) != nil
	}
	for _, svc := range v.Services() {
		if HostMatches(h, svc.Hostname) {
			return true
		}
	}
	return false
}

// boundServices are the services a VirtualService is bound to for the
// proxy: those its exact hosts name, and those its wildcards match for
// which it is the proxy's VirtualService.
func (v *View) boundServices(vs *VirtualService) []*Service {
	var out []*Service
	for _, h := range vs.Hosts {
		if !strings.HasPrefix(h, "*") {
			if svc := v.ServiceFor(h); svc != nil {
				out = append(out, svc)
			}
			continue
		}
		for _, svc := range v.Services() {
			if HostMatches(h, svc.Hostname) && v.VirtualServiceFor(svc.Hostname) == vs {
				out = append(out, svc)
			}
		}
	}
	return out
}

// EgressAllows reports whether the proxy's Sidecar lets its clients reach
// host of namespace ns on port (every host without a Sidecar egress, or
// when the kind does not apply its ports: Reads.EgressPorts).
func (v *View) EgressAllows(ns, host string, port uint32) bool {
	return !v.proxy.Reads.EgressPorts || egressAllows(v.sidecar, v.proxy.Namespace, &Service{Namespace: ns, Hostname: host}, port)
}
