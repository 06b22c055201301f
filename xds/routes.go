package xds

import (
	"fmt"
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
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// defaultRetryOn is Istio's default retry_on; gRPC clients act on the gRPC
// status names in it (unavailable, cancelled).
const defaultRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"

// Routes returns the route configurations for a proxy.
func Routes(s *model.Snapshot, p *Proxy) ([]*routev3.RouteConfiguration, error) {
	switch p.Kind {
	case KindGRPC:
		return grpcRoutes(s, p)
	case KindSidecar:
		return nil, ErrSidecarUnsupported
	}
	return nil, fmt.Errorf("proxy %s: unknown kind %q", p.ID, p.Kind)
}

// grpcRoutes returns one route configuration per client listener, with one
// virtual host for the service port: the VirtualService's HTTP routes when
// one is bound to the host, else a default route to the service.
func grpcRoutes(s *model.Snapshot, p *Proxy) ([]*routev3.RouteConfiguration, error) {
	sc := s.SidecarFor(p.Namespace, p.Labels)
	var out []*routev3.RouteConfiguration
	for _, svc := range visibleServices(s, p) {
		vs := s.VirtualServiceFor(svc.Hostname, p.Namespace)
		for _, port := range svc.Ports {
			name := ListenerName(svc.Hostname, port.Number)
			var routes []*routev3.Route
			if vs != nil {
				var err error
				if routes, err = httpRoutes(s, p, sc, svc, port, vs); err != nil {
					return nil, fmt.Errorf("route %s from VirtualService %s/%s: %w", name, vs.Namespace, vs.Name, err)
				}
			}
			if vs == nil || len(routes) == 0 {
				routes = []*routev3.Route{defaultRoute(s, p, svc, port)}
			}
			out = append(out, &routev3.RouteConfiguration{
				Name: name,
				VirtualHosts: []*routev3.VirtualHost{{
					Name:    name,
					Domains: []string{svc.Hostname, name},
					Routes:  routes,
				}},
			})
		}
	}
	return out, nil
}

func defaultRoute(s *model.Snapshot, p *Proxy, svc *model.Service, port model.Port) *routev3.Route {
	action := &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: ClusterName(port.Number, "", svc.Hostname)}}
	action.HashPolicy = hashPolicy(s.DestinationRuleFor(svc.Hostname, p.Namespace, svc.Namespace), port.Number, "")
	return &routev3.Route{
		Name:   "default",
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: action},
	}
}

// httpRoutes translates a VirtualService's HTTP routes for one service port.
// Each match of a route becomes one Envoy route (Istio's expansion); a match
// naming another port is skipped. Destinations the proxy cannot reach (an
// unknown host or subset) are dropped; a route left without destinations is
// dropped too. Redirects, direct responses and delegation have no gRPC
// equivalent and are skipped.
func httpRoutes(s *model.Snapshot, p *Proxy, sc *model.Sidecar, svc *model.Service, port model.Port, vs *model.VirtualService) ([]*routev3.Route, error) {
	var out []*routev3.Route
	for i, hr := range vs.Spec.GetHttp() {
		if len(hr.GetRoute()) == 0 {
			continue
		}
		action, err := routeAction(s, p, sc, svc, port, vs, hr)
		if err != nil {
			return nil, fmt.Errorf("http[%d]: %w", i, err)
		}
		if action == nil {
			continue
		}
		var filterCfg map[string]*anypb.Any
		if f := hr.GetFault(); f != nil {
			fa, err := anypb.New(faultConfig(f))
			if err != nil {
				return nil, fmt.Errorf("http[%d].fault: %w", i, err)
			}
			filterCfg = map[string]*anypb.Any{faultFilterName: fa}
		}
		matches := hr.GetMatch()
		if len(matches) == 0 {
			matches = []*networking.HTTPMatchRequest{nil}
		}
		for j, m := range matches {
			if m.GetPort() != 0 && m.GetPort() != port.Number {
				continue
			}
			rm, err := routeMatch(m)
			if err != nil {
				return nil, fmt.Errorf("http[%d].match[%d]: %w", i, j, err)
			}
			name := hr.GetName()
			if name == "" {
				name = strconv.Itoa(i)
			}
			if m.GetName() != "" {
				name += "." + m.GetName()
			}
			out = append(out, &routev3.Route{
				Name:                 name,
				Match:                rm,
				Action:               &routev3.Route_Route{Route: action},
				TypedPerFilterConfig: filterCfg,
			})
		}
	}
	return out, nil
}

func routeAction(s *model.Snapshot, p *Proxy, sc *model.Sidecar, svc *model.Service, port model.Port, vs *model.VirtualService, hr *networking.HTTPRoute) (*routev3.RouteAction, error) {
	type dest struct {
		cluster string
		weight  uint32
	}
	var dests []dest
	var firstDR *model.DestinationRule
	var firstPort uint32
	var firstSubset string
	for _, d := range hr.GetRoute() {
		host := d.GetDestination().GetHost()
		if !strings.Contains(host, ".") {
			host = host + "." + vs.Namespace + "." + model.DefaultDomainSuffix
		}
		target := s.ServiceFor(host, p.Namespace, sc)
		if target == nil || !servable(target) {
			continue
		}
		dport := d.GetDestination().GetPort().GetNumber()
		if dport == 0 {
			switch {
			case target.Hostname == svc.Hostname:
				dport = port.Number
			case len(target.Ports) == 1:
				dport = target.Ports[0].Number
			default:
				dport = port.Number
			}
		}
		if _, ok := target.Port(dport); !ok {
			continue
		}
		subset := d.GetDestination().GetSubset()
		dr := s.DestinationRuleFor(target.Hostname, p.Namespace, target.Namespace)
		if subset != "" && dr.Subset(subset) == nil {
			continue
		}
		w := uint32(max(d.GetWeight(), 0))
		if len(hr.GetRoute()) == 1 {
			w = 100
		}
		if w == 0 {
			continue
		}
		if len(dests) == 0 {
			firstDR, firstPort, firstSubset = dr, dport, subset
		}
		dests = append(dests, dest{cluster: ClusterName(dport, subset, target.Hostname), weight: w})
	}
	if len(dests) == 0 {
		return nil, nil
	}
	a := &routev3.RouteAction{}
	if len(dests) == 1 {
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: dests[0].cluster}
	} else {
		wc := &routev3.WeightedCluster{}
		for _, d := range dests {
			wc.Clusters = append(wc.Clusters, &routev3.WeightedCluster_ClusterWeight{Name: d.cluster, Weight: wrapperspb.UInt32(d.weight)})
		}
		a.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	a.HashPolicy = hashPolicy(firstDR, firstPort, firstSubset)
	if t := hr.GetTimeout(); t != nil {
		a.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: t}
	}
	if r := hr.GetRetries(); r != nil && r.GetAttempts() > 0 {
		retryOn := r.GetRetryOn()
		if retryOn == "" {
			retryOn = defaultRetryOn
		}
		rp := &routev3.RetryPolicy{
			RetryOn:       retryOn,
			NumRetries:    wrapperspb.UInt32(uint32(r.GetAttempts())),
			PerTryTimeout: r.GetPerTryTimeout(),
		}
		if b := r.GetBackoff(); b != nil && b.AsDuration() > 0 {
			rp.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: b}
		}
		a.RetryPolicy = rp
	}
	return a, nil
}

// routeMatch translates one Istio match; nil matches every request.
func routeMatch(m *networking.HTTPMatchRequest) (*routev3.RouteMatch, error) {
	rm := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if m == nil {
		return rm, nil
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
		if s := stringMatcher(sm); s != nil {
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
	for _, name := range sortedKeys(m.GetHeaders()) {
		add(strings.ToLower(name), m.GetHeaders()[name], false)
	}
	for _, name := range sortedKeys(m.GetWithoutHeaders()) {
		add(strings.ToLower(name), m.GetWithoutHeaders()[name], true)
	}
	return rm, nil
}

// stringMatcher translates an Istio string match; nil when it has no match
// type (Istio's "header present").
func stringMatcher(sm *networking.StringMatch) *matcherv3.StringMatcher {
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// faultConfig translates an Istio fault into the per-route override of the
// fault filter. An abort's grpcStatus names a gRPC code ("UNAVAILABLE").
func faultConfig(f *networking.HTTPFaultInjection) *faultv3.HTTPFault {
	out := &faultv3.HTTPFault{}
	if d := f.GetDelay(); d != nil {
		out.Delay = &faultcommonv3.FaultDelay{
			FaultDelaySecifier: &faultcommonv3.FaultDelay_FixedDelay{FixedDelay: d.GetFixedDelay()},
			Percentage:         percent(d.GetPercentage(), d.GetPercent()),
		}
	}
	if a := f.GetAbort(); a != nil {
		ab := &faultv3.FaultAbort{Percentage: percent(a.GetPercentage(), 0)}
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

// percent converts Istio's percentage (0-100, fractional) to a fraction per
// million; unset means 100%.
func percent(p *networking.Percent, legacy int32) *typev3.FractionalPercent {
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

// hashPolicy returns the route hash policy for a consistent-hash destination
// rule. gRPC supports header hashing and, standing in for source-IP
// affinity, per-channel hashing; cookies and query parameters have no gRPC
// equivalent.
func hashPolicy(dr *model.DestinationRule, port uint32, subset string) []*routev3.RouteAction_HashPolicy {
	ch := dr.TrafficPolicy(port, subset).GetLoadBalancer().GetConsistentHash()
	if ch == nil {
		return nil
	}
	switch k := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		return []*routev3.RouteAction_HashPolicy{{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
			Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: strings.ToLower(k.HttpHeaderName)},
		}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		return []*routev3.RouteAction_HashPolicy{{PolicySpecifier: &routev3.RouteAction_HashPolicy_FilterState_{
			FilterState: &routev3.RouteAction_HashPolicy_FilterState{Key: "io.grpc.channel_id"},
		}}}
	}
	return nil
}
