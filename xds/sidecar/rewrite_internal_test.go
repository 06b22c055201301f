package sidecar

import (
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
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
