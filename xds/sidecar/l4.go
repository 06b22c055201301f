package sidecar

import (
	"net/netip"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	mongov3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/mongo_proxy/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/translate"
)

// l4Chain is one outbound filter chain of a TCP or TLS port: what it
// matches when a connection arrives (SNI names, destination prefixes;
// neither: every connection) and where it sends the connection.
type l4Chain struct {
	sni   []string
	cidrs []string
	stat  string
	dests []weighted
	// mongo puts Envoy's mongo_proxy (statistics of the Mongo wire
	// protocol) before the tcp_proxy, as Istio does on MONGO ports.
	mongo bool
}

// matchAll reports whether the chain matches every connection (Istio's
// isMatchAll: an SNI list holding "*" matches any name).
func (c l4Chain) matchAll() bool {
	return (len(c.sni) == 0 || slices.Contains(c.sni, "*")) && len(c.cidrs) == 0
}

// key identifies what the chain matches: two chains of a listener with the
// same key conflict, and the first is kept (Istio's conflictsWith).
func (c l4Chain) key() string {
	if c.matchAll() {
		return ""
	}
	sni := slices.Sorted(slices.Values(slices.DeleteFunc(slices.Clone(c.sni), func(s string) bool { return s == "*" })))
	var cidrs []string
	for _, a := range c.cidrs {
		if p, ok := parseCIDR(a); ok {
			cidrs = append(cidrs, p.Masked().String())
		}
	}
	slices.Sort(cidrs)
	return strings.Join(sni, ",") + "|" + strings.Join(slices.Compact(cidrs), ",")
}

// filterChain is the chain's Envoy form: a tcp_proxy under a match of the
// sorted SNI names and destination prefixes (none when it matches all).
func (c l4Chain) filterChain() *listenerv3.FilterChain {
	fc := &listenerv3.FilterChain{Name: c.stat, Filters: []*listenerv3.Filter{tcpProxy(c.stat, c.dests)}}
	if c.mongo {
		fc.Filters = append([]*listenerv3.Filter{networkFilter(mongoProxyFilter, &mongov3.MongoProxy{StatPrefix: c.stat})}, fc.Filters...)
	}
	if c.matchAll() {
		return fc
	}
	m := &listenerv3.FilterChainMatch{}
	if !slices.Contains(c.sni, "*") {
		m.ServerNames = slices.Sorted(slices.Values(c.sni))
	}
	cidrs := slices.Sorted(slices.Values(c.cidrs))
	for _, a := range cidrs {
		if p, ok := parseCIDR(a); ok {
			m.PrefixRanges = append(m.PrefixRanges, &corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))})
		}
	}
	// Names are unique in a listener (Envoy requires it): the stat prefix
	// and what the chain matches.
	sni, cidr, _ := strings.Cut(c.key(), "|")
	fc.Name = strings.Join(slices.DeleteFunc([]string{c.stat, sni, cidr}, func(s string) bool { return s == "" }), "|")
	fc.FilterChainMatch = m
	return fc
}

// parseCIDR reads a destination subnet or address (a bare address is its
// own /32 or /128).
func parseCIDR(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}

// isTLS reports whether a port's protocol is TLS-wrapped (Istio's IsTLS):
// such ports are routed by the VirtualService's tls routes, on SNI.
func isTLS(protocol string) bool {
	switch strings.ToUpper(protocol) {
	case "TLS", "HTTPS":
		return true
	}
	return false
}

// RoutedInListener reports whether the VirtualService routes of a service
// port with this protocol are in its outbound listener (TCP and TLS routes,
// in the listener's filter chains: l4Chains) rather than in a route
// configuration: every protocol but HTTP's. Outbound listeners read no
// other VirtualService, and no DestinationRule but through those routes.
func RoutedInListener(protocol string) bool { return !isHTTP(protocol) }

// l4Chains returns the filter chains of a TCP or TLS service port, as
// Istio's sidecar builds them. cidrs is the service's address when it is a
// prefix (the listener is 0.0.0.0 and the chains match it); wildcard says
// that the listener is 0.0.0.0 without a prefix, where a TLS port's own
// chain matches the host name by SNI.
//
// A TLS port (TLS, HTTPS) is routed by the VirtualService's tls routes:
// one chain for each match that selects this proxy and port, on its
// sniHosts and destinationSubnets (the first of equal ones wins), else one
// chain to the service's own cluster. Its tcp routes do not apply.
//
// A TCP port is routed by the tcp routes: the first route with a match
// without destinationSubnets (or no match) ends the list; a route whose
// matches all carry destinationSubnets gets one chain on them; the
// service's own cluster comes last unless a route took every connection.
func (sc *scope) l4Chains(t target, cidrs []string, wildcard bool) []l4Chain {
	ownName := model.ClusterName(t.port.Number, "", t.svc.Hostname)
	own := l4Chain{cidrs: cidrs, stat: ownName, dests: []weighted{{cluster: ownName, weight: 100}}, mongo: strings.EqualFold(t.port.Protocol, "MONGO")}
	vs := sc.v.VirtualServiceFor(t.svc.Hostname)
	var spec *networking.VirtualService
	if vs != nil {
		spec = vs.Spec
	}
	if isTLS(t.port.Protocol) {
		var out []l4Chain
		seen := map[string]bool{}
		for _, tr := range spec.GetTls() {
			if len(tr.GetRoute()) == 0 {
				continue
			}
			for _, m := range tr.GetMatch() {
				if !staticL4Match(m.GetPort(), m.GetGateways(), m.GetSourceNamespace(), m.GetSourceLabels(), t.port.Number, sc.p) {
					continue
				}
				// Istio's runtime predicates, as written.
				k := strings.Join(m.GetSniHosts(), ",") + "|" + strings.Join(m.GetDestinationSubnets(), ",")
				if seen[k] {
					continue
				}
				seen[k] = true
				c := own
				if len(m.GetDestinationSubnets()) > 0 {
					c.cidrs = m.GetDestinationSubnets()
				}
				c.sni = m.GetSniHosts()
				c.stat, c.dests = sc.l4Destinations(t, vs, tr.GetRoute())
				out = append(out, c)
			}
		}
		if len(out) > 0 {
			return out
		}
		if len(cidrs) > 0 || wildcard {
			own.sni = []string{t.svc.Hostname}
		}
		return []l4Chain{own}
	}
	var out []l4Chain
	for _, tr := range spec.GetTcp() {
		if len(tr.GetRoute()) == 0 {
			continue
		}
		c := own
		c.stat, c.dests = sc.l4Destinations(t, vs, tr.GetRoute())
		if len(tr.GetMatch()) == 0 {
			return append(out, c)
		}
		var subnets []string
		for _, m := range tr.GetMatch() {
			if !staticL4Match(m.GetPort(), m.GetGateways(), m.GetSourceNamespace(), m.GetSourceLabels(), t.port.Number, sc.p) {
				continue
			}
			if len(m.GetDestinationSubnets()) == 0 {
				return append(out, c)
			}
			subnets = append(subnets, m.GetDestinationSubnets()...)
		}
		if len(subnets) > 0 {
			c.cidrs = subnets
			out = append(out, c)
			if c.key() == own.key() {
				// The route took what the service's own chain would
				// match (Envoy refuses two equal matches).
				return out
			}
		}
	}
	return append(out, own)
}

// l4Destinations returns the stat prefix and the clusters of a tcp or tls
// route's destinations, weighted when there are several. A destination the
// proxy has no cluster for keeps its place under Istio's name for it, as
// Istio keeps it: its connections fail. A route whose weights are all zero
// goes to the service's own cluster.
func (sc *scope) l4Destinations(t target, vs *model.VirtualService, rds []*networking.RouteDestination) (string, []weighted) {
	var out []weighted
	for _, d := range rds {
		if w, ok := translate.DestinationWeight(d.GetWeight(), len(rds)); ok {
			name, ref, _ := sc.routeCluster(t, vs, d.GetDestination())
			out = append(out, weighted{cluster: name, weight: w, ref: ref})
		}
	}
	switch len(out) {
	case 0:
		own := model.ClusterName(t.port.Number, "", t.svc.Hostname)
		return own, []weighted{{cluster: own, weight: 100}}
	case 1:
		return out[0].cluster, out
	}
	return vs.Name + "." + vs.Namespace, out
}

// staticL4Match reports whether a tcp or tls match's predicates that are
// known when config is generated (port, gateways, source namespace and
// labels) select this proxy on port (Istio's matchTCP and matchTLS).
func staticL4Match(mport uint32, gateways []string, sourceNS string, sourceLabels map[string]string, port uint32, p model.Workload) bool {
	if mport != 0 && mport != port {
		return false
	}
	if len(gateways) > 0 && !slices.Contains(gateways, "mesh") {
		return false
	}
	if sourceNS != "" && sourceNS != p.Namespace {
		return false
	}
	for k, v := range sourceLabels {
		if p.Labels[k] != v {
			return false
		}
	}
	return true
}

// inspectTLS adds the TLS inspector a listener needs when one of its chains
// matches SNI names (Istio: no listener filter timeout then).
func inspectTLS(l *listenerv3.Listener) {
	if !slices.ContainsFunc(l.FilterChains, func(fc *listenerv3.FilterChain) bool { return len(fc.GetFilterChainMatch().GetServerNames()) > 0 }) {
		return
	}
	l.ListenerFilters = append(l.ListenerFilters, tlsInspectorFilter())
	l.ListenerFiltersTimeout = durationpb.New(0)
	l.ContinueOnListenerFiltersTimeout = true
}

// tlsInspectorFilter is Istio's TLS inspector: it peeks at 512 bytes,
// enough for a ClientHello's SNI and ALPN.
func tlsInspectorFilter() *listenerv3.ListenerFilter {
	return &listenerv3.ListenerFilter{Name: tlsInspector, ConfigType: &listenerv3.ListenerFilter_TypedConfig{
		TypedConfig: mustAny(&tlsinspectorv3.TlsInspector{InitialReadBufferSize: wrapperspb.UInt32(512)})}}
}
