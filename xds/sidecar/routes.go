package sidecar

//lint:file-ignore SA1019 Istio's deprecated fields (mirrorPercent, allowOrigin) are read because Istio still honours them

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmesh/vmesh/internal/segmentprefix"
	"github.com/vmesh/vmesh/xds/translate"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// maxDirectResponseBody is the largest VirtualService directResponse body
// an outbound route configuration carries: 1 MiB, as Istio sets it (Envoy's
// default of 4 KiB would make Envoy reject the port's whole route
// configuration for one larger body).
const maxDirectResponseBody = 1 << 20

// Routes returns one route configuration per outbound HTTP port, named by
// the port: a virtual host per HTTP service on that port (domains: the
// host, the host with a trailing dot, its short names, its VIPs; Envoy
// ignores the Host header's port, as in Istio's sidecars) and a catch-all
// virtual host that passes unknown hosts through (allow_any) or answers
// 502 (block_all, outboundTrafficPolicy REGISTRY_ONLY).
func Routes(v *model.View) ([]*routev3.RouteConfiguration, error) {
	return NewOutbound(v).Routes(nil)
}

// Routes returns the route configurations of the given ports only (every
// port when ports is nil), for an update that regenerates the ports a change
// touches. Routes depend only on the proxy's scope (model.View.OutboundKey).
func (o *Outbound) Routes(ports map[uint32]bool) ([]*routev3.RouteConfiguration, error) {
	sc, v := o.scope(), o.v
	var out []*routev3.RouteConfiguration
	for _, port := range sc.httpPorts() {
		if ports != nil && !ports[port] {
			continue
		}
		rc := outboundRouteConfig(RouteName(port))
		used := make(map[string]bool)
		for _, t := range sc.targets {
			if t.port.Number != port || !isHTTP(t.port.Protocol) || t.svc.Hostname == "*" {
				continue
			}
			vh, err := sc.virtualHost(t, used)
			if err != nil {
				return nil, fmt.Errorf("proxy %s: route %s: %w", v.Workload().ID, rc.Name, err)
			}
			if vh != nil {
				rc.VirtualHosts = append(rc.VirtualHosts, vh)
			}
		}
		extra, err := sc.unregisteredHosts(port, sc.unregisteredOn(port), used)
		if err != nil {
			return nil, fmt.Errorf("proxy %s: route %s: %w", v.Workload().ID, rc.Name, err)
		}
		rc.VirtualHosts = append(rc.VirtualHosts, extra...)
		rc.VirtualHosts = append(rc.VirtualHosts, sc.catchAllHost())
		out = append(out, rc)
	}
	return out, nil
}

// UpdateRoute returns the route configuration old (of one port, from an
// earlier snapshot) for the scope, when no service differs between the two
// snapshots (so every virtual host's domains and the order of the virtual
// hosts are the same): the virtual hosts of hosts not in dirty are old's,
// shared; those of dirty hosts are generated again. The result equals what
// Routes generates for the port.
func (o *Outbound) UpdateRoute(old *routev3.RouteConfiguration, dirty map[string]bool) (*routev3.RouteConfiguration, error) {
	sc, v := o.scope(), o.v
	n, err := strconv.ParseUint(old.GetName(), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("route configuration %q: not a port", old.GetName())
	}
	port := uint32(n)
	portName := itoa(port)
	// The same services give the same virtual hosts in the same order, so
	// old's are walked alongside the targets. A regenerated host may not
	// claim a domain an earlier host claims: used holds the domains of the
	// hosts before it, filled only when a host is regenerated.
	olds := old.GetVirtualHosts()
	next := 0
	rc := outboundRouteConfig(old.GetName())
	used := map[string]bool{}
	claimed := 0
	for _, t := range sc.targets {
		if t.port.Number != port || !isHTTP(t.port.Protocol) || t.svc.Hostname == "*" {
			continue
		}
		var prev *routev3.VirtualHost
		if next < len(olds) && isVirtualHostOf(olds[next].GetName(), t.svc.Hostname, portName) {
			prev = olds[next]
			next++
		}
		if prev != nil && !dirty[t.svc.Hostname] {
			rc.VirtualHosts = append(rc.VirtualHosts, prev)
			continue
		}
		for _, vh := range rc.VirtualHosts[claimed:] {
			for _, d := range vh.GetDomains() {
				used[d] = true
			}
		}
		claimed = len(rc.VirtualHosts)
		vh, err := sc.virtualHost(t, used)
		if err != nil {
			return nil, fmt.Errorf("proxy %s: route %s: %w", v.Workload().ID, rc.Name, err)
		}
		if vh != nil {
			rc.VirtualHosts = append(rc.VirtualHosts, vh)
		}
	}
	// The hosts of VirtualServices that no service has come after the
	// services' and are generated again (they are few).
	if cands := sc.unregisteredOn(port); len(cands) > 0 {
		for _, vh := range rc.VirtualHosts[claimed:] {
			for _, d := range vh.GetDomains() {
				used[d] = true
			}
		}
		extra, err := sc.unregisteredHosts(port, cands, used)
		if err != nil {
			return nil, fmt.Errorf("proxy %s: route %s: %w", v.Workload().ID, rc.Name, err)
		}
		rc.VirtualHosts = append(rc.VirtualHosts, extra...)
	}
	rc.VirtualHosts = append(rc.VirtualHosts, sc.catchAllHost())
	return rc, nil
}

// unregisteredOn returns the hosts of VirtualServices that no service the
// proxy sees has (model.View's UnregisteredHosts) that Istio's sidecars
// route on port: the HTTP ports of the services the VirtualService is
// bound to, or port 80 when it is bound to none, where the Sidecar's
// egress lets the proxy reach the host.
func (sc *scope) unregisteredOn(port uint32) []model.UnregisteredHost {
	var out []model.UnregisteredHost
	for _, u := range sc.v.UnregisteredHosts() {
		on, anyHTTP := false, false
		for _, svc := range u.Services {
			for _, p := range svc.Ports {
				if isHTTP(p.Protocol) {
					anyHTTP = true
					on = on || p.Number == port
				}
			}
		}
		if (on || !anyHTTP && port == 80) && sc.v.EgressAllows(u.VirtualService.Namespace, u.Host, port) {
			out = append(out, u)
		}
	}
	return out
}

// unregisteredHosts returns the virtual hosts of port for hosts
// unregisteredOn gave, as Istio's: the host its one domain, routes
// the VirtualService's for the port (none: no virtual host). A domain an
// earlier virtual host has is not taken again.
func (sc *scope) unregisteredHosts(port uint32, hosts []model.UnregisteredHost, used map[string]bool) ([]*routev3.VirtualHost, error) {
	var out []*routev3.VirtualHost
	for _, u := range hosts {
		name := u.Host + ":" + itoa(port)
		if used[u.Host] {
			continue
		}
		t := target{svc: &model.Service{Hostname: u.Host, Namespace: u.VirtualService.Namespace}, port: model.Port{Number: port, Protocol: "HTTP"}}
		routes, err := sc.httpRoutes(t, u.VirtualService)
		if err != nil {
			return nil, fmt.Errorf("VirtualService %s/%s: %w", u.VirtualService.Namespace, u.VirtualService.Name, err)
		}
		if len(routes) == 0 {
			continue
		}
		used[u.Host] = true
		out = append(out, &routev3.VirtualHost{Name: name, Domains: []string{u.Host}, Routes: routes})
	}
	return out, nil
}

// outboundRouteConfig is the empty route configuration of an outbound port,
// with Istio's settings: clusters not validated (a route may name a cluster
// that is not sent yet), direct responses up to maxDirectResponseBody, and
// the Host header's port ignored when matching domains.
func outboundRouteConfig(name string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name:                           name,
		ValidateClusters:               wrapperspb.Bool(false),
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(maxDirectResponseBody),
		IgnorePortInHostMatching:       true,
	}
}

// isVirtualHostOf reports whether name is the virtual host name of host
// and port: "host:port".
func isVirtualHostOf(name, host, port string) bool {
	return len(name) == len(host)+1+len(port) && strings.HasPrefix(name, host) && name[len(host)] == ':' && strings.HasSuffix(name, port)
}

// httpPorts lists the outbound ports with an HTTP service, ascending.
func (sc *scope) httpPorts() []uint32 {
	var out []uint32
	for _, t := range sc.targets {
		if isHTTP(t.port.Protocol) && t.svc.Hostname != "*" && !slices.Contains(out, t.port.Number) {
			out = append(out, t.port.Number)
		}
	}
	return out
}

func (sc *scope) catchAllHost() *routev3.VirtualHost {
	if sc.registryOnly() {
		return &routev3.VirtualHost{Name: "block_all", Domains: []string{"*"}, Routes: []*routev3.Route{{
			Name:   "block_all",
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 502}},
		}}}
	}
	return &routev3.VirtualHost{Name: "allow_any", Domains: []string{"*"}, Routes: []*routev3.Route{{
		Name:  "allow_any",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: sc.fallbackCluster()},
			Timeout:          durationpb.New(0),
			MaxGrpcTimeout:   grpcTimeout(nil),
		}},
	}}}
}

// domains returns the names a client may use for a service port, as
// Istio's sidecars list them: the host and, for a host that is no IP
// address, the host with a trailing dot (an absolute name); for host
// name.ns.svc.cluster.local also name.ns and name.ns.svc, and name from the
// same namespace; for other hosts the first label from the same namespace;
// the service's IP addresses (IPv6 in brackets, as a Host header has them).
// No name carries a port: the route configuration ignores the Host
// header's. Names an earlier virtual host took are skipped (Envoy rejects
// duplicates).
func (sc *scope) domains(t target, used map[string]bool) []string {
	h := t.svc.Hostname
	names := []string{h}
	if _, err := netip.ParseAddr(h); err != nil {
		names = append(names, h+".")
	}
	if name, ok := strings.CutSuffix(h, "."+t.svc.Namespace+"."+model.DefaultDomainSuffix); ok {
		if t.svc.Namespace == sc.p.Namespace {
			names = append(names, name)
		}
		names = append(names, name+"."+t.svc.Namespace, name+"."+t.svc.Namespace+".svc")
	} else if first, _, ok := strings.Cut(h, "."); ok && t.svc.Namespace == sc.p.Namespace && !strings.HasPrefix(h, "*") {
		names = append(names, first)
	}
	for _, a := range t.svc.Addresses {
		if _, err := netip.ParseAddr(a); err == nil {
			if strings.Contains(a, ":") {
				a = "[" + a + "]"
			}
			names = append(names, a)
		}
	}
	var out []string
	for _, d := range names {
		if !used[d] {
			used[d] = true
			out = append(out, d)
		}
	}
	return out
}

func (sc *scope) virtualHost(t target, used map[string]bool) (*routev3.VirtualHost, error) {
	domains := sc.domains(t, used)
	if len(domains) == 0 {
		return nil, nil
	}
	vh := &routev3.VirtualHost{Name: t.svc.Hostname + ":" + itoa(t.port.Number), Domains: domains}
	if vs := sc.v.VirtualServiceFor(t.svc.Hostname); vs != nil {
		routes, err := sc.httpRoutes(t, vs)
		if err != nil {
			return nil, fmt.Errorf("VirtualService %s/%s: %w", vs.Namespace, vs.Name, err)
		}
		vh.Routes = routes
	}
	if len(vh.Routes) == 0 {
		vh.Routes = []*routev3.Route{sc.defaultRoute(t)}
	}
	return vh, nil
}

// defaultRoute sends everything to the service port's cluster with Istio's
// default retry policy and no timeout.
func (sc *scope) defaultRoute(t target) *routev3.Route {
	name := model.ClusterName(t.port.Number, "", t.svc.Hostname)
	ref, _ := sc.v.OwnCluster(t.svc, t.port.Number)
	hash := translate.HashPolicy(ref.DestinationRule, ref.Port.Number, "", translate.Envoy)
	return &routev3.Route{
		Name:  "default",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: name},
			Timeout:          durationpb.New(0),
			MaxGrpcTimeout:   grpcTimeout(nil),
			RetryPolicy:      translate.RetryPolicy(sc.v.Mesh().DefaultHTTPRetry, false), // Istio's default route: the previous-hosts predicate even when hashing
			HashPolicy:       hash,
		}},
	}
}

// httpRoutes translates a VirtualService's HTTP routes for one service
// port. Each match becomes one Envoy route (Istio's expansion); matches for
// another port, other source labels or only other gateways are skipped.
// The routes end at the first that selects every request (a route without
// matches, or a match translate.CatchAll calls so), as Istio's do.
// Delegating routes are merged by the model (model/delegate.go); one still
// delegating here is skipped.
func (sc *scope) httpRoutes(t target, vs *model.VirtualService) ([]*routev3.Route, error) {
	var out []*routev3.Route
	for i, hr := range vs.Spec.GetHttp() {
		if hr.GetDelegate() != nil {
			continue
		}
		base, err := sc.routeBody(t, vs, hr)
		if err != nil {
			return nil, fmt.Errorf("http[%d]: %w", i, err)
		}
		matches := hr.GetMatch()
		if len(matches) == 0 {
			matches = []*networking.HTTPMatchRequest{nil}
		}
		for _, m := range matches {
			if !sc.matchApplies(m, t.port.Number) {
				continue
			}
			r := cloneRoute(base)
			r.Name = cmpOr(hr.GetName(), strconv.Itoa(i))
			if m.GetName() != "" {
				r.Name += "." + m.GetName()
			}
			r.Match = translate.RouteMatch(m, translate.Envoy)
			if vs.GatewaySemantics {
				segmentPrefix(r.Match)
				stripPrefixRewrite(r)
			}
			out = append(out, r)
			if translate.CatchAll(r.Match) {
				return out, nil // nothing after it is reached (Istio leaves the rest out)
			}
		}
		if len(hr.GetMatch()) == 0 {
			return out, nil
		}
	}
	return out, nil
}

// segmentPrefix gives a Gateway API route's path prefix Envoy's
// path_separated_prefix, as Istio's route generator does for routes of
// gateway semantics: the regular expression gatewayapi writes for a
// PathPrefix ("/p(/.*)?", whole path segments; grpc-go has no segment
// prefix) becomes "/p", the same paths; a plain prefix but "/" (a
// GRPCRoute's service match, "/pkg.Service/") loses its trailing "/" and
// becomes "/pkg.Service" (which also takes the path "/pkg.Service", as
// Istio's). Envoy's prefix_rewrite (URLRewrite and RequestRedirect
// ReplacePrefixMatch) then replaces the prefix, where on a regex match it
// would replace the whole path.
func segmentPrefix(m *routev3.RouteMatch) {
	if p, ok := segmentprefix.Parse(m.GetSafeRegex().GetRegex()); ok {
		m.PathSpecifier = &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: p}
	} else if p := m.GetPrefix(); p != "" && p != "/" {
		m.PathSpecifier = &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: strings.TrimSuffix(p, "/")}
	}
}

// stripPrefixRewrite turns a Gateway API route's prefix rewrite "/" (its
// ReplacePrefixMatch "/", which removes the matched prefix) into the regex
// rewrite Istio generates for it: the route's path-separated prefix and an
// optional "/" are removed, keeping a "/" when the whole path goes (a
// prefix_rewrite "/" would turn /prefix/x into //x).
func stripPrefixRewrite(r *routev3.Route) {
	a := r.GetRoute()
	if a == nil || a.GetPrefixRewrite() != "/" {
		return
	}
	a.PrefixRewrite = ""
	a.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{
		Pattern:      &matcherv3.RegexMatcher{Regex: fmt.Sprintf(`^%s(/?)(.*)`, regexp.QuoteMeta(r.GetMatch().GetPathSeparatedPrefix()))},
		Substitution: `/\2`,
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// matchApplies reports whether a match can select traffic of this proxy
// on this port.
func (sc *scope) matchApplies(m *networking.HTTPMatchRequest, port uint32) bool {
	if m == nil {
		return true
	}
	if m.GetPort() != 0 && m.GetPort() != port {
		return false
	}
	if sc.gateway != "" {
		return translate.GatewaySourceMatches(m, sc.gatewayVSNamespace, sc.gateway, sc.p.Labels, sc.p.Namespace)
	}
	return translate.SourceMatches(m, sc.p.Labels, sc.p.Namespace)
}

// routeBody builds everything of a route but its name and match.
func (sc *scope) routeBody(t target, vs *model.VirtualService, hr *networking.HTTPRoute) (*routev3.Route, error) {
	r := &routev3.Route{}
	if h := hr.GetHeaders(); h != nil {
		r.RequestHeadersToAdd, r.RequestHeadersToRemove = headerOps(h.GetRequest())
		r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = headerOps(h.GetResponse())
	}
	cfg := make(map[string]*anypb.Any)
	if f := hr.GetFault(); f != nil {
		cfg[faultFilter] = mustAny(translate.Fault(f))
	}
	if c := hr.GetCorsPolicy(); c != nil {
		cfg[corsFilter] = mustAny(corsPolicy(c))
	}
	if len(cfg) > 0 {
		r.TypedPerFilterConfig = cfg
	}
	switch {
	case hr.GetRedirect() != nil:
		r.Action = &routev3.Route_Redirect{Redirect: redirect(hr.GetRedirect(), t.port.Number, sc.gatewayTLS)}
		return r, nil
	case hr.GetDirectResponse() != nil:
		r.Action = &routev3.Route_DirectResponse{DirectResponse: directResponse(hr.GetDirectResponse())}
		return r, nil
	}
	dests := sc.httpDestinations(t, vs, hr.GetRoute())
	if len(dests) == 0 {
		// Only destinations of weight 0 (validation refuses that): no
		// traffic may go anywhere.
		r.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 503}}
		return r, nil
	}
	a := &routev3.RouteAction{Timeout: durationpb.New(0)}
	if len(dests) == 1 {
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: dests[0].cluster}
		if h := hr.GetRoute()[dests[0].index].GetHeaders(); h != nil {
			rq, rqr := headerOps(h.GetRequest())
			rs, rsr := headerOps(h.GetResponse())
			r.RequestHeadersToAdd = append(r.RequestHeadersToAdd, rq...)
			r.RequestHeadersToRemove = append(r.RequestHeadersToRemove, rqr...)
			r.ResponseHeadersToAdd = append(r.ResponseHeadersToAdd, rs...)
			r.ResponseHeadersToRemove = append(r.ResponseHeadersToRemove, rsr...)
		}
	} else {
		wc := &routev3.WeightedCluster{}
		for _, d := range dests {
			cw := &routev3.WeightedCluster_ClusterWeight{Name: d.cluster, Weight: wrapperspb.UInt32(d.weight)}
			if h := hr.GetRoute()[d.index].GetHeaders(); h != nil {
				cw.RequestHeadersToAdd, cw.RequestHeadersToRemove = headerOps(h.GetRequest())
				cw.ResponseHeadersToAdd, cw.ResponseHeadersToRemove = headerOps(h.GetResponse())
			}
			wc.Clusters = append(wc.Clusters, cw)
		}
		a.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	for _, d := range dests {
		if d.found {
			a.HashPolicy = translate.HashPolicy(d.ref.DestinationRule, d.ref.Port.Number, d.ref.Subset, translate.Envoy)
			break
		}
	}
	if d := hr.GetTimeout(); d != nil {
		a.Timeout = d
	}
	a.MaxGrpcTimeout = grpcTimeout(a.Timeout)
	a.RetryPolicy = translate.RetryPolicy(cmp.Or(hr.GetRetries(), sc.v.Mesh().DefaultHTTPRetry), a.HashPolicy != nil)
	if rw := hr.GetRewrite(); rw != nil {
		if rr := rw.GetUriRegexRewrite(); rr != nil {
			a.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: rr.GetMatch()}, Substitution: rr.GetRewrite()}
		} else if uri := rw.GetUri(); uri != "" {
			a.PrefixRewrite = uri // per match for Gateway API's "/": stripPrefixRewrite
		}
		if rw.GetAuthority() != "" {
			a.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: rw.GetAuthority()}
		}
	}
	a.RequestMirrorPolicies = sc.mirrors(t, vs, hr)
	if vs.GatewaySemantics {
		// Gateway API routes: a backend the proxy has no cluster for
		// answers 500, as Istio's (and the Gateway API's) semantics say.
		a.ClusterNotFoundResponseCode = routev3.RouteAction_INTERNAL_SERVER_ERROR
	}
	r.Action = &routev3.Route_Route{Route: a}
	return r, nil
}

type httpDest struct {
	weighted
	index int  // in the HTTPRoute's destinations
	found bool // the proxy has the cluster (ref is set)
}

// httpDestinations names the clusters of route destinations: a destination
// of weight 0 beside others is left out (as Istio does); one whose host,
// port or subset the proxy has no cluster for keeps its place and weight
// under Istio's name for its cluster (model.View.RouteCluster), which CDS
// does not have, so that its share fails (503, "no cluster": NC) as under
// Istio instead of going to the other destinations.
func (sc *scope) httpDestinations(t target, vs *model.VirtualService, rds []*networking.HTTPRouteDestination) []httpDest {
	var out []httpDest
	for i, d := range rds {
		w, ok := translate.DestinationWeight(d.GetWeight(), len(rds))
		if !ok {
			continue
		}
		name, ref, ok := sc.routeCluster(t, vs, d.GetDestination())
		out = append(out, httpDest{weighted: weighted{cluster: name, weight: w, ref: ref}, index: i, found: ok})
	}
	return out
}

// routeCluster names the cluster of a route destination of the target's
// VirtualService, and returns it when the proxy has it
// (model.View.RouteCluster).
func (sc *scope) routeCluster(t target, vs *model.VirtualService, d *networking.Destination) (string, model.Cluster, bool) {
	return sc.v.RouteCluster(t.svc.Hostname, t.port.Number, vs, d)
}

func (sc *scope) mirrors(t target, vs *model.VirtualService, hr *networking.HTTPRoute) []*routev3.RouteAction_RequestMirrorPolicy {
	type mirror struct {
		dest *networking.Destination
		pct  *typev3.FractionalPercent // nil: an explicit 0, no mirror
	}
	// Istio's MirrorPercent / MirrorPercentByPolicy: a percentage as a
	// millionth, the legacy integer as a hundredth, none is 100/HUNDRED.
	hundred := func(v uint32) *typev3.FractionalPercent {
		return &typev3.FractionalPercent{Numerator: v, Denominator: typev3.FractionalPercent_HUNDRED}
	}
	var ms []mirror
	if hr.GetMirror() != nil {
		pct := hundred(100)
		switch {
		case hr.GetMirrorPercentage() != nil:
			pct = nil
			if hr.GetMirrorPercentage().GetValue() > 0 {
				pct = translate.Percent(hr.GetMirrorPercentage(), 0)
			}
		case hr.GetMirrorPercent() != nil:
			pct = nil
			if v := hr.GetMirrorPercent().GetValue(); v > 0 {
				pct = hundred(v)
			}
		}
		ms = append(ms, mirror{hr.GetMirror(), pct})
	}
	for _, m := range hr.GetMirrors() {
		pct := hundred(100)
		if m.GetPercentage() != nil {
			pct = nil
			if m.GetPercentage().GetValue() > 0 {
				pct = translate.Percent(m.GetPercentage(), 0)
			}
		}
		ms = append(ms, mirror{m.GetDestination(), pct})
	}
	var out []*routev3.RouteAction_RequestMirrorPolicy
	for _, m := range ms {
		if m.dest == nil || m.pct == nil {
			continue
		}
		// A mirror the proxy has no cluster for is kept, as Istio keeps it:
		// Envoy mirrors nothing to a cluster it does not have.
		name, _, _ := sc.routeCluster(t, vs, m.dest)
		// As Istio's (TranslateRequestMirrorPolicy, DISABLE_SHADOW_HOST_SUFFIX
		// on by default): the mirrored request keeps its host (no "-shadow")
		// and is not trace-sampled.
		out = append(out, &routev3.RouteAction_RequestMirrorPolicy{
			Cluster:                       name,
			RuntimeFraction:               &corev3.RuntimeFractionalPercent{DefaultValue: m.pct},
			TraceSampled:                  wrapperspb.Bool(false),
			DisableShadowHostSuffixAppend: true,
		})
	}
	return out
}

// headerOps translates set (overwrite), add (append) and remove.
func headerOps(h *networking.Headers_HeaderOperations) ([]*corev3.HeaderValueOption, []string) {
	if h == nil {
		return nil, nil
	}
	var add []*corev3.HeaderValueOption
	for _, k := range slices.Sorted(maps.Keys(h.GetSet())) {
		add = append(add, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: k, Value: h.GetSet()[k]},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	for _, k := range slices.Sorted(maps.Keys(h.GetAdd())) {
		add = append(add, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: k, Value: h.GetAdd()[k]},
			AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD,
		})
	}
	return add, slices.Clone(h.GetRemove())
}

// grpcTimeout is the route's max_grpc_timeout as Istio sets it: the route
// timeout, 0 (none) by default, so that a gRPC client's grpc-timeout header
// is honoured up to it.
func grpcTimeout(timeout *durationpb.Duration) *durationpb.Duration {
	return durationpb.New(timeout.AsDuration())
}

// corsPolicy translates Istio's CORS policy into the CORS filter's
// per-route config.
func corsPolicy(c *networking.CorsPolicy) *corsv3.CorsPolicy {
	out := &corsv3.CorsPolicy{
		AllowMethods:     strings.Join(c.GetAllowMethods(), ","),
		AllowHeaders:     strings.Join(c.GetAllowHeaders(), ","),
		ExposeHeaders:    strings.Join(c.GetExposeHeaders(), ","),
		AllowCredentials: c.GetAllowCredentials(),
	}
	if d := c.GetMaxAge(); d != nil {
		out.MaxAge = strconv.FormatInt(int64(d.AsDuration()/time.Second), 10)
	}
	for _, o := range c.GetAllowOrigin() {
		out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: o}})
	}
	for _, o := range c.GetAllowOrigins() {
		if sm := translate.StringMatcher(o); sm != nil {
			out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, sm)
		}
	}
	switch c.GetUnmatchedPreflights() {
	case networking.CorsPolicy_IGNORE:
		out.ForwardNotMatchingPreflights = wrapperspb.Bool(false)
	case networking.CorsPolicy_FORWARD:
		out.ForwardNotMatchingPreflights = wrapperspb.Bool(true)
	}
	return out
}

// redirect is a VirtualService redirect for a route served on port (of a
// TLS server when tls), as Istio's ApplyRedirect: derivePort
// FROM_REQUEST_PORT is that port (Envoy cannot derive it; the routes are
// per port), FROM_PROTOCOL_DEFAULT no port (Envoy's default), and a port
// that is its scheme's default (80 for http, 443 for https; the scheme
// the redirect's, else the server's) is left out, so the Location carries
// none.
func redirect(r *networking.HTTPRedirect, port uint32, tls bool) *routev3.RedirectAction {
	out := &routev3.RedirectAction{HostRedirect: r.GetAuthority()}
	if r.GetUri() != "" {
		out.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: r.GetUri()}
	} else if r.GetPrefixRewrite() != "" {
		out.PathRewriteSpecifier = &routev3.RedirectAction_PrefixRewrite{PrefixRewrite: r.GetPrefixRewrite()}
	}
	switch {
	case r.GetPort() != 0:
		out.PortRedirect = r.GetPort()
	case r.GetDerivePort() == networking.HTTPRedirect_FROM_REQUEST_PORT && r.GetRedirectPort() != nil:
		out.PortRedirect = port
	}
	if r.GetRedirectPort() != nil {
		scheme := r.GetScheme()
		if scheme == "" {
			scheme = "http"
			if tls {
				scheme = "https"
			}
		}
		if out.PortRedirect == 80 && scheme == "http" || out.PortRedirect == 443 && scheme == "https" {
			out.PortRedirect = 0
		}
	}
	if r.GetScheme() != "" {
		out.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: r.GetScheme()}
	}
	switch r.GetRedirectCode() {
	case 302:
		out.ResponseCode = routev3.RedirectAction_FOUND
	case 303:
		out.ResponseCode = routev3.RedirectAction_SEE_OTHER
	case 307:
		out.ResponseCode = routev3.RedirectAction_TEMPORARY_REDIRECT
	case 308:
		out.ResponseCode = routev3.RedirectAction_PERMANENT_REDIRECT
	default:
		out.ResponseCode = routev3.RedirectAction_MOVED_PERMANENTLY
	}
	return out
}

func directResponse(d *networking.HTTPDirectResponse) *routev3.DirectResponseAction {
	out := &routev3.DirectResponseAction{Status: d.GetStatus()}
	switch b := d.GetBody().GetSpecifier().(type) {
	case *networking.HTTPBody_String_:
		out.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: b.String_}}
	case *networking.HTTPBody_Bytes:
		out.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b.Bytes}}
	}
	return out
}
