package grpc

import (
	"cmp"
	"fmt"
	"strconv"

	"github.com/vmesh/vmesh/xds/translate"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Routes returns one route configuration per client listener, with one
// virtual host for the service port: the VirtualService's HTTP routes when
// one is bound to the host, else a default route to the service.
func Routes(v *model.View) ([]*routev3.RouteConfiguration, error) {
	return RoutesOf(v, v.Services())
}

// RoutesOf returns the route configurations of the given services.
func RoutesOf(v *model.View, svcs []*model.Service) ([]*routev3.RouteConfiguration, error) {
	var out []*routev3.RouteConfiguration
	for _, svc := range svcs {
		vs := v.VirtualServiceFor(svc.Hostname)
		for _, port := range svc.Ports {
			name := ListenerName(svc.Hostname, port.Number)
			var routes []*routev3.Route
			if vs != nil {
				var err error
				if routes, err = httpRoutes(v, svc, port, vs); err != nil {
					return nil, fmt.Errorf("route %s from VirtualService %s/%s: %w", name, vs.Namespace, vs.Name, err)
				}
			}
			if vs == nil || len(routes) == 0 {
				routes = []*routev3.Route{defaultRoute(v, svc, port)}
			}
			out = append(out, &routev3.RouteConfiguration{
				Name: name,
				VirtualHosts: []*routev3.VirtualHost{{
					Name:    name,
					Domains: domains(svc.Hostname, port.Number, v.Workload().Namespace),
					Routes:  routes,
				}},
			})
		}
	}
	return out, nil
}

// domains are the names a client dials the service port by: the host and
// host:port, and for a client in the service's own namespace the short
// forms Istio accepts (shortForms) with and without the port.
func domains(host string, port uint32, ns string) []string {
	out := []string{host, ListenerName(host, port)}
	for _, s := range shortForms(host, ns) {
		out = append(out, s, ListenerName(s, port))
	}
	return out
}

func defaultRoute(v *model.View, svc *model.Service, port model.Port) *routev3.Route {
	action := &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: model.ClusterName(port.Number, "", svc.Hostname)}}
	action.HashPolicy = translate.HashPolicy(v.DestinationRule(svc), port.Number, "", translate.Proxyless)
	action.RetryPolicy = translate.RetryPolicy(v.Mesh().DefaultHTTPRetry, false) // as Istio's default route, even when hashing
	return &routev3.Route{
		Name:   "default",
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: action},
	}
}

// httpRoutes translates a VirtualService's HTTP routes for one service port.
// Each match of a route becomes one Envoy route (Istio's expansion); a match
// naming another port, or whose sourceLabels, sourceNamespace or gateways
// leave this client out (translate.SourceMatches), is skipped. The routes
// end at the first that selects every request (a route without matches,
// or a match translate.CatchAll calls so), as Istio's do. Destinations the proxy has no cluster
// for are kept (routeAction). Redirects and direct responses have no gRPC equivalent and
// are skipped, and so are matches on query parameters (grpc-go ignores such a
// route); delegating routes arrive merged (model/delegate.go).
func httpRoutes(v *model.View, svc *model.Service, port model.Port, vs *model.VirtualService) ([]*routev3.Route, error) {
	var out []*routev3.Route
	w := v.Workload()
	for i, hr := range vs.Spec.GetHttp() {
		last := len(hr.GetMatch()) == 0 // a route without matches takes every request
		var matches []*networking.HTTPMatchRequest
		for _, m := range hr.GetMatch() {
			// A match on query parameters is left out: grpc-go ignores a
			// route with query parameter matchers (gRPC has no query), so
			// dropping only the matcher would widen the route.
			if len(m.GetQueryParams()) > 0 {
				continue
			}
			if (m.GetPort() == 0 || m.GetPort() == port.Number) && translate.SourceMatches(m, w.Labels, w.Namespace) {
				matches = append(matches, m)
			}
		}
		if last {
			matches = []*networking.HTTPMatchRequest{nil}
		}
		var action *routev3.RouteAction
		if len(hr.GetRoute()) > 0 && len(matches) > 0 {
			var err error
			if action, err = routeAction(v, svc, port, vs, hr); err != nil {
				return nil, fmt.Errorf("http[%d]: %w", i, err)
			}
		}
		if action == nil {
			if last {
				break
			}
			continue
		}
		var filterCfg map[string]*anypb.Any
		if f := hr.GetFault(); f != nil {
			filterCfg = map[string]*anypb.Any{faultFilterName: translate.MustAny(translate.Fault(f))}
		}
		for _, m := range matches {
			name := hr.GetName()
			if name == "" {
				name = strconv.Itoa(i)
			}
			if m.GetName() != "" {
				name += "." + m.GetName()
			}
			r := &routev3.Route{
				Name:                 name,
				Match:                translate.RouteMatch(m, translate.Proxyless),
				Action:               &routev3.Route_Route{Route: action},
				TypedPerFilterConfig: filterCfg,
			}
			out = append(out, r)
			if translate.CatchAll(r.Match) {
				return out, nil // nothing after it is reached (Istio leaves the rest out)
			}
		}
		if last {
			break
		}
	}
	return out, nil
}

// routeAction builds the action of an HTTP route: one cluster, or weighted
// clusters with the route's weights (a destination of weight 0 beside
// others is left out, as Istio does). A destination the proxy has no
// cluster for keeps its place and weight under Istio's name for its cluster
// (model.View.RouteCluster), which CDS does not have: grpc-go finds the
// cluster does not exist and fails the RPCs picked for it (UNAVAILABLE), as
// under Istio. The hash policy is that of the first destination the proxy
// has a cluster for.
func routeAction(v *model.View, svc *model.Service, port model.Port, vs *model.VirtualService, hr *networking.HTTPRoute) (*routev3.RouteAction, error) {
	type dest struct {
		cluster string
		weight  uint32
	}
	var dests []dest
	var first *model.Cluster
	for _, d := range hr.GetRoute() {
		w, ok := translate.DestinationWeight(d.GetWeight(), len(hr.GetRoute()))
		if !ok {
			continue
		}
		name, c, ok := v.RouteCluster(svc.Hostname, port.Number, vs, d.GetDestination())
		if ok && first == nil {
			first = &c
		}
		dests = append(dests, dest{cluster: name, weight: w})
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
	if first != nil {
		a.HashPolicy = translate.HashPolicy(first.DestinationRule, first.Port.Number, first.Subset, translate.Proxyless)
	}
	if t := hr.GetTimeout(); t != nil {
		a.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: t}
	}
	a.RetryPolicy = translate.RetryPolicy(cmp.Or(hr.GetRetries(), v.Mesh().DefaultHTTPRetry), a.HashPolicy != nil)
	return a, nil
}
