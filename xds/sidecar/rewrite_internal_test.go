package sidecar

import (
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	networking "istio.io/api/networking/v1alpha3"
)

// Gateway API routes: gatewayapi's segment-prefix regex and a plain prefix
// become Envoy's path_separated_prefix (as Istio's), other regexes stay, and a prefix
// rewrite "/" becomes Istio's regex rewrite of that prefix (the oracle's
// gwapi-*-rewrite-path cases compare whole routes).
func TestGatewayPrefixRewrite(t *testing.T) {
	regex := func(re string) *routev3.RouteMatch {
		return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}
	}
	for _, c := range []struct{ re, want string }{
		{`/strip-prefix(/.*)?`, "/strip-prefix"},
		{`/a\.b/c(/.*)?`, "/a.b/c"},
		{`/a.b(/.*)?`, ""},  // not a quoted path: a real regex
		{`/a(/.*)`, ""},     // not the segment form
		{`(/.*)?`, ""},      // empty prefix
		{`a/b(/.*)?`, ""},   // not a path
		{`/a\?b(/.*)?`, ""}, // a query is no path
	} {
		m := regex(c.re)
		segmentPrefix(m)
		if got := m.GetPathSeparatedPrefix(); got != c.want {
			t.Errorf("segmentPrefix(%q) = %q, want %q", c.re, got, c.want)
		}
		if c.want == "" && m.GetSafeRegex().GetRegex() != c.re {
			t.Errorf("segmentPrefix(%q) changed the regex: %v", c.re, m)
		}
	}

	// A plain prefix (a GRPCRoute's service match) loses its trailing "/",
	// as Istio writes every Gateway API prefix but "/".
	for _, c := range []struct{ prefix, want string }{
		{"/pkg.Svc/", "/pkg.Svc"},
		{"/api", "/api"},
		{"/", ""}, // every path: stays a prefix
	} {
		m := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: c.prefix}}
		segmentPrefix(m)
		if got := m.GetPathSeparatedPrefix(); got != c.want || (c.want == "" && m.GetPrefix() != c.prefix) {
			t.Errorf("segmentPrefix(prefix %q) = %v, want path_separated_prefix %q", c.prefix, m, c.want)
		}
	}

	r := &routev3.Route{Match: regex(`/strip-prefix(/.*)?`), Action: &routev3.Route_Route{Route: &routev3.RouteAction{PrefixRewrite: "/"}}}
	segmentPrefix(r.Match)
	stripPrefixRewrite(r)
	a := r.GetRoute()
	if a.GetPrefixRewrite() != "" || a.GetRegexRewrite().GetPattern().GetRegex() != `^/strip-prefix(/?)(.*)` || a.GetRegexRewrite().GetSubstitution() != `/\2` {
		t.Errorf("rewrite /: %v", a)
	}
	r = &routev3.Route{Match: regex(`/p(/.*)?`), Action: &routev3.Route_Route{Route: &routev3.RouteAction{PrefixRewrite: "/one"}}}
	segmentPrefix(r.Match)
	stripPrefixRewrite(r)
	if a := r.GetRoute(); a.GetPrefixRewrite() != "/one" || a.GetRegexRewrite() != nil {
		t.Errorf("rewrite /one: %v", a)
	}
}

// TestRedirectPort: a redirect's port as Istio's ApplyRedirect writes it:
// derivePort FROM_REQUEST_PORT is the route's port, FROM_PROTOCOL_DEFAULT
// none, and a scheme's default port (80 http, 443 https; the scheme the
// redirect's, else the server's) is left out.
func TestRedirectPort(t *testing.T) {
	fromRequest := &networking.HTTPRedirect_DerivePort{DerivePort: networking.HTTPRedirect_FROM_REQUEST_PORT}
	fromProtocol := &networking.HTTPRedirect_DerivePort{DerivePort: networking.HTTPRedirect_FROM_PROTOCOL_DEFAULT}
	port := func(p uint32) *networking.HTTPRedirect_Port { return &networking.HTTPRedirect_Port{Port: p} }
	for _, c := range []struct {
		name   string
		r      *networking.HTTPRedirect
		listen uint32
		tls    bool
		want   uint32
	}{
		{"no port", &networking.HTTPRedirect{Authority: "a"}, 8080, false, 0},
		{"explicit", &networking.HTTPRedirect{RedirectPort: port(8080)}, 80, false, 8080},
		{"explicit 80 http", &networking.HTTPRedirect{RedirectPort: port(80)}, 8080, false, 0},
		{"explicit 80 https", &networking.HTTPRedirect{RedirectPort: port(80), Scheme: "https"}, 8080, false, 80},
		{"explicit 443 https", &networking.HTTPRedirect{RedirectPort: port(443), Scheme: "https"}, 80, false, 0},
		{"explicit 443 on a TLS server", &networking.HTTPRedirect{RedirectPort: port(443)}, 443, true, 0},
		{"request port", &networking.HTTPRedirect{RedirectPort: fromRequest}, 8080, false, 8080},
		{"request port 80", &networking.HTTPRedirect{RedirectPort: fromRequest}, 80, false, 0},
		{"request port 443 TLS", &networking.HTTPRedirect{RedirectPort: fromRequest}, 443, true, 0},
		{"protocol default", &networking.HTTPRedirect{RedirectPort: fromProtocol, Scheme: "https"}, 8080, false, 0},
	} {
		if got := redirect(c.r, c.listen, c.tls).GetPortRedirect(); got != c.want {
			t.Errorf("%s: port_redirect %d, want %d", c.name, got, c.want)
		}
	}
}
