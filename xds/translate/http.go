package translate

//lint:file-ignore SA1019 Istio's deprecated delay percent is read because Istio still honours it

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// DefaultRetryOn is Istio's retry_on when a VirtualService's retries name no
// conditions (and of the sidecar's default retry policy). gRPC clients act
// on the gRPC status names in it (unavailable, cancelled).
const DefaultRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"

// Client says which data plane a translation is for: grpc-go implements a
// subset of Envoy's route matching and hashing.
type Client int

// Clients.
const (
	// Envoy gets every field.
	Envoy Client = iota
	// Proxyless is grpc-go: no query parameter or :scheme matches (grpc-go
	// ignores a route with query parameter matchers), no cookie or query
	// parameter hashing, and source-IP affinity as per-channel hashing.
	Proxyless
)

// SourceMatches reports whether an HTTP match can select requests of a
// mesh client (an Envoy sidecar or a proxyless gRPC client) with these
// labels in this namespace, as Istio decides it: a match naming gateways
// applies when "mesh" is among them, whatever its sourceLabels and
// sourceNamespace say; otherwise its sourceLabels must all be the
// client's and its sourceNamespace, when set, the client's namespace. A
// nil match applies to every client. (A match's port is checked apart.)
func SourceMatches(m *networking.HTTPMatchRequest, labels map[string]string, namespace string) bool {
	if m == nil {
		return true
	}
	if gw := m.GetGateways(); len(gw) > 0 {
		return slices.Contains(gw, "mesh")
	}
	for k, v := range m.GetSourceLabels() {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return m.GetSourceNamespace() == "" || m.GetSourceNamespace() == namespace
}

// GatewaySourceMatches reports whether an HTTP match of a VirtualService
// in vsNamespace can select requests a gateway (Istio's router) serving
// gateway ("namespace/name") receives, as Istio's sourceMatchHTTP decides
// it for gateways: a match naming gateways applies when gateway is among
// them (each resolved in vsNamespace, model.ResolveGatewayName);
// otherwise its sourceLabels must all be the router's and its
// sourceNamespace, when set, the router's namespace.
func GatewaySourceMatches(m *networking.HTTPMatchRequest, vsNamespace, gateway string, labels map[string]string, namespace string) bool {
	if m == nil {
		return true
	}
	return GatewayMatches(m.GetGateways(), m.GetSourceLabels(), m.GetSourceNamespace(), vsNamespace, gateway, labels, namespace)
}

// GatewayMatches is GatewaySourceMatches on a match's fields (HTTP, TLS
// and TCP matches have the same three).
func GatewayMatches(gateways []string, sourceLabels map[string]string, sourceNamespace, vsNamespace, gateway string, labels map[string]string, namespace string) bool {
	if len(gateways) > 0 {
		for _, g := range gateways {
			if model.ResolveGatewayName(g, vsNamespace) == gateway {
				return true
			}
		}
		return false
	}
	for k, v := range sourceLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return sourceNamespace == "" || sourceNamespace == namespace
}

// CatchAll reports whether a route match selects every request, as
// Istio's IsCatchAllRoute decides: path prefix "/" (or path-separated
// prefix "/", or regex ".*") with no header, query parameter or metadata
// condition. Routes after such a route are never reached; Istio leaves
// them out.
func CatchAll(m *routev3.RouteMatch) bool {
	var all bool
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		all = p.Prefix == "/"
	case *routev3.RouteMatch_PathSeparatedPrefix:
		all = p.PathSeparatedPrefix == "/"
	case *routev3.RouteMatch_SafeRegex:
		all = p.SafeRegex.GetRegex() == ".*"
	}
	return all && len(m.GetHeaders()) == 0 && len(m.GetQueryParameters()) == 0 && len(m.GetDynamicMetadata()) == 0
}

// RouteMatch translates one Istio match; nil matches every request. Header
// names are lower-cased; a string match without a type means "present".
func RouteMatch(m *networking.HTTPMatchRequest, c Client) *routev3.RouteMatch {
	rm := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if m == nil {
		return rm
	}
	switch u := m.GetUri().GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		rm.PathSpecifier = &routev3.RouteMatch_Path{Path: u.Exact}
	case *networking.StringMatch_Prefix:
		rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: u.Prefix}
	case *networking.StringMatch_Regex:
		rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: u.Regex}}
	}
	if m.GetIgnoreUriCase() {
		rm.CaseSensitive = wrapperspb.Bool(false)
	}
	add := func(name string, sm *networking.StringMatch, invert bool) {
		hm := &routev3.HeaderMatcher{Name: name, InvertMatch: invert}
		if s := StringMatcher(sm); s != nil {
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: s}
		} else {
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
		}
		rm.Headers = append(rm.Headers, hm)
	}
	if a := m.GetAuthority(); a != nil {
		add(":authority", a, false)
	}
	if mm := m.GetMethod(); mm != nil {
		add(":method", mm, false)
	}
	if sm := m.GetScheme(); sm != nil && c == Envoy {
		add(":scheme", sm, false)
	}
	for _, name := range slices.Sorted(maps.Keys(m.GetHeaders())) {
		add(strings.ToLower(name), m.GetHeaders()[name], false)
	}
	for _, name := range slices.Sorted(maps.Keys(m.GetWithoutHeaders())) {
		add(strings.ToLower(name), m.GetWithoutHeaders()[name], true)
	}
	if c != Envoy {
		return rm
	}
	for _, name := range slices.Sorted(maps.Keys(m.GetQueryParams())) {
		qm := &routev3.QueryParameterMatcher{Name: name}
		if s := StringMatcher(m.GetQueryParams()[name]); s != nil {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_StringMatch{StringMatch: s}
		} else {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		}
		rm.QueryParameters = append(rm.QueryParameters, qm)
	}
	return rm
}

// StringMatcher translates an Istio string match; nil when it has no match
// type (Istio's "present").
func StringMatcher(sm *networking.StringMatch) *matcherv3.StringMatcher {
	switch u := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: u.Exact}}
	case *networking.StringMatch_Prefix:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: u.Prefix}}
	case *networking.StringMatch_Regex:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: u.Regex}}}
	}
	return nil
}

// Fault translates an Istio fault into the fault filter's per-route
// config. An abort's grpcStatus names a gRPC code ("UNAVAILABLE") or
// number.
func Fault(f *networking.HTTPFaultInjection) *faultv3.HTTPFault {
	out := &faultv3.HTTPFault{}
	if d := f.GetDelay(); d != nil {
		out.Delay = &faultcommonv3.FaultDelay{
			FaultDelaySecifier: &faultcommonv3.FaultDelay_FixedDelay{FixedDelay: d.GetFixedDelay()},
			Percentage:         Percent(d.GetPercentage(), d.GetPercent()),
		}
	}
	if a := f.GetAbort(); a != nil {
		ab := &faultv3.FaultAbort{Percentage: Percent(a.GetPercentage(), 0)}
		switch e := a.GetErrorType().(type) {
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			ab.ErrorType = &faultv3.FaultAbort_GrpcStatus{GrpcStatus: grpcCode(e.GrpcStatus)}
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			ab.ErrorType = &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(e.HttpStatus)}
		}
		out.Abort = ab
	}
	return out
}

// grpcCode parses a gRPC code name ("UNAVAILABLE") or number.
func grpcCode(s string) uint32 {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(n)
	}
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(strconv.Quote(strings.ToUpper(s)))); err == nil {
		return uint32(c)
	}
	return uint32(codes.Unknown)
}

// Percent converts Istio's percentage (0-100, fractional; legacy is the
// deprecated integer field) to a fraction per million; unset means 100%.
func Percent(p *networking.Percent, legacy int32) *typev3.FractionalPercent {
	v := 100.0
	switch {
	case p != nil:
		v = p.GetValue()
	case legacy > 0:
		v = float64(legacy)
	}
	v = math.Max(0, math.Min(100, v))
	return &typev3.FractionalPercent{Numerator: uint32(math.Round(v * 10000)), Denominator: typev3.FractionalPercent_MILLION}
}

// HashPolicy returns the route hash policy of a consistent-hash
// DestinationRule for a port and subset: header, cookie, source IP or query
// parameter for Envoy; header, and per-channel hashing standing in for
// source-IP affinity, for grpc-go (which has no cookies or query
// parameters). nil when the rule does not hash.
func HashPolicy(dr *model.DestinationRule, port uint32, subset string, c Client) []*routev3.RouteAction_HashPolicy {
	ch := dr.TrafficPolicy(port, subset).GetLoadBalancer().GetConsistentHash()
	if ch == nil {
		return nil
	}
	var hp *routev3.RouteAction_HashPolicy
	switch k := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		hp = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
			Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: strings.ToLower(k.HttpHeaderName)},
		}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		if c == Proxyless {
			hp = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_FilterState_{
				FilterState: &routev3.RouteAction_HashPolicy_FilterState{Key: "io.grpc.channel_id"},
			}}
			break
		}
		hp = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{
			ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true},
		}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		if c == Proxyless {
			return nil
		}
		hp = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Cookie_{
			Cookie: &routev3.RouteAction_HashPolicy_Cookie{Name: k.HttpCookie.GetName(), Path: k.HttpCookie.GetPath(), Ttl: k.HttpCookie.GetTtl()},
		}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		if c == Proxyless {
			return nil
		}
		hp = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_QueryParameter_{
			QueryParameter: &routev3.RouteAction_HashPolicy_QueryParameter{Name: k.HttpQueryParameterName},
		}}
	default:
		return nil
	}
	return []*routev3.RouteAction_HashPolicy{hp}
}
