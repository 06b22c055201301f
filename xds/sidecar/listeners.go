package sidecar

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vmesh/vmesh/xds/security"

	"github.com/vmesh/vmesh/xds/translate"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	httpinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	originaldstv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Listeners returns a sidecar's listeners:
//
//   - virtualOutbound on 0.0.0.0:15001 with use_original_dst: connections
//     go to the listener for their original destination, the rest through
//     PassthroughCluster (the cluster of the Sidecar's egressProxy when it
//     names one; BlackHoleCluster with REGISTRY_ONLY);
//   - per outbound port (bind_to_port false): "<VIP>_<port>" with a
//     tcp_proxy for each TCP service VIP, and "0.0.0.0_<port>" holding the
//     HTTP services of the port (HttpConnectionManager, RDS "<port>"), TCP
//     services whose addresses are CIDR blocks (matched by prefix) or that
//     have none;
//   - virtualInbound on 0.0.0.0:15006 with one filter chain per workload
//     port and mTLS mode (PeerAuthentication), RBAC from
//     AuthorizationPolicies, to the inbound cluster.
//
// It is OutboundListeners followed by InboundListeners.
func Listeners(v *model.View) ([]*listenerv3.Listener, error) {
	out, err := OutboundListeners(v)
	if err != nil {
		return nil, err
	}
	in, err := InboundListeners(v)
	if err != nil {
		return nil, err
	}
	return append(out, in...), nil
}

// OutboundListeners returns the listeners that depend only on the proxy's
// scope (model.View.OutboundKey): virtualOutbound and the per-port outbound
// listeners. Every proxy of one scope gets the same ones.
func OutboundListeners(v *model.View) ([]*listenerv3.Listener, error) {
	return OutboundListenersOf(v, nil)
}

// OutboundListenersOf returns the per-port outbound listeners of the given
// ports only (with virtualOutbound when ports is nil: every port), for an
// update that regenerates the ports a change touches.
func OutboundListenersOf(v *model.View, ports map[uint32]bool) ([]*listenerv3.Listener, error) {
	sc := newScope(v)
	var out []*listenerv3.Listener
	if ports == nil {
		out = append(out, sc.virtualOutbound())
	}
	outbound, err := sc.outboundListeners(ports)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", v.Workload().ID, err)
	}
	return append(out, outbound...), nil
}

// InboundListeners returns the listeners that depend on the proxy's own
// workload (its IPs, workload name, ports and the policies that select
// it): virtualInbound.
func InboundListeners(v *model.View) ([]*listenerv3.Listener, error) {
	sc := newScope(v)
	vi, err := sc.virtualInbound()
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", v.Workload().ID, err)
	}
	return []*listenerv3.Listener{vi}, nil
}

func (sc *scope) virtualOutbound() *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:           VirtualOutboundListener,
		Address:        address("0.0.0.0", OutboundPort),
		UseOriginalDst: boolValue(true),
		FilterChains: []*listenerv3.FilterChain{
			loopGuard(VirtualOutboundListener, OutboundPort),
			{
				Name:    "virtualOutbound-catchall-tcp",
				Filters: []*listenerv3.Filter{tcpProxy(sc.fallbackCluster(), []weighted{{cluster: sc.fallbackCluster()}})},
			},
		},
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
	}
}

// loopGuard is the chain of a capture listener for connections whose
// original destination is that listener's own port (a client dialling
// 15001 or 15006 directly): they go to BlackHoleCluster, as in Istio,
// where passing them through would connect Envoy to itself again and
// again.
func loopGuard(listener string, port uint32) *listenerv3.FilterChain {
	return &listenerv3.FilterChain{
		Name:             listener + "-blackhole",
		FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port)},
		Filters:          []*listenerv3.Filter{tcpProxy(BlackHoleCluster, []weighted{{cluster: BlackHoleCluster}})},
	}
}

// sniffedHTTP are the application protocols Envoy's HTTP inspector reports
// for plaintext HTTP/1.1 and HTTP/2 with prior knowledge (gRPC).
var sniffedHTTP = []string{"http/1.1", "h2c"}

// sniffHTTP makes an outbound listener of an HTTP port tell HTTP from other
// traffic, as Istio's do: Envoy's HTTP inspector reads the first bytes
// (waiting as long as they take), the HTTP chain takes what it recognises,
// and anything else (TLS, a server-first or binary protocol to an address
// no ServiceEntry names) goes to the default chain, passed through as TCP
// rather than parsed as HTTP and reset.
func sniffHTTP(l *listenerv3.Listener) {
	l.ListenerFilters = []*listenerv3.ListenerFilter{{Name: httpInspector, ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&httpinspectorv3.HttpInspector{})}}}
	l.ListenerFiltersTimeout = durationpb.New(0)
	l.ContinueOnListenerFiltersTimeout = true
}

func outboundListener(addr string, port uint32) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:             ListenerName(addr, port),
		Address:          address(addr, port),
		BindToPort:       boolValue(false),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
	}
}

// outboundListeners builds the per-port listeners in port order (of the
// given ports only, unless ports is nil); within a listener, filter chains
// follow host order and the first service wins an address.
func (sc *scope) outboundListeners(ports map[uint32]bool) ([]*listenerv3.Listener, error) {
	byName := make(map[string]*listenerv3.Listener)
	var names []string
	get := func(addr string, port uint32) *listenerv3.Listener {
		n := ListenerName(addr, port)
		if l := byName[n]; l != nil {
			return l
		}
		l := outboundListener(addr, port)
		byName[n] = l
		names = append(names, n)
		return l
	}
	wildcardTaken := make(map[uint32]bool) // a chain without a match exists
	cidrTaken := make(map[string]bool)
	for _, port := range sc.httpPorts() {
		if ports != nil && !ports[port] {
			continue
		}
		l := get("0.0.0.0", port)
		sniffHTTP(l)
		l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
			Name:             "http_" + itoa(port),
			FilterChainMatch: &listenerv3.FilterChainMatch{TransportProtocol: "raw_buffer", ApplicationProtocols: sniffedHTTP},
			Filters:          []*listenerv3.Filter{networkFilter(hcmFilter, sc.outboundHCM(port))},
		})
		l.DefaultFilterChain = &listenerv3.FilterChain{
			Name:    "PassthroughFilterChain",
			Filters: []*listenerv3.Filter{tcpProxy(sc.fallbackCluster(), []weighted{{cluster: sc.fallbackCluster()}})},
		}
		wildcardTaken[port] = true
	}
	for _, t := range sc.targets {
		if isHTTP(t.port.Protocol) || ports != nil && !ports[t.port.Number] {
			continue
		}
		dests := sc.tcpDestinations(t)
		if len(dests) == 0 {
			continue
		}
		stat := "outbound|" + itoa(t.port.Number) + "||" + t.svc.Hostname
		chain := func(name string) *listenerv3.FilterChain {
			return &listenerv3.FilterChain{Name: name, Filters: []*listenerv3.Filter{tcpProxy(stat, dests)}}
		}
		placed := false
		for _, a := range t.svc.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				l := get(ip.String(), t.port.Number)
				if len(l.FilterChains) == 0 {
					l.FilterChains = []*listenerv3.FilterChain{chain(stat)}
				}
				placed = true
				continue
			}
			pfx, err := netip.ParsePrefix(a)
			if err != nil || cidrTaken[pfx.String()+"|"+itoa(t.port.Number)] {
				continue
			}
			cidrTaken[pfx.String()+"|"+itoa(t.port.Number)] = true
			c := chain(stat + "|" + pfx.String())
			c.FilterChainMatch = &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{{AddressPrefix: pfx.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(pfx.Bits()))}}}
			l := get("0.0.0.0", t.port.Number)
			l.FilterChains = append(l.FilterChains, c)
			placed = true
		}
		if !placed && !wildcardTaken[t.port.Number] {
			l := get("0.0.0.0", t.port.Number)
			l.FilterChains = append(l.FilterChains, chain(stat))
			wildcardTaken[t.port.Number] = true
		}
	}
	slices.Sort(names)
	var out []*listenerv3.Listener
	for _, n := range names {
		l := byName[n]
		if a := l.GetAddress().GetSocketAddress(); a.GetAddress() == "0.0.0.0" && !wildcardTaken[a.GetPortValue()] {
			l.DefaultFilterChain = &listenerv3.FilterChain{
				Name:    "default",
				Filters: []*listenerv3.Filter{tcpProxy(sc.fallbackCluster(), []weighted{{cluster: sc.fallbackCluster()}})},
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// tcpDestinations returns the clusters of a TCP service port: the first
// TCP route of its VirtualService that matches the port (weighted when it
// names several destinations, those the proxy has no cluster for
// included), else the service's own cluster.
func (sc *scope) tcpDestinations(t target) []weighted {
	own := []weighted{{cluster: model.ClusterName(t.port.Number, "", t.svc.Hostname), weight: 100}}
	vs := sc.v.VirtualServiceFor(t.svc.Hostname)
	if vs == nil {
		return own
	}
	for _, tr := range vs.Spec.GetTcp() {
		if !tcpMatches(tr, t.port.Number, sc.p) {
			continue
		}
		// A destination the proxy has no cluster for is kept under
		// Istio's name for it, as Istio keeps it: its connections fail.
		var out []weighted
		for _, d := range tr.GetRoute() {
			w := uint32(max(d.GetWeight(), 0))
			if len(tr.GetRoute()) == 1 {
				w = 100
			}
			if w > 0 {
				name, ref, _ := sc.routeCluster(t, vs, d.GetDestination())
				out = append(out, weighted{cluster: name, weight: w, ref: ref})
			}
		}
		if len(out) > 0 {
			return out
		}
		return own
	}
	return own
}

func tcpMatches(tr *networking.TCPRoute, port uint32, p model.Workload) bool {
	if len(tr.GetMatch()) == 0 {
		return true
	}
	for _, m := range tr.GetMatch() {
		if m.GetPort() != 0 && m.GetPort() != port {
			continue
		}
		if gw := m.GetGateways(); len(gw) > 0 && !slices.Contains(gw, "mesh") {
			continue
		}
		if ns := m.GetSourceNamespace(); ns != "" && ns != p.Namespace {
			continue
		}
		ok := true
		for k, v := range m.GetSourceLabels() {
			if p.Labels[k] != v {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// outboundHCM is the HttpConnectionManager of an outbound HTTP port.
func (sc *scope) outboundHCM(port uint32) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix: "outbound_0.0.0.0_" + itoa(port),
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    waitingADS(),
			RouteConfigName: RouteName(port),
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			httpFilter(faultFilter, &faultv3.HTTPFault{}),
			httpFilter(corsFilter, &corsv3.Cors{}),
			httpFilter(routerFilter, &routerv3.Router{}),
		},
	}
}

func httpFilter(name string, m proto.Message) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(m)}}
}

// virtualInbound is the inbound listener: per workload port, a chain for
// mesh mTLS (ALPN istio*) unless the port's PeerAuthentication mode is
// DISABLE, and plaintext chains (raw and non-mesh TLS) unless it is STRICT;
// each with the RBAC filters of the workload's AuthorizationPolicies.
// Connections to other ports pass through, under the same policies' network
// RBAC (blocked when the workload's mode is STRICT). An AuthorizationPolicy that cannot be translated fails the
// listener (fail closed: the proxy keeps its last config).
func (sc *scope) virtualInbound() (*listenerv3.Listener, error) {
	l := &listenerv3.Listener{
		Name:    VirtualInboundListener,
		Address: address("0.0.0.0", InboundPort),
		ListenerFilters: []*listenerv3.ListenerFilter{
			{Name: originalDstFilter, ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&originaldstv3.OriginalDst{})}},
			{Name: tlsInspector, ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&tlsinspectorv3.TlsInspector{})}},
		},
		TrafficDirection: corev3.TrafficDirection_INBOUND,
	}
	l.FilterChains = append(l.FilterChains, loopGuard(VirtualInboundListener, InboundPort))
	policies := security.ForEnvoy(sc.v)
	for _, ip := range sc.inbound() {
		mode := sc.v.PeerAuthenticationMode(ip.port)
		http := isHTTP(ip.protocol)
		filters, err := inboundFilters(ip, http, policies)
		if err != nil {
			return nil, fmt.Errorf("inbound port %d: %w", ip.port, err)
		}
		name := "inbound|" + itoa(ip.port)
		if mode != model.MTLSDisable {
			// PERMISSIVE tells mesh mTLS from other TLS by Istio's ALPN
			// values; under STRICT every TLS connection must be mesh mTLS,
			// whatever ALPN it offers (a proxyless gRPC client offers h2), as
			// in Istio.
			match := &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(ip.port), TransportProtocol: "tls"}
			if mode != model.MTLSStrict {
				match.ApplicationProtocols = inboundALP
			}
			l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
				Name:             name + "|mtls",
				FilterChainMatch: match,
				TransportSocket:  inboundMTLS(http),
				Filters:          filters,
			})
		}
		switch mode {
		case model.MTLSStrict:
		case model.MTLSDisable:
			// Plaintext only, as Istio's chain: TLS the client brings
			// itself is not parsed as the port's protocol but passed
			// through by the default chain, under the same network RBAC.
			l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
				Name:             name + "|plaintext",
				FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(ip.port), TransportProtocol: "raw_buffer"},
				Filters:          cloneFilters(filters),
			})
		default:
			// PERMISSIVE: plaintext as the port's protocol; TLS that is not
			// mesh mTLS stays undecrypted, so it is passed to the workload
			// as TCP under the network RBAC (Istio's passthrough), never
			// parsed as HTTP.
			tlsFilters := cloneFilters(filters)
			if http {
				if tlsFilters, err = inboundFilters(ip, false, policies); err != nil {
					return nil, fmt.Errorf("inbound port %d: %w", ip.port, err)
				}
			}
			l.FilterChains = append(l.FilterChains,
				&listenerv3.FilterChain{
					Name:             name + "|tls",
					FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(ip.port), TransportProtocol: "tls"},
					Filters:          tlsFilters,
				},
				&listenerv3.FilterChain{
					Name:             name + "|raw_buffer",
					FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(ip.port), TransportProtocol: "raw_buffer"},
					Filters:          cloneFilters(filters),
				})
		}
	}
	fallback := InboundPassthroughCluster
	if sc.v.PeerAuthenticationMode(0) == model.MTLSStrict {
		fallback = BlackHoleCluster
	}
	// Connections to other ports are the workload's too: its policies'
	// network RBAC applies to them as on a TCP port (Istio's passthrough
	// chains), so an ALLOW policy admits only what it allows on any port.
	catchAll, err := policies.NetworkFilters()
	if err != nil {
		return nil, fmt.Errorf("inbound passthrough: %w", err)
	}
	l.DefaultFilterChain = &listenerv3.FilterChain{
		Name:    "virtualInbound-catchall",
		Filters: append(catchAll, tcpProxy(fallback, []weighted{{cluster: fallback}})),
	}
	return l, nil
}

// cloneFilters copies filters placed in a second chain, so that every
// message of a listener has one parent.
func cloneFilters(fs []*listenerv3.Filter) []*listenerv3.Filter {
	out := make([]*listenerv3.Filter, len(fs))
	for i, f := range fs {
		out[i] = proto.Clone(f).(*listenerv3.Filter)
	}
	return out
}

// inboundFilters are the network filters of one inbound chain: an
// HttpConnectionManager with the workload's authentication and
// authorization filters (security.Envoy.HTTPFilters) and a route to the
// inbound cluster, or the network RBAC filters and a tcp_proxy.
func inboundFilters(ip inboundPort, http bool, policies security.Envoy) ([]*listenerv3.Filter, error) {
	cluster := InboundClusterName(ip.port)
	if !http {
		fs, err := policies.NetworkFilters()
		if err != nil {
			return nil, err
		}
		return append(fs, tcpProxy(cluster, []weighted{{cluster: cluster}})), nil
	}
	hf, err := policies.HTTPFilters()
	if err != nil {
		return nil, err
	}
	hf = append(hf, httpFilter(routerFilter, &routerv3.Router{}))
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "inbound_0.0.0.0_" + itoa(ip.port),
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: cluster,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "inbound|http|" + itoa(ip.port),
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Name:  "default",
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{
						ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
						Timeout:          durationpb.New(0),
					}},
				}},
			}},
		}},
		HttpFilters: hf,
	}
	return []*listenerv3.Filter{networkFilter(hcmFilter, hcm)}, nil
}

// waitingADS names the ADS stream for a sidecar's RDS and EDS with no
// initial fetch timeout, as Istio's sidecars have: Envoy keeps a listener
// or cluster warming until its routes or endpoints arrive rather than
// activate it empty after 15 s (a cluster with no endpoints answers 503).
func waitingADS() *corev3.ConfigSource {
	src := translate.ADSConfigSource()
	src.InitialFetchTimeout = durationpb.New(0)
	return src
}
