package model

import (
	"maps"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// Gateway is one Istio Gateway: the servers the router proxies it selects
// serve.
type Gateway struct {
	Namespace string
	Name      string
	// Selector picks the router proxies by their labels; nil (none written)
	// selects every router, as Istio's gateways apply a Gateway without a
	// selector to every gateway workload.
	Selector map[string]string
	// Spec is the Gateway as written; shared, never modified.
	Spec *networking.Gateway
}

// Key returns "namespace/name", the name VirtualServices bind to.
func (g *Gateway) Key() string { return g.Namespace + "/" + g.Name }

// Selects reports whether the Gateway applies to a router with labels:
// its selector is a subset of them (Istio's SubsetOf; PILOT_SCOPE_GATEWAY_TO_NAMESPACE
// is false by default, so a Gateway of any namespace applies).
func (g *Gateway) Selects(labels map[string]string) bool {
	return g.Selector == nil || LabelsMatch(g.Selector, labels)
}

// ResolveGatewayName resolves a gateway a VirtualService in ns names (in
// gateways or a match's gateways) to "namespace/name", as Istio's
// resolveGatewayName: "ns/name" as is ("./name" in ns), a short name in
// ns, and the legacy "name.ns.svc.cluster.local" (or "name.ns") to
// "ns/name". "mesh" stays "mesh".
func ResolveGatewayName(name, ns string) string {
	if name == "mesh" {
		return name
	}
	if gns, gname, ok := strings.Cut(name, "/"); ok {
		if gns == "." {
			return ns + "/" + gname
		}
		return name
	}
	short, rest, ok := strings.Cut(name, ".")
	if !ok {
		return ns + "/" + name
	}
	gns, _, _ := strings.Cut(rest, ".")
	return gns + "/" + short
}

// gatewayNames returns the gateways a VirtualService in ns binds to, each
// resolved (ResolveGatewayName), "mesh" left out; nil when it binds to
// none but the mesh.
func gatewayNames(gws []string, ns string) []string {
	var out []string
	for _, g := range gws {
		if g == "mesh" {
			continue
		}
		if r := ResolveGatewayName(g, ns); !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

func (b *builder) addGateway(o *store.Object) {
	gw, ok := o.Spec.(*networking.Gateway)
	if !ok {
		b.problem(o, "spec is %T, want Gateway", o.Spec)
		return
	}
	var sel map[string]string
	if gw.GetSelector() != nil {
		sel = maps.Clone(gw.GetSelector())
	}
	b.s.Gateways = append(b.s.Gateways, &Gateway{Namespace: o.Namespace, Name: o.Name, Selector: sel, Spec: gw})
}

// GatewaysFor returns the Gateways that select a router with labels, by
// namespace and name.
func (s *Snapshot) GatewaysFor(labels map[string]string) []*Gateway {
	var out []*Gateway
	for _, g := range s.Gateways {
		if g.Selects(labels) {
			out = append(out, g)
		}
	}
	return out
}

// gatewayKey is the part of a router's group key its Gateways make: their
// keys, in order.
func gatewayKey(s *Snapshot, labels map[string]string) string {
	var b strings.Builder
	for i, g := range s.GatewaysFor(labels) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(g.Key())
	}
	return b.String()
}

// VirtualServicesForGateway returns the VirtualServices bound to gateway
// ("namespace/name") that a router in ns sees, in Istio's order
// (VirtualServicesForGateway): those exported to ns only (private to ns,
// or naming ns in exportTo), then those exported everywhere, of ns first.
// Each group is by namespace and name.
func (s *Snapshot) VirtualServicesForGateway(ns, gateway string) []*VirtualService {
	var private, exported, own, public []*VirtualService
	for _, vs := range s.GatewayVirtualServices {
		if !slices.Contains(vs.Gateways, gateway) {
			continue
		}
		switch {
		case slices.Contains(vs.ExportTo, "*"):
			if vs.Namespace == ns {
				own = append(own, vs)
			} else {
				public = append(public, vs)
			}
		case len(vs.ExportTo) == 1 && vs.ExportTo[0] == vs.Namespace:
			if vs.Namespace == ns {
				private = append(private, vs)
			}
		case slices.Contains(vs.ExportTo, ns):
			exported = append(exported, vs)
		}
	}
	return slices.Concat(private, exported, own, public)
}

// Gateways are the Gateways that select the proxy, when its kind reads
// them (Reads.Gateways); nil otherwise.
func (v *View) Gateways() []*Gateway {
	if !v.proxy.Reads.Gateways {
		return nil
	}
	return v.snap.GatewaysFor(v.whole.Labels)
}

// VirtualServicesForGateway returns the VirtualServices bound to gw that
// the proxy sees (Snapshot.VirtualServicesForGateway).
func (v *View) VirtualServicesForGateway(gw *Gateway) []*VirtualService {
	return v.snap.VirtualServicesForGateway(v.proxy.Namespace, gw.Key())
}

func sameGateway(a, b *Gateway) bool {
	return a == b || (a.Namespace == b.Namespace && a.Name == b.Name && maps.Equal(a.Selector, b.Selector) &&
		(a.Selector == nil) == (b.Selector == nil) && (a.Spec == b.Spec || proto.Equal(a.Spec, b.Spec)))
}

func sameGatewaySelection(a, b *Gateway) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && maps.Equal(a.Selector, b.Selector) && (a.Selector == nil) == (b.Selector == nil)
}

func sameGatewayVirtualService(a, b *VirtualService) bool {
	return sameVirtualService(a, b) && slices.Equal(a.Gateways, b.Gateways)
}

// compareGateways sets what differs in the Gateways and the VirtualServices
// bound to them.
func (d *Diff) compareGateways(prev, next *Snapshot) {
	if !slices.EqualFunc(prev.Gateways, next.Gateways, sameGatewaySelection) {
		d.gatewaySelection = true
	}
	if d.gatewaySelection || !slices.EqualFunc(prev.Gateways, next.Gateways, sameGateway) ||
		!slices.EqualFunc(prev.GatewayVirtualServices, next.GatewayVirtualServices, sameGatewayVirtualService) {
		d.Gateways = true
	}
}
