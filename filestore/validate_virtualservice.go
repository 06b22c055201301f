package filestore

//lint:file-ignore SA1019 Istio's deprecated mirrorPercent is validated because Istio still accepts it

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// jwtClaimHeader prefixes the pseudo headers that route on JWT claims.
const jwtClaimHeader = "@request.auth.claims"

func validateVirtualService(v *validator, namespace string, vs *networking.VirtualService) {
	delegate := len(vs.Hosts) == 0
	if delegate {
		if len(vs.Gateways) > 0 {
			v.add("gateways", "a delegate VirtualService (no hosts) must not name gateways")
		}
		if len(vs.Tls) > 0 {
			v.add("tls", "a delegate VirtualService (no hosts) must not have tls routes")
		}
		if len(vs.Tcp) > 0 {
			v.add("tcp", "a delegate VirtualService (no hosts) must not have tcp routes")
		}
	}
	appliesToGateway := false
	if len(vs.Gateways) > 0 {
		checkGatewayNames(v, "gateways", vs.Gateways)
		appliesToGateway = !slices.Contains(vs.Gateways, "mesh")
	}
	if !appliesToGateway {
		for i, r := range vs.Http {
			for j, m := range r.GetMatch() {
				for name := range m.GetHeaders() {
					if isJWTClaimHeader(name) {
						v.add(at(at("http", i)+".match", j)+".headers."+name, "JWT claim routing (%s) is only supported on gateways", name)
					}
				}
				for name := range m.GetWithoutHeaders() {
					if isJWTClaimHeader(name) {
						v.add(at(at("http", i)+".match", j)+".withoutHeaders."+name, "JWT claim routing (%s) is only supported on gateways", name)
					}
				}
			}
		}
	}
	sni := vsHasSNI(vs)
	valid := true
	for i, h := range vs.Hosts {
		var msg string
		if appliesToGateway {
			msg = checkGatewayDomain(sni, h)
		} else {
			msg = checkWildcardDomain(h)
		}
		switch {
		case msg != "" && !isIP(h):
			v.add(at("hosts", i), "%s", msg)
			valid = false
		case msg == "" && !appliesToGateway && h == "*":
			v.add(at("hosts", i), `host "*" is not allowed in a VirtualService for the mesh (only for gateways)`)
			valid = false
		}
	}
	if valid {
		for i := range vs.Hosts {
			for j := i + 1; j < len(vs.Hosts); j++ {
				if hostMatches(vs.Hosts[i], vs.Hosts[j]) {
					v.add(at("hosts", j), "hosts %s and %s overlap", quote(vs.Hosts[i]), quote(vs.Hosts[j]))
				}
			}
		}
	}
	if len(vs.Http)+len(vs.Tcp)+len(vs.Tls) == 0 {
		v.add("http", "a VirtualService needs at least one http, tcp or tls route")
	}
	for i, r := range vs.Http {
		if r == nil {
			v.add(at("http", i), "an http route must not be null")
			continue
		}
		validateHTTPRoute(v, at("http", i), r, delegate)
	}
	for i, r := range vs.Tls {
		path := at("tls", i)
		if r == nil {
			continue
		}
		if len(r.Match) == 0 {
			v.add(path+".match", "a TLS route needs at least one match")
		}
		for j, m := range r.Match {
			mp := at(path+".match", j)
			if m == nil {
				v.add(mp, "a TLS match must not be null")
				continue
			}
			if len(m.SniHosts) == 0 {
				v.add(mp+".sniHosts", "a TLS match needs at least one SNI host")
			}
			for k, h := range m.SniHosts {
				checkSNIHost(v, at(mp+".sniHosts", k), h, vs)
			}
			checkL4Match(v, mp, m.DestinationSubnets, m.Port, m.SourceLabels, m.Gateways)
		}
		if len(r.Route) == 0 {
			v.add(path+".route", "a TLS route needs a route")
		}
		checkRouteDestinations(v, path+".route", r.Route)
	}
	for i, r := range vs.Tcp {
		path := at("tcp", i)
		if r == nil {
			continue
		}
		for j, m := range r.Match {
			mp := at(path+".match", j)
			if m == nil {
				v.add(mp, "a TCP match must not be null")
				continue
			}
			checkL4Match(v, mp, m.DestinationSubnets, m.Port, m.SourceLabels, m.Gateways)
		}
		if len(r.Route) == 0 {
			v.add(path+".route", "a TCP route needs a route")
		}
		checkRouteDestinations(v, path+".route", r.Route)
	}
	validateExportTo(v, namespace, vs.ExportTo, false, false)
}

func isJWTClaimHeader(name string) bool {
	rest, ok := strings.CutPrefix(strings.ToLower(name), jwtClaimHeader)
	if !ok {
		return false
	}
	return (strings.HasPrefix(rest, ".") && len(rest) > 1) || (strings.HasPrefix(rest, "[") && strings.HasSuffix(rest, "]") && len(rest) > 2)
}

func vsHasSNI(vs *networking.VirtualService) bool {
	for _, r := range vs.Tls {
		for _, m := range r.GetMatch() {
			if len(m.GetSniHosts()) > 0 {
				return true
			}
		}
	}
	return false
}

// checkSNIHost: an SNI host must be a (wildcard) domain within one of the
// VirtualService's hosts; an IP address is allowed (Istio warns).
func checkSNIHost(v *validator, field, h string, vs *networking.VirtualService) {
	if msg := sniHostProblem(h, vs); msg != "" {
		if !isIP(h) {
			v.add(field, "%s", msg)
		}
		return
	}
	for _, host := range vs.Hosts {
		if hostSubsetOf(h, host) {
			return
		}
	}
	v.add(field, "SNI host %s is not within any of the VirtualService's hosts [%s]", quote(h), strings.Join(vs.Hosts, ", "))
}

// sniHostProblem says why an SNI host is not a domain name a TLS route of
// the VirtualService may match (bound to gateways, or to the mesh too);
// "" when it is one.
func sniHostProblem(h string, vs *networking.VirtualService) string {
	if !slices.Contains(vs.Gateways, "mesh") {
		return checkGatewayDomain(true, h)
	}
	return checkWildcardDomain(h)
}

func checkL4Match(v *validator, path string, subnets []string, port uint32, sourceLabels map[string]string, gateways []string) {
	for k, s := range subnets {
		v.check(at(path+".destinationSubnets", k), checkIPSubnet(s))
	}
	if port != 0 {
		v.check(path+".port", checkIstioPort(int64(port)))
	}
	checkSpecLabels(v, path+".sourceLabels", sourceLabels)
	checkGatewayNames(v, path+".gateways", gateways)
}

// checkGatewayNames: "<namespace>/<name>" with DNS labels, or a plain
// (legacy "name.namespace") domain name; Istio stops at the first plain one.
func checkGatewayNames(v *validator, path string, names []string) {
	for i, g := range names {
		ns, name, ok := strings.Cut(g, "/")
		if !ok {
			v.check(at(path, i), checkFQDN(g))
			return
		}
		if ns == "" || name == "" {
			v.add(at(path, i), "gateway %s: namespace and name cannot be empty", quote(g))
		}
		if !isIstioLabel(ns) {
			v.add(at(path, i), "gateway %s: invalid namespace %s", quote(g), quote(ns))
		}
		if !isIstioLabel(name) {
			v.add(at(path, i), "gateway %s: invalid name %s", quote(g), quote(name))
		}
	}
}

func validateHTTPRoute(v *validator, path string, r *networking.HTTPRoute, delegate bool) {
	checkHTTPRouteConflicts(v, path, r, delegate)
	for j, m := range r.Match {
		mp := at(path+".match", j)
		if m == nil {
			continue
		}
		for name, hm := range m.Headers {
			hp := mp + ".headers." + name
			if hm == nil {
				v.add(hp, "header match %s must not be null", quote(name))
			}
			checkMatchHeaderName(v, hp, name)
			checkStringMatch(v, hp, hm, false)
		}
		for name, hm := range m.WithoutHeaders {
			hp := mp + ".withoutHeaders." + name
			checkMatchHeaderName(v, hp, name)
			if hm != nil && hm.GetRegex() != "*" { // "*" means "present", not a regex
				checkStringMatch(v, hp, hm, false)
			}
		}
		checkStringMatch(v, mp+".uri", m.Uri, true) // an empty uri prefix matches everything
		checkStringMatch(v, mp+".scheme", m.Scheme, false)
		checkStringMatch(v, mp+".method", m.Method, false)
		checkStringMatch(v, mp+".authority", m.Authority, false)
		for name, qm := range m.QueryParams {
			checkStringMatch(v, mp+".queryParams."+name, qm, false)
		}
		if m.Port != 0 {
			v.check(mp+".port", checkIstioPort(int64(m.Port)))
		}
		checkSpecLabels(v, mp+".sourceLabels", m.SourceLabels)
		checkGatewayNames(v, mp+".gateways", m.Gateways)
		if m.SourceNamespace != "" && !isIstioLabel(m.SourceNamespace) {
			v.add(mp+".sourceNamespace", "sourceNamespace %s is not a valid namespace", quote(m.SourceNamespace))
		}
	}
	checkHeaderOperations(v, path+".headers", r.Headers)
	checkCORSPolicy(v, path+".corsPolicy", r.CorsPolicy)
	checkFault(v, path+".fault", r.Fault)
	if r.MirrorPercent != nil && r.MirrorPercent.GetValue() > 100 {
		v.add(path+".mirrorPercent", "mirrorPercent %d must be at most 100", r.MirrorPercent.GetValue())
	}
	if mp := r.MirrorPercentage; mp != nil && (mp.GetValue() > 100 || mp.GetValue() < 0) {
		v.add(path+".mirrorPercentage.value", "mirrorPercentage %g must be in 0-100", mp.GetValue())
	}
	checkDestination(v, path+".mirror", r.Mirror)
	for j, m := range r.Mirrors {
		mp := at(path+".mirrors", j)
		if m == nil || m.Destination == nil {
			v.add(mp+".destination", "a mirror needs a destination")
			continue
		}
		checkDestination(v, mp+".destination", m.Destination)
		if p := m.Percentage; p != nil && (p.GetValue() > 100 || p.GetValue() < 0) {
			v.add(mp+".percentage.value", "mirror percentage %g must be in 0-100", p.GetValue())
		}
	}
	checkRedirect(v, path+".redirect", r.Redirect, r.Match)
	if dr := r.DirectResponse; dr != nil {
		size := len(dr.GetBody().GetString_()) + len(dr.GetBody().GetBytes())
		if size > 1<<20 {
			v.add(path+".directResponse.body", "a direct response body must be smaller than 1MB")
		}
		checkHTTPStatus(v, path+".directResponse.status", int64(dr.Status))
	}
	checkRetries(v, path+".retries", r.Retries)
	checkRewrite(v, path+".rewrite", r.Rewrite, r.Headers)
	for j, d := range r.Route {
		dp := at(path+".route", j)
		if d == nil {
			v.add(dp, "a route destination must not be null")
			continue
		}
		if d.Destination == nil {
			v.add(dp+".destination", "destination is required")
		}
		checkHeaderOperations(v, dp+".headers", d.Headers)
		checkDestination(v, dp+".destination", d.Destination)
		if d.Weight < 0 {
			v.add(dp+".weight", "weight %d must not be negative", d.Weight)
		}
	}
	checkTotalWeight(v, path+".route", len(r.Route), func(j int) int32 { return r.Route[j].GetWeight() })
	checkIstioDuration(v, path+".timeout", r.Timeout)
}

func checkHTTPRouteConflicts(v *validator, path string, r *networking.HTTPRoute, delegate bool) {
	if !delegate && r.Delegate != nil { // a root route only delegates
		if r.Redirect != nil {
			v.add(path+".redirect", "a route with delegate must not have a redirect")
		}
		if r.Route != nil {
			v.add(path+".route", "a route with delegate must not have route destinations")
		}
		return
	}
	if delegate && r.Delegate != nil {
		v.add(path+".delegate", "a delegate VirtualService's route cannot delegate again")
	}
	switch {
	case r.Redirect != nil:
		for _, c := range []struct {
			set  bool
			name string
		}{{len(r.Route) > 0, "route"}, {r.Fault != nil, "fault"}, {r.Rewrite != nil, "rewrite"}, {r.DirectResponse != nil, "directResponse"}} {
			if c.set {
				v.add(path+"."+c.name, "%s cannot be combined with redirect", c.name)
			}
		}
	case r.DirectResponse != nil:
		for _, c := range []struct {
			set  bool
			name string
		}{{len(r.Route) > 0, "route"}, {r.Fault != nil, "fault"}, {r.Rewrite != nil, "rewrite"}} {
			if c.set {
				v.add(path+"."+c.name, "%s cannot be combined with directResponse", c.name)
			}
		}
	case len(r.Route) == 0:
		v.add(path+".route", "an HTTP route needs route, redirect or directResponse")
	}
	if r.Mirror != nil && len(r.Mirrors) > 0 {
		v.add(path+".mirrors", "mirror and mirrors are mutually exclusive")
	}
}

var pseudoHeaders = []string{":method", ":scheme", ":authority", ":path", ":status"}

func checkMatchHeaderName(v *validator, field, name string) {
	switch {
	case name == "":
		v.add(field, "header name must not be empty")
	case isJWTClaimHeader(name), slices.Contains(pseudoHeaders, name):
	case !headerNameRE.MatchString(name):
		v.add(field, "%s is not a valid header name", quote(name))
	}
}

// checkStringMatch: a prefix must not be empty (except for uri), and a
// regex must be a valid RE2 expression of at most 1024 characters.
func checkStringMatch(v *validator, field string, m *networking.StringMatch, emptyPrefixOK bool) {
	switch t := m.GetMatchType().(type) {
	case *networking.StringMatch_Prefix:
		if t.Prefix == "" && !emptyPrefixOK {
			v.add(field+".prefix", "a prefix match must not be empty")
		}
	case *networking.StringMatch_Regex:
		checkRegex(v, field+".regex", t.Regex)
	}
}

func checkRegex(v *validator, field, re string) {
	switch {
	case re == "":
		v.add(field, "a regex must not be empty")
	case len(re) > 1024:
		v.add(field, "a regex must be at most 1024 characters")
	default:
		if _, err := regexp.Compile(re); err != nil {
			v.add(field, "invalid regular expression (RE2 syntax): %v", err)
		}
	}
}

func checkHeaderOperations(v *validator, path string, h *networking.Headers) {
	if h == nil {
		return
	}
	for _, side := range []struct {
		name string
		ops  *networking.Headers_HeaderOperations
	}{{"request", h.Request}, {"response", h.Response}} {
		if side.ops == nil {
			continue
		}
		p := path + "." + side.name
		for _, op := range []struct {
			name string
			m    map[string]string
		}{{"add", side.ops.Add}, {"set", side.ops.Set}} {
			for name, val := range op.m {
				checkHeaderOpName(v, p+"."+op.name+"."+name, name, side.name == "request")
				v.check(p+"."+op.name+"."+name, checkHeaderValue(val))
			}
		}
		for i, name := range side.ops.Remove {
			checkHeaderOpName(v, at(p+".remove", i), name, false)
		}
	}
}

// checkHeaderOpName: a header to add, set or remove must be named, and
// cannot be a pseudo header or Host; adding or setting the request
// authority (":authority" or "host") is allowed.
func checkHeaderOpName(v *validator, field, name string, authorityOK bool) {
	switch {
	case name == "":
		v.add(field, "header name must not be empty")
	case authorityOK && (strings.EqualFold(name, ":authority") || strings.EqualFold(name, "host")):
	case strings.EqualFold(name, "host"):
		v.add(field, "the Host header cannot be set")
	case strings.HasPrefix(name, ":"):
		v.add(field, "header %s: a header cannot have a \":\" prefix", quote(name))
	}
}

var headerValueRE = regexp.MustCompile("^[^\u0000-\u0008\u000A-\u001F\u007F]*$")

// checkHeaderValue rejects control characters and a malformed Envoy
// %VARIABLE% / %VARIABLE(args)% expression ("%%" is a literal %), following
// the grammar of Istio's header value parser.
func checkHeaderValue(s string) string {
	if !headerValueRE.MatchString(s) {
		return fmt.Sprintf("header value %s has control characters", quote(s))
	}
	const (
		literal    = iota
		name       // in %NAME
		argsStart  // after "(": "[" opens a list, anything else a bare argument
		listString // expecting a quoted string in the list
		argument   // in a bare argument or a quoted string
		listNext   // after a list string: "," or "]"
		argsEnd    // after "]": expecting ")"
		varEnd     // after ")": expecting "%"
	)
	bad := func(what string) string { return fmt.Sprintf("header value %s: %s", quote(s), what) }
	state := literal
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch state {
		case literal:
			if c != '%' {
				continue
			}
			if i+1 == len(s) {
				return bad("unescaped %")
			}
			if s[i+1] == '%' {
				i++
				continue
			}
			state = name
		case name:
			if c == '%' {
				state = literal
			} else if c == '(' {
				state = argsStart
			}
		case argsStart:
			if c == '[' {
				state = listString
			} else if c != ' ' {
				state = argument
			}
		case listNext:
			switch c {
			case ',':
				state = listString
			case ']':
				state = argsEnd
			case ' ':
			default:
				return bad(`expecting ',', ']' or a space`)
			}
		case listString:
			if c == '"' {
				state = argument
			} else if c != ' ' {
				return bad(`expecting '"'`)
			}
		case argument:
			switch c {
			case '\\':
				if i+1 == len(s) {
					return bad("unterminated backslash")
				}
				i++
			case ')':
				state = varEnd
			case '"':
				state = listNext
			}
		case argsEnd:
			if c == ')' {
				state = varEnd
			} else if c != ' ' {
				return bad("expecting ')'")
			}
		case varEnd:
			if c == '%' {
				state = literal
			} else if c != ' ' {
				return bad("expecting '%' after ')'")
			}
		}
	}
	if state != literal {
		return bad("unterminated %VARIABLE% expression")
	}
	return ""
}

var corsMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace, "*"}

func checkCORSPolicy(v *validator, path string, p *networking.CorsPolicy) {
	if p == nil {
		return
	}
	for i, o := range p.AllowOrigins {
		op := at(path+".allowOrigins", i)
		if o.GetExact()+o.GetPrefix()+o.GetRegex() == "" {
			v.add(op, "an allowed origin must be a non-empty exact, prefix or regex match")
			continue
		}
		checkStringMatch(v, op, o, false)
	}
	for i, m := range p.AllowMethods {
		if !slices.Contains(corsMethods, m) {
			v.add(at(path+".allowMethods", i), "%s is not a supported HTTP method", quote(m))
		}
	}
	for field, names := range map[string][]string{"allowHeaders": p.AllowHeaders, "exposeHeaders": p.ExposeHeaders} {
		for i, n := range names {
			switch {
			case n == "":
				v.add(at(path+"."+field, i), "header name must not be empty")
			case n != "*" && !headerNameRE.MatchString(n):
				v.add(at(path+"."+field, i), "%s is not a valid header name", quote(n))
			}
		}
	}
	if p.MaxAge != nil {
		checkIstioDuration(v, path+".maxAge", p.MaxAge)
		if p.MaxAge.Nanos > 0 {
			v.add(path+".maxAge", "maxAge is accurate to seconds only")
		}
	}
}

func checkFault(v *validator, path string, f *networking.HTTPFaultInjection) {
	if f == nil {
		return
	}
	if f.Abort == nil && f.Delay == nil {
		v.add(path, "a fault needs an abort, a delay or both")
	}
	if a := f.Abort; a != nil {
		checkFaultPercentage(v, path+".abort.percentage.value", a.Percentage)
		switch e := a.ErrorType.(type) {
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			if _, ok := grpcStatusCodes[e.GrpcStatus]; !ok {
				v.add(path+".abort.grpcStatus", "unknown gRPC status %s", quote(e.GrpcStatus))
			}
		case *networking.HTTPFaultInjection_Abort_Http2Error:
			v.add(path+".abort.http2Error", "HTTP/2 abort fault injection is not supported")
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			checkHTTPStatus(v, path+".abort.httpStatus", int64(e.HttpStatus))
		}
	}
	if d := f.Delay; d != nil {
		checkFaultPercentage(v, path+".delay.percentage.value", d.Percentage)
		switch t := d.HttpDelayType.(type) {
		case *networking.HTTPFaultInjection_Delay_FixedDelay:
			checkIstioDuration(v, path+".delay.fixedDelay", t.FixedDelay)
		case *networking.HTTPFaultInjection_Delay_ExponentialDelay:
			v.add(path+".delay.exponentialDelay", "exponentialDelay is not supported")
		}
	}
}

func checkFaultPercentage(v *validator, field string, p *networking.Percent) {
	if p == nil {
		return
	}
	if p.Value < 0 || p.Value > 100 || (p.Value > 0 && p.Value < 0.0001) {
		v.add(field, "percentage %g must be in 0-100 (0, or at least 0.0001)", p.Value)
	}
}

func checkHTTPStatus(v *validator, field string, s int64) {
	if s < 200 || s > 600 {
		v.add(field, "HTTP status %d must be in 200-599", s)
	}
}

func checkRedirect(v *validator, path string, rd *networking.HTTPRedirect, matches []*networking.HTTPMatchRequest) {
	if rd == nil {
		return
	}
	if rd.Uri != "" && rd.PrefixRewrite != "" {
		v.add(path, "uri and prefixRewrite are mutually exclusive")
		return
	}
	if rd.PrefixRewrite != "" {
		for _, m := range matches {
			if _, prefix := m.GetUri().GetMatchType().(*networking.StringMatch_Prefix); m.GetUri() != nil && !prefix {
				v.add(path+".prefixRewrite", "prefixRewrite needs every uri match to be a prefix match")
				return
			}
		}
	}
	if rd.Uri == "" && rd.PrefixRewrite == "" && rd.Authority == "" && rd.RedirectPort == nil && rd.Scheme == "" {
		v.add(path, "a redirect must set uri, prefixRewrite, authority, scheme or port")
		return
	}
	if rd.RedirectCode != 0 && (rd.RedirectCode < 300 || rd.RedirectCode > 399) {
		v.add(path+".redirectCode", "redirect code %d must be in 300-399", rd.RedirectCode)
		return
	}
	if rd.Scheme != "" && rd.Scheme != "http" && rd.Scheme != "https" {
		v.add(path+".scheme", `scheme must be "http" or "https"`)
		return
	}
	if rd.GetPort() > 0 {
		v.check(path+".port", checkIstioPort(int64(rd.GetPort())))
	}
}

var retryOnPolicies = []string{
	"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "retriable-4xx", "refused-stream",
	"retriable-status-codes", "retriable-headers", "envoy-ratelimited", "http3-post-connect-failure",
	"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable",
}

func checkRetries(v *validator, path string, rt *networking.HTTPRetry) {
	if rt == nil {
		return
	}
	if rt.Attempts < 0 {
		v.add(path+".attempts", "attempts must not be negative")
	}
	if rt.Attempts == 0 && (rt.PerTryTimeout != nil || rt.RetryOn != "" || rt.RetryRemoteLocalities != nil) {
		v.add(path+".attempts", "attempts 0 disables retries; perTryTimeout, retryOn and retryRemoteLocalities need attempts")
	}
	checkIstioDuration(v, path+".perTryTimeout", rt.PerTryTimeout)
	if rt.RetryOn != "" {
		for _, on := range strings.Split(rt.RetryOn, ",") {
			if code, _ := strconv.Atoi(on); http.StatusText(code) == "" && !slices.Contains(retryOnPolicies, on) {
				v.add(path+".retryOn", "unknown retry condition %s", quote(on))
			}
		}
	}
	checkIstioDuration(v, path+".backoff", rt.Backoff)
}

func checkRewrite(v *validator, path string, rw *networking.HTTPRewrite, h *networking.Headers) {
	if rw != nil {
		switch {
		case rw.Uri != "" && rw.UriRegexRewrite != nil:
			v.add(path, "uri and uriRegexRewrite are mutually exclusive")
		case rw.Uri == "" && rw.UriRegexRewrite == nil && rw.Authority == "":
			v.add(path, "a rewrite must set uri, uriRegexRewrite or authority")
		case rw.UriRegexRewrite != nil:
			rr := rw.UriRegexRewrite
			if rr.Match == "" || rr.Rewrite == "" {
				v.add(path+".uriRegexRewrite", "uriRegexRewrite needs both match and rewrite")
			} else {
				checkRegex(v, path+".uriRegexRewrite.match", rr.Match)
			}
		}
	}
	authority := rw.GetAuthority()
	for _, m := range []map[string]string{h.GetRequest().GetSet(), h.GetRequest().GetAdd()} {
		for k := range m {
			if !strings.EqualFold(k, ":authority") && !strings.EqualFold(k, "host") {
				continue
			}
			if authority != "" {
				v.add(path+".authority", "the authority is rewritten more than once")
				return
			}
			authority = m[k]
		}
	}
}

func checkRouteDestinations(v *validator, path string, route []*networking.RouteDestination) {
	for j, d := range route {
		dp := at(path, j)
		if d == nil {
			v.add(dp, "a route destination must not be null")
			continue
		}
		if d.Destination == nil {
			v.add(dp+".destination", "destination is required")
		}
		checkDestination(v, dp+".destination", d.Destination)
		if d.Weight < 0 {
			v.add(dp+".weight", "weight %d must not be negative", d.Weight)
		}
	}
	checkTotalWeight(v, path, len(route), func(j int) int32 { return route[j].GetWeight() })
}

// checkTotalWeight: weights are relative (Envoy divides by their sum), so
// only a total of 0 across several destinations is invalid.
func checkTotalWeight(v *validator, path string, n int, weight func(int) int32) {
	var sum int64
	for j := 0; j < n; j++ {
		sum += int64(weight(j))
	}
	if n > 1 && sum == 0 {
		v.add(at(path, 0)+".weight", "the weights of the %d destinations add up to 0", n)
	}
}

func checkDestination(v *validator, path string, d *networking.Destination) {
	if d == nil {
		return
	}
	if d.Host == "" {
		v.add(path+".host", "host is required")
	} else if d.Host == "*" {
		v.add(path+".host", `destination host "*" is not allowed`)
	} else {
		v.check(path+".host", checkWildcardDomain(d.Host))
	}
	if d.Subset != "" && !isIstioLabel(d.Subset) {
		v.add(path+".subset", "subset name %s is not a valid DNS-1123 label", quote(d.Subset))
	}
	if d.Port != nil {
		v.check(path+".port.number", checkIstioPort(int64(d.Port.Number)))
	}
}

var grpcStatusCodes = map[string]struct{}{
	"OK": {}, "CANCELLED": {}, "UNKNOWN": {}, "INVALID_ARGUMENT": {}, "DEADLINE_EXCEEDED": {}, "NOT_FOUND": {},
	"ALREADY_EXISTS": {}, "PERMISSION_DENIED": {}, "RESOURCE_EXHAUSTED": {}, "FAILED_PRECONDITION": {},
	"ABORTED": {}, "OUT_OF_RANGE": {}, "UNIMPLEMENTED": {}, "INTERNAL": {}, "UNAVAILABLE": {}, "DATA_LOSS": {},
	"UNAUTHENTICATED": {},
}
