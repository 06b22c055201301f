package gatewayapi

import (
	"fmt"
	"strings"

	"github.com/vmesh/vmesh/store"
	networking "istio.io/api/networking/v1alpha3"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const (
	// ControllerName is Istio's GatewayClass controller; the class "istio"
	// is Istio's without a GatewayClass object.
	ControllerName = "istio.io/gateway-controller"
	// GatewayNameLabel is the label Istio puts on a Gateway's deployment:
	// a router VM with gateway.networking.k8s.io/gateway-name: NAME serves
	// the Gateway API Gateway NAME (in any namespace, as Istio's Gateways
	// select).
	GatewayNameLabel = "gateway.networking.k8s.io/gateway-name"
)

// gateway is a Gateway API Gateway vmesh serves: its HTTP listeners, each
// an Istio Gateway of its own.
type gateway struct {
	obj       *store.Object
	listeners []listener
}

// listener is one HTTP listener and the Istio Gateway made of it.
type listener struct {
	spec     gwv1.Listener
	index    int
	istioKey string // namespace/name of the generated Istio Gateway
}

// gatewayName is the name of the Istio Gateway made of a listener, as
// Istio's converter names it.
func gatewayName(gw, listener string) string {
	return fmt.Sprintf("%s-%s-%s", gw, generatedSuffix, listener)
}

// readGateways converts the Gateways of Istio's classes: each HTTP
// listener an Istio Gateway selecting the router VMs labelled
// GatewayNameLabel: NAME; other listeners are warned about.
func (c *converter) readGateways() []*store.Object {
	classes := map[string]bool{"istio": true}
	for _, o := range c.snap.List(store.KindGatewayClass) {
		var spec gwv1.GatewayClassSpec
		if err := decodeSpec(o, &spec); err == nil {
			classes[o.Name] = string(spec.ControllerName) == ControllerName
		}
	}
	var out []*store.Object
	for _, o := range c.snap.List(store.KindKubernetesGateway) {
		var spec gwv1.GatewaySpec
		if err := decodeSpec(o, &spec); err != nil {
			c.warn(o, "", store.CodeGatewayAPINotApplied, err.Error())
			continue
		}
		if !classes[string(spec.GatewayClassName)] {
			c.warn(o, "gatewayClassName", store.CodeGatewayAPINotApplied, fmt.Sprintf("class %s is not Istio's (controllerName %s): vmesh does not serve this Gateway", spec.GatewayClassName, ControllerName))
			continue
		}
		if len(spec.Addresses) > 0 {
			// Istio serves a Gateway with addresses on the pods of the
			// service they name (a manual deployment); vmesh's routers
			// serve it by their label, as Istio's own deployment's pods.
			c.warn(o, "addresses", store.CodeGatewayAPINotApplied, fmt.Sprintf("addresses are not applied: the router VMs labelled %s: %s serve this Gateway, whatever its addresses name", GatewayNameLabel, o.Name))
		}
		gw := &gateway{obj: o}
		for i, l := range spec.Listeners {
			field := fmt.Sprintf("listeners[%d]", i)
			if l.Protocol != gwv1.HTTPProtocolType {
				c.warn(o, field+".protocol", store.CodeGatewayAPINotApplied, fmt.Sprintf("a %s listener is not applied yet (HTTP listeners are)", l.Protocol))
				continue
			}
			name := gatewayName(o.Name, string(l.Name))
			ns := namespacesAllowed(l, o.Namespace)
			if ns == "" {
				c.warn(o, field+".allowedRoutes.namespaces", store.CodeGatewayAPINotApplied, "allowedRoutes by namespace selector is not applied (vmesh has no namespace labels): no route binds")
				continue
			}
			host := "*"
			if l.Hostname != nil {
				host = string(*l.Hostname)
			}
			g := &store.Object{
				APIVersion:  "networking.istio.io/v1",
				Labels:      nil,
				Annotations: map[string]string{ParentAnnotation: fmt.Sprintf("KubernetesGateway/%s/%s.%s", o.Name, l.Name, o.Namespace)},
				Spec: &networking.Gateway{
					Selector: map[string]string{GatewayNameLabel: o.Name},
					Servers: []*networking.Server{{
						Port:  &networking.Port{Number: uint32(l.Port), Name: string(l.Name), Protocol: string(l.Protocol)},
						Hosts: []string{ns + "/" + host},
					}},
				},
				Origin: store.Origin{File: o.Origin.File, Line: o.FieldLine(field), Commit: o.Origin.Commit},
			}
			g.Key = store.Key{Kind: store.KindGateway, Namespace: o.Namespace, Name: name}
			out = append(out, g)
			gw.listeners = append(gw.listeners, listener{spec: l, index: i, istioKey: o.Namespace + "/" + name})
		}
		c.gateways[o.Namespace+"/"+o.Name] = gw
	}
	return out
}

// namespacesAllowed is the namespace part of a listener's server hosts:
// its own namespace (Same, the default), "*" (All), or "" for a selector.
func namespacesAllowed(l gwv1.Listener, ns string) string {
	if l.AllowedRoutes == nil || l.AllowedRoutes.Namespaces == nil || l.AllowedRoutes.Namespaces.From == nil {
		return ns
	}
	switch *l.AllowedRoutes.Namespaces.From {
	case gwv1.NamespacesFromAll:
		return "*"
	case gwv1.NamespacesFromSame:
		return ns
	}
	return ""
}

// gatewayParents resolves a parentRef naming a Gateway to the listeners
// the route binds to, each with the hosts it serves there, and the
// parentRef's Accepted reason.
func (c *converter) gatewayParents(r *route, field string, p gwv1.ParentReference, ns, name string) ([]meshParent, string, string) {
	o := r.obj
	gw := c.gateways[ns+"/"+name]
	if gw == nil {
		c.warn(o, field, store.CodeGatewayAPINotApplied, fmt.Sprintf("parentRef: no Gateway %s/%s that vmesh serves (NoMatchingParent): this parent is ignored", ns, name))
		return nil, ReasonNoMatchingParent, fmt.Sprintf("no Gateway %s/%s that vmesh serves", ns, name)
	}
	var out []meshParent
	matched := false
	for _, l := range gw.listeners {
		if p.SectionName != nil && *p.SectionName != l.spec.Name {
			continue
		}
		if p.Port != nil && *p.Port != l.spec.Port {
			continue
		}
		if !kindAllowed(l.spec, docKind(o.Kind)) {
			continue
		}
		if namespacesAllowed(l.spec, gw.obj.Namespace) != "*" && o.Namespace != gw.obj.Namespace {
			continue
		}
		matched = true
		hosts := intersectHosts(l.spec.Hostname, r.hostnames)
		if len(hosts) == 0 {
			continue
		}
		out = append(out, meshParent{hosts: hosts, gateway: l.istioKey})
	}
	switch {
	case !matched:
		c.warn(o, field, store.CodeGatewayAPINotApplied, fmt.Sprintf("parentRef: no listener of Gateway %s/%s accepts this route (NotAllowedByListeners): this parent is ignored", ns, name))
		return nil, ReasonNotAllowedByListeners, fmt.Sprintf("no listener of Gateway %s/%s accepts the route", ns, name)
	case len(out) == 0:
		c.warn(o, field, store.CodeGatewayAPINotApplied, fmt.Sprintf("parentRef: the route's hostnames match no listener of Gateway %s/%s (NoMatchingListenerHostname): this parent is ignored", ns, name))
		return nil, ReasonNoMatchingListenerHostname, fmt.Sprintf("the route's hostnames match no listener of Gateway %s/%s", ns, name)
	}
	return out, ReasonAccepted, ""
}

func kindAllowed(l gwv1.Listener, kind string) bool {
	if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
		return kind == "HTTPRoute" || kind == "GRPCRoute"
	}
	for _, k := range l.AllowedRoutes.Kinds {
		if string(k.Kind) == kind && (k.Group == nil || string(*k.Group) == Group) {
			return true
		}
	}
	return false
}

// intersectHosts is the hosts a route with hostnames serves on a listener
// with hostname, as the Gateway API intersects them: a route without
// hostnames takes the listener's; a wildcard on either side narrows to
// the more specific.
func intersectHosts(listenerHost *gwv1.Hostname, routeHosts []string) []string {
	lh := "*"
	if listenerHost != nil {
		lh = string(*listenerHost)
	}
	if len(routeHosts) == 0 {
		return []string{lh}
	}
	var out []string
	for _, rh := range routeHosts {
		switch {
		case lh == "*" || rh == lh:
			out = append(out, rh)
		case hostCovers(lh, rh):
			out = append(out, rh)
		case hostCovers(rh, lh):
			out = append(out, lh)
		}
	}
	return out
}

// hostCovers reports whether wildcard pattern ("*.example.com") covers host.
func hostCovers(pattern, host string) bool {
	suffix, ok := strings.CutPrefix(pattern, "*")
	return ok && strings.HasSuffix(host, suffix) && len(host) > len(suffix)
}
