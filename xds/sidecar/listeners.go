package sidecar

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

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
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	mongov3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/mongo_proxy/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
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
	return NewOutbound(v).Listeners(nil)
}

// Listeners returns the per-port outbound listeners of the given ports only
// (with virtualOutbound when ports is nil: every port), for an update that
// regenerates the ports a change touches.
func (o *Outbound) Listeners(ports map[uint32]bool) ([]*listenerv3.Listener, error) {
	sc := o.scope()
	var out []*listenerv3.Listener
	if ports == nil {
		out = append(out, sc.virtualOutbound())
	}
	outbound, err := sc.outboundListeners(ports)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", o.v.Workload().ID, err)
	}
	out = append(out, outbound...)
	if err := withAccessLog(out, accessLogs(o.v, false)); err != nil {
		return nil, fmt.Errorf("proxy %s: access log: %w", o.v.Workload().ID, err)
	}
	return out, nil
}

// InboundListeners returns the listeners that depend on the proxy's own
// workload (its IPs, workload name, ports and the policies that select
// it): virtualInbound.
func InboundListeners(v *model.View) ([]*listenerv3.Listener, error) {
	sc := baseScope(v) // the inbound side reads no outbound target
	vi, err := sc.virtualInbound()
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", v.Workload().ID, err)
	}
	out := []*listenerv3.Listener{vi}
	if err := withAccessLog(out, accessLogs(v, true)); err != nil {
		return nil, fmt.Errorf("proxy %s: access log: %w", v.Workload().ID, err)
	}
	return out, nil
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
		Name:             listener + loopGuardSuffix,
		FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port)},
		Filters:          []*listenerv3.Filter{tcpProxy(BlackHoleCluster, []weighted{{cluster: BlackHoleCluster}})},
	}
}

// loopGuardSuffix ends the names of the loop guard chains, which log
// nothing (as Istio's).
const loopGuardSuffix = "-blackhole"

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

// outboundListener is a service port's listener. Its listener filters (a
// TLS or HTTP inspector, when it has them) wait for the client's first
// bytes as long as it takes, as Istio's: a timeout would close connections
// whose client speaks second (server-first protocols) or late (pools that
// open connections ahead of use).
func outboundListener(addr string, port uint32) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:                             ListenerName(addr, port),
		Address:                          address(addr, port),
		BindToPort:                       boolValue(false),
		TrafficDirection:                 corev3.TrafficDirection_OUTBOUND,
		ListenerFiltersTimeout:           durationpb.New(0),
		ContinueOnListenerFiltersTimeout: true,
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
	httpListener := make(map[string]bool)
	cidrTaken := make(map[string]bool)
	for _, port := range sc.httpPorts() {
		if ports != nil && !ports[port] {
			continue
		}
		l := get("0.0.0.0", port)
		httpListener[l.Name] = true
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
	// add puts a service's chains on a listener that other services may
	// share: a chain whose match an earlier one has is left out, as Istio
	// leaves it (Envoy refuses two equal matches).
	keys := make(map[string]map[string]bool)
	add := func(l *listenerv3.Listener, port uint32, chains []l4Chain) {
		if httpListener[l.Name] {
			return
		}
		if keys[l.Name] == nil {
			keys[l.Name] = map[string]bool{}
		}
		taken := keys[l.Name]
		for _, c := range chains {
			k := c.key()
			if taken[k] {
				continue
			}
			taken[k] = true
			if k == "" { // matches every connection
				wildcardTaken[port] = true
			}
			l.FilterChains = append(l.FilterChains, c.filterChain())
		}
	}
	for _, t := range sc.targets {
		if isHTTP(t.port.Protocol) || ports != nil && !ports[t.port.Number] {
			continue
		}
		placed := false
		for _, a := range t.svc.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				// The first service with the address has its listener.
				if l := get(ip.String(), t.port.Number); len(l.FilterChains) == 0 {
					add(l, t.port.Number, sc.l4Chains(t, nil, false))
				}
				placed = true
				continue
			}
			pfx, err := netip.ParsePrefix(a)
			if err != nil || cidrTaken[pfx.String()+"|"+itoa(t.port.Number)] {
				continue
			}
			cidrTaken[pfx.String()+"|"+itoa(t.port.Number)] = true
			add(get("0.0.0.0", t.port.Number), t.port.Number, sc.l4Chains(t, []string{pfx.String()}, false))
			placed = true
		}
		if !placed {
			add(get("0.0.0.0", t.port.Number), t.port.Number, sc.l4Chains(t, nil, true))
		}
	}
	slices.Sort(names)
	var out []*listenerv3.Listener
	for _, n := range names {
		l := byName[n]
		if !httpListener[n] {
			finishL4(l, sc.fallbackCluster())
		}
		out = append(out, l)
	}
	return out, nil
}

// finishL4 completes a TCP or TLS listener as Istio's buildListenerFromEntry
// does: among several chains, the one that matches every connection becomes
// the default chain; without such a chain, connections no chain matches go
// to the fallback cluster (PassthroughCluster, or BlackHoleCluster under
// REGISTRY_ONLY); a chain matching SNI names needs the TLS inspector.
func finishL4(l *listenerv3.Listener, fallback string) {
	i := slices.IndexFunc(l.FilterChains, func(fc *listenerv3.FilterChain) bool { return fc.FilterChainMatch == nil })
	switch {
	case i >= 0 && len(l.FilterChains) > 1:
		l.DefaultFilterChain = l.FilterChains[i]
		l.FilterChains = slices.Delete(l.FilterChains, i, i+1)
	case i < 0:
		l.DefaultFilterChain = &listenerv3.FilterChain{
			Name:    "default",
			Filters: []*listenerv3.Filter{tcpProxy(fallback, []weighted{{cluster: fallback}})},
		}
	}
	inspectTLS(l)
}

// outboundHCM is the HttpConnectionManager of an outbound HTTP port.
func (sc *scope) outboundHCM(port uint32) *hcmv3.HttpConnectionManager {
	return hcmTracing(sc.v, false).apply(istioHCM(&hcmv3.HttpConnectionManager{
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
	}, false))
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
		// The inspectors follow the chains (inspectInbound).
		ListenerFilters: []*listenerv3.ListenerFilter{
			{Name: originalDstFilter, ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&originaldstv3.OriginalDst{})}},
		},
		ListenerFiltersTimeout:           durationpb.New(0),
		ContinueOnListenerFiltersTimeout: true,
		TrafficDirection:                 corev3.TrafficDirection_INBOUND,
	}
	l.FilterChains = append(l.FilterChains, loopGuard(VirtualInboundListener, InboundPort))
	policies := security.ForEnvoy(sc.v)
	for _, ip := range sc.inbound() {
		mode := sc.v.PeerAuthenticationMode(ip.port)
		http := isHTTP(ip.protocol)
		filters, err := inboundFilters(ip, http, policies, hcmTracing(sc.v, true))
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
				TransportSocket:  inboundMTLS(http, sc.v.Mesh()),
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
				if tlsFilters, err = inboundFilters(ip, false, policies, Trace{}); err != nil {
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
	if err := sc.passthroughChains(l, policies); err != nil {
		return nil, err
	}
	inspectInbound(l, sc.inbound())
	return l, nil
}

// passthroughChains are virtualInbound's chains for ports that are no
// workload port, as Istio's: connections pass to the workload
// (InboundPassthroughCluster) under its policies, the HTTP ones (sniffed, or
// mesh mTLS offering Istio's HTTP ALPNs) through an HTTP connection manager
// with the HTTP filters, the others under the network RBAC (so an ALLOW
// policy admits there only what it allows on a TCP port). Mesh mTLS is
// terminated unless the workload's mode is DISABLE; PERMISSIVE also passes
// plaintext and TLS the client brings itself (undecrypted), STRICT refuses
// them (no chain matches), DISABLE takes plaintext only.
func (sc *scope) passthroughChains(l *listenerv3.Listener, policies security.Envoy) error {
	network, err := policies.NetworkFilters()
	if err != nil {
		return fmt.Errorf("inbound passthrough: %w", err)
	}
	tcp := func() []*listenerv3.Filter {
		return append(cloneFilters(network), tcpProxy(InboundPassthroughCluster, []weighted{{cluster: InboundPassthroughCluster}}))
	}
	hcm, err := inboundHCM(InboundPassthroughCluster, InboundPassthroughCluster, "inbound|http|0", policies, hcmTracing(sc.v, true))
	if err != nil {
		return fmt.Errorf("inbound passthrough: %w", err)
	}
	httpf := func() []*listenerv3.Filter { return []*listenerv3.Filter{proto.Clone(hcm).(*listenerv3.Filter)} }
	chain := func(name, transport string, alpn []string, mtls bool, fs []*listenerv3.Filter) *listenerv3.FilterChain {
		fc := &listenerv3.FilterChain{Name: name, FilterChainMatch: &listenerv3.FilterChainMatch{TransportProtocol: transport, ApplicationProtocols: alpn}, Filters: fs}
		if mtls {
			fc.TransportSocket = inboundMTLS(false, sc.v.Mesh())
		}
		return fc
	}
	const httpName, tcpName = "virtualInbound-catchall-http", "virtualInbound-catchall"
	switch sc.v.PeerAuthenticationMode(0) {
	case model.MTLSStrict:
		l.FilterChains = append(l.FilterChains,
			chain(httpName+"|mtls", "tls", meshHTTPALPN, true, httpf()),
			chain(tcpName+"|mtls", "tls", nil, true, tcp()))
	case model.MTLSDisable:
		l.FilterChains = append(l.FilterChains,
			chain(httpName, "raw_buffer", sniffedHTTP, false, httpf()),
			chain(tcpName, "raw_buffer", nil, false, tcp()))
	default:
		l.FilterChains = append(l.FilterChains,
			chain(httpName+"|mtls", "tls", meshHTTPALPN, true, httpf()),
			chain(httpName, "raw_buffer", sniffedHTTP, false, httpf()),
			chain(tcpName+"|mtls", "tls", meshTCPALPN, true, tcp()),
			chain(tcpName, "raw_buffer", nil, false, tcp()),
			chain(tcpName+"|tls", "tls", nil, false, tcp()))
	}
	return nil
}

// inspectInbound gives virtualInbound the listener filters its chains need,
// as Istio's: the TLS inspector when a chain matches TLS, the HTTP inspector when a
// chain matches sniffed HTTP (not on the workload's own ports, whose
// protocol is known); neither on 15006 itself (the loop guard's). They wait
// for the client's first bytes as long as it takes: Envoy's 15 s timeout
// would close connections of clients that speak second or late.
func inspectInbound(l *listenerv3.Listener, ports []inboundPort) {
	self := func() *listenerv3.ListenerFilterChainMatchPredicate {
		return &listenerv3.ListenerFilterChainMatchPredicate{Rule: &listenerv3.ListenerFilterChainMatchPredicate_DestinationPortRange{
			DestinationPortRange: &typev3.Int32Range{Start: InboundPort, End: InboundPort + 1}}}
	}
	needTLS := slices.ContainsFunc(l.FilterChains, func(fc *listenerv3.FilterChain) bool { return fc.GetFilterChainMatch().GetTransportProtocol() == "tls" })
	needHTTP := slices.ContainsFunc(l.FilterChains, func(fc *listenerv3.FilterChain) bool {
		return fc.GetFilterChainMatch().GetTransportProtocol() == "raw_buffer" && len(fc.GetFilterChainMatch().GetApplicationProtocols()) > 0
	})
	if needTLS {
		ti := tlsInspectorFilter()
		ti.FilterDisabled = self()
		l.ListenerFilters = append(l.ListenerFilters, ti)
	}
	if needHTTP {
		rules := []*listenerv3.ListenerFilterChainMatchPredicate{self()}
		seen := map[uint32]bool{}
		for _, ip := range ports {
			if !seen[ip.port] {
				seen[ip.port] = true
				rules = append(rules, &listenerv3.ListenerFilterChainMatchPredicate{Rule: &listenerv3.ListenerFilterChainMatchPredicate_DestinationPortRange{
					DestinationPortRange: &typev3.Int32Range{Start: int32(ip.port), End: int32(ip.port) + 1}}})
			}
		}
		disabled := rules[0]
		if len(rules) > 1 {
			disabled = &listenerv3.ListenerFilterChainMatchPredicate{Rule: &listenerv3.ListenerFilterChainMatchPredicate_OrMatch{
				OrMatch: &listenerv3.ListenerFilterChainMatchPredicate_MatchSet{Rules: rules}}}
		}
		l.ListenerFilters = append(l.ListenerFilters, &listenerv3.ListenerFilter{
			Name:           httpInspector,
			ConfigType:     &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&httpinspectorv3.HttpInspector{})},
			FilterDisabled: disabled,
		})
	}
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
func inboundFilters(ip inboundPort, http bool, policies security.Envoy, tracing Trace) ([]*listenerv3.Filter, error) {
	cluster := InboundClusterName(ip.port)
	if !http {
		fs, err := policies.NetworkFilters()
		if err != nil {
			return nil, err
		}
		if strings.EqualFold(ip.protocol, "MONGO") {
			// Statistics of the Mongo wire protocol, after the RBAC
			// filters, as Istio's.
			fs = append(fs, networkFilter(mongoProxyFilter, &mongov3.MongoProxy{StatPrefix: cluster}))
		}
		return append(fs, tcpProxy(cluster, []weighted{{cluster: cluster}})), nil
	}
	f, err := inboundHCM("inbound_0.0.0.0_"+itoa(ip.port), cluster, "inbound|http|"+itoa(ip.port), policies, tracing)
	if err != nil {
		return nil, err
	}
	return []*listenerv3.Filter{f}, nil
}

// inboundHCM is an inbound HTTP connection manager: the workload's HTTP
// filters (authentication, authorization) and one route to cluster, as
// Istio's: no timeout but the client's grpc-timeout, and two retries of a
// request whose connection to the workload reset before it was sent (a
// workload restarting).
func inboundHCM(statPrefix, cluster, vhost string, policies security.Envoy, tracing Trace) (*listenerv3.Filter, error) {
	hf, err := policies.HTTPFilters()
	if err != nil {
		return nil, err
	}
	// Istio's inbound chains carry the fault and CORS filters too (no-ops
	// without route configuration for them), after the security filters.
	hf = append(hf, httpFilter(faultFilter, &faultv3.HTTPFault{}), httpFilter(corsFilter, &corsv3.Cors{}), httpFilter(routerFilter, &routerv3.Router{}))
	hcm := tracing.apply(istioHCM(&hcmv3.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name:             cluster,
			ValidateClusters: wrapperspb.Bool(false),
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    vhost,
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Name:  "default",
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{
						ClusterSpecifier:  &routev3.RouteAction_Cluster{Cluster: cluster},
						Timeout:           durationpb.New(0),
						RetryPolicy:       &routev3.RetryPolicy{RetryOn: "reset-before-request", NumRetries: wrapperspb.UInt32(2)},
						MaxStreamDuration: &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(0), GrpcTimeoutHeaderMax: durationpb.New(0)},
					}},
				}},
			}},
		}},
		HttpFilters: hf,
	}, true))
	return networkFilter(hcmFilter, hcm), nil
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
