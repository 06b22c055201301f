package xds_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	networking "istio.io/api/networking/v1alpha3"
)

// TestProxylessRoutesFollowSourceMatches: a proxyless client gets only the
// HTTP routes whose matches select it, by Istio's rules (its route
// builder's sourceMatchHTTP, which Istio's gRPC generator shares with
// sidecars): sourceLabels must all be the client's, sourceNamespace its
// namespace, and a match naming gateways applies when "mesh" is one of them
// whatever its sourceLabels say. A client's routes end at the first that
// takes every request of its (Istio's IsCatchAllRoute). The same holds for
// an Envoy sidecar.
func TestProxylessRoutesFollowSourceMatches(t *testing.T) {
	st := store.NewStore()
	prefix := func(p string) *networking.StringMatch {
		return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: p}}
	}
	dest := func(subset string) []*networking.HTTPRouteDestination {
		return []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "shop.internal", Subset: subset}}}
	}
	objs := []*store.Object{
		o(store.KindServiceEntry, "shop", &networking.ServiceEntry{
			Hosts: []string{"shop.internal"}, Resolution: networking.ServiceEntry_STATIC, Location: networking.ServiceEntry_MESH_INTERNAL,
			Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "shop"}},
		}),
		o(store.KindWorkloadEntry, "shop-1", &networking.WorkloadEntry{Address: "10.0.0.1", Labels: map[string]string{"app": "shop", "version": "v1"}}),
		o(store.KindDestinationRule, "shop", &networking.DestinationRule{Host: "shop.internal", Subsets: []*networking.Subset{
			{Name: "v1", Labels: map[string]string{"version": "v1"}}, {Name: "v2", Labels: map[string]string{"version": "v2"}},
		}}),
		o(store.KindVirtualService, "shop", &networking.VirtualService{Hosts: []string{"shop.internal"}, Http: []*networking.HTTPRoute{
			{Name: "canary", Match: []*networking.HTTPMatchRequest{{SourceLabels: map[string]string{"track": "canary"}, Uri: prefix("/c")}}, Route: dest("v2")},
			{Name: "from-ops", Match: []*networking.HTTPMatchRequest{{SourceNamespace: "ops", Uri: prefix("/o")}}, Route: dest("v2")},
			{Name: "mesh-wins", Match: []*networking.HTTPMatchRequest{{Gateways: []string{"mesh"}, SourceLabels: map[string]string{"track": "none"}, Uri: prefix("/m")}}, Route: dest("v1")},
			{Name: "gateway-only", Match: []*networking.HTTPMatchRequest{{Gateways: []string{"edge"}}}, Route: dest("v1")},
			{Name: "two", Match: []*networking.HTTPMatchRequest{
				{Name: "canary", SourceLabels: map[string]string{"track": "canary"}, Uri: prefix("/a")},
				{Name: "any", Uri: prefix("/b")},
			}, Route: dest("v1")},
			// For stable clients this match takes every request: their routes end here.
			{Name: "stable-all", Match: []*networking.HTTPMatchRequest{{SourceLabels: map[string]string{"track": "stable"}}}, Route: dest("v1")},
			{Name: "rest", Route: dest("")},
			{Name: "unreachable", Route: dest("v2")},
		}}),
	}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	s := model.Build(st.Snapshot())
	routeNames := func(p *xds.Proxy) []string {
		t.Helper()
		rds, err := xds.Routes(s, p)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, rc := range rds {
			for _, vh := range rc.GetVirtualHosts() {
				if vh.GetName() != "shop.internal:7070" {
					continue
				}
				for _, r := range vh.GetRoutes() {
					names = append(names, r.GetName())
				}
			}
		}
		return names
	}
	for _, c := range []struct {
		name string
		p    *xds.Proxy
		want []string
	}{
		{"canary in default", &xds.Proxy{ID: "a", Kind: xds.KindGRPC, Namespace: "default", Labels: map[string]string{"track": "canary"}},
			[]string{"canary", "mesh-wins", "two.canary", "two.any", "rest"}},
		{"stable in default", &xds.Proxy{ID: "b", Kind: xds.KindGRPC, Namespace: "default", Labels: map[string]string{"track": "stable"}},
			[]string{"mesh-wins", "two.any", "stable-all"}},
		{"unlabelled in ops", &xds.Proxy{ID: "c", Kind: xds.KindGRPC, Namespace: "ops"},
			[]string{"from-ops", "mesh-wins", "two.any", "rest"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, routeNames(c.p)); diff != "" {
				t.Errorf("proxyless routes (-want +got):\n%s", diff)
			}
			if c.p.Namespace != "default" {
				return // the sidecar's virtual host of another namespace is named alike; one namespace is enough
			}
			sc := *c.p
			sc.Kind, sc.IPs = xds.KindSidecar, []string{"10.1.0.9"}
			if diff := cmp.Diff(c.want, routeNames(&sc)); diff != "" {
				t.Errorf("sidecar routes (-want +got):\n%s", diff)
			}
		})
	}
	canary := &xds.Proxy{ID: "a", Kind: xds.KindGRPC, Namespace: "default", Labels: map[string]string{"track": "canary", "app": "x"}}
	stable := &xds.Proxy{ID: "b", Kind: xds.KindGRPC, Namespace: "default", Labels: map[string]string{"track": "stable", "app": "x"}}
	stableOtherApp := &xds.Proxy{ID: "d", Kind: xds.KindGRPC, Namespace: "default", Labels: map[string]string{"track": "stable", "app": "y"}}
	if xds.GroupKey(s, canary) == xds.GroupKey(s, stable) {
		t.Error("proxyless clients that get different routes share a group")
	}
	if xds.GroupKey(s, stable) != xds.GroupKey(s, stableOtherApp) {
		t.Error("a label no sourceLabels names split proxyless clients into groups")
	}
}
