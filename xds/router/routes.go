package router

import (
	"fmt"
	"slices"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/sidecar"
	"github.com/vmesh/vmesh/xds/translate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// maxDirectResponseBody is the largest directResponse body a route
// configuration carries: 1 MiB, as Istio (and the sidecar) set it.
const maxDirectResponseBody = 1 << 20

// Routes returns the router's route configurations, as Istio's gateways
// have them: one per plaintext HTTP port ("http.<port>", the virtual
// hosts of every HTTP server of the port) and one per terminated HTTPS
// server ("https.<port>.<port name>.<gateway>.<namespace>"), by name.
func Routes(v *model.View) ([]*routev3.RouteConfiguration, error) {
	byName := map[string][]server{}
	var names []string
	for _, s := range servers(v) {
		n := s.routeName()
		if n == "" {
			continue
		}
		if _, ok := byName[n]; !ok {
			names = append(names, n)
		}
		byName[n] = append(byName[n], s)
	}
	slices.Sort(names)
	out := make([]*routev3.RouteConfiguration, 0, len(names))
	for _, n := range names {
		rc, err := RouteConfig(v, n, byName[n])
		if err != nil {
			return nil, fmt.Errorf("proxy %s: route %s: %w", v.Workload().ID, n, err)
		}
		out = append(out, rc)
	}
	return out, nil
}

// RouteConfig builds the route configuration name of servers (the servers
// sharing it), as Istio's buildGatewayHTTPRouteConfig: per server, the
// VirtualServices bound to its Gateway that the router sees, each host
// both the server and the VirtualService name a virtual host "host:port"
// with the VirtualService's routes for the Gateway (a host several
// VirtualServices name takes all their routes, in order, catch-alls
// last); a server with httpsRedirect requires TLS on its hosts; no virtual
// host at all gives the "blackhole:<port>" host, which answers 404.
func RouteConfig(v *model.View, name string, svs []server) (*routev3.RouteConfiguration, error) {
	vhosts := map[string]*routev3.VirtualHost{}
	origins := map[string]string{} // host -> the VirtualServices its routes came from, in order
	for _, s := range svs {
		port := s.port()
		redirect := s.spec.GetTls().GetHttpsRedirect()
		for _, vs := range v.VirtualServicesForGateway(s.gw) {
			hosts := intersect(s.hostsFor(vs.Namespace), vs.Hosts)
			if len(hosts) == 0 {
				continue
			}
			for _, h := range hosts {
				routes, err := sidecar.GatewayRoutes(v, vs, h, port, s.gw.Key(), s.spec.GetTls() != nil)
				if err != nil {
					return nil, fmt.Errorf("VirtualService %s/%s: %w", vs.Namespace, vs.Name, err)
				}
				vh := vhosts[h]
				if vh == nil {
					vh = &routev3.VirtualHost{Name: h + ":" + itoa(port), Domains: []string{h}, IncludeRequestAttemptCount: true}
					vhosts[h] = vh
				}
				vh.Routes = append(vh.Routes, routes...)
				origins[h] += vs.Namespace + "/" + vs.Name + " "
				if redirect {
					vh.RequireTls = routev3.VirtualHost_ALL
				}
			}
		}
		if redirect {
			for _, h := range s.hostsFor(s.gw.Namespace) {
				if vhosts[h] == nil {
					vhosts[h] = &routev3.VirtualHost{Name: h + ":" + itoa(port), Domains: []string{h}, IncludeRequestAttemptCount: true, RequireTls: routev3.VirtualHost_ALL}
				}
			}
		}
	}
	rc := &routev3.RouteConfiguration{
		Name:                           name,
		ValidateClusters:               wrapperspb.Bool(false),
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(maxDirectResponseBody),
		IgnorePortInHostMatching:       true,
	}
	if len(vhosts) == 0 {
		rc.VirtualHosts = []*routev3.VirtualHost{{Name: "blackhole:" + itoa(svs[0].port()), Domains: []string{"*"}}}
		return rc, nil
	}
	for _, vh := range vhosts {
		vh.Routes = catchAllsLast(vh.Routes)
	}
	rc.VirtualHosts = collapse(vhosts, origins)
	slices.SortFunc(rc.VirtualHosts, func(a, b *routev3.VirtualHost) int { return strings.Compare(a.GetName(), b.GetName()) })
	return rc, nil
}

// catchAllsLast moves the routes that select every request after the
// others, keeping each group's order (Istio's SortVHostRoutes).
func catchAllsLast(routes []*routev3.Route) []*routev3.Route {
	var rest, all []*routev3.Route
	for _, r := range routes {
		if translate.CatchAll(r.GetMatch()) {
			all = append(all, r)
		} else {
			rest = append(rest, r)
		}
	}
	return append(rest, all...)
}

// collapse merges the virtual hosts whose routes are the same, as Istio's
// collapseDuplicateRoutes (PILOT_ENABLE_ROUTE_COLLAPSE_OPTIMIZATION, on by
// default): in host order, a host whose routes came from the same
// VirtualServices as an earlier kept one's, and are equal, with the same
// TLS requirement, adds its domains to that one (named after the first
// host) instead of being a virtual host of its own. Requests route alike
// either way; the route configuration stays small when a VirtualService
// names many hosts.
func collapse(vhosts map[string]*routev3.VirtualHost, origins map[string]string) []*routev3.VirtualHost {
	hosts := make([]string, 0, len(vhosts))
	for h := range vhosts {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	var out []*routev3.VirtualHost
	kept := map[string][]*routev3.VirtualHost{} // origins -> kept virtual hosts
	for _, h := range hosts {
		vh := vhosts[h]
		i := slices.IndexFunc(kept[origins[h]], func(k *routev3.VirtualHost) bool {
			return k.GetRequireTls() == vh.GetRequireTls() && k.GetIncludeRequestAttemptCount() == vh.GetIncludeRequestAttemptCount() &&
				slices.EqualFunc(k.GetRoutes(), vh.GetRoutes(), func(a, b *routev3.Route) bool { return proto.Equal(a, b) })
		})
		if i >= 0 {
			k := kept[origins[h]][i]
			k.Domains = append(k.Domains, vh.GetDomains()...)
			continue
		}
		kept[origins[h]] = append(kept[origins[h]], vh)
		out = append(out, vh)
	}
	return out
}
