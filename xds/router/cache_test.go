package router_test

import (
	"strings"
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/gen"
	"github.com/vmesh/vmesh/xds/router"
)

func snapshot(t *testing.T, yaml string) *model.Snapshot {
	t.Helper()
	objs, errs := filestore.Decode("config.yaml", []byte(yaml))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	return model.Build(st.Snapshot())
}

// sameResources fails t unless got and want hold the same resources (by
// name and serialised form) of every type.
func sameResources(t *testing.T, got, want *gen.Generation) {
	t.Helper()
	for _, typ := range gen.TypeURLs() {
		if got.Count(typ) != want.Count(typ) {
			t.Errorf("%s: %d resources, generated in full %d", gen.ShortType(typ), got.Count(typ), want.Count(typ))
		}
		for name, w := range want.Types[typ].All() {
			if g := got.Get(typ, name); g == nil || g.Hash != w.Hash {
				t.Errorf("%s %s differs from the full generation", gen.ShortType(typ), name)
			}
		}
	}
}

// TestPushKeepsClustersOnRouteChange: a push whose diff is a
// VirtualService change leaving the router's destinations alone keeps the
// previous generation's clusters and endpoints (the same maps, not
// generated again); a change of destinations or of a DestinationRule
// generates them again. Every push's result equals the full generation.
func TestPushKeepsClustersOnRouteChange(t *testing.T) {
	base := ingressYAML + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: extra, namespace: default}
spec:
  hosts: [extra.default.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.8}]
`
	routeChange := strings.Replace(base, "prefix: /delay}", "prefix: /delayed}", 1)
	newDestination := strings.Replace(base, "route: [{destination: {host: httpbin, port: {number: 8000}}}]", "route: [{destination: {host: extra}}]", 1)
	withDR := base + `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: httpbin, namespace: default}
spec:
  host: httpbin.default.svc.cluster.local
  trafficPolicy: {connectionPool: {tcp: {maxConnections: 7}}}
`
	otherEndpoints := strings.Replace(base, "endpoints: [{address: 10.0.0.8}]", "endpoints: [{address: 10.0.0.18}]", 1)
	for _, tc := range []struct {
		name, yaml       string
		keptCDS, keptEDS bool
	}{
		{"route change", routeChange, true, true},
		{"new destination", newDestination, false, false},
		{"destination rule", withDR, false, true},
		{"endpoints of a service not routed to", otherEndpoints, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := ingress()
			s1, s2 := snapshot(t, base), snapshot(t, tc.yaml)
			key := model.ViewKey(s1, w)
			c := router.Kind{}.NewCache(gen.Env{})
			old, err := c.Build(s1, w, key)
			if err != nil {
				t.Fatal(err)
			}
			md := model.Compare(s1, s2)
			if md.Empty() {
				t.Fatal("the snapshots do not differ")
			}
			g, _, err := c.Push(s2, md, []*gen.Generation{old})(old, key)
			if err != nil {
				t.Fatal(err)
			}
			full, err := router.Kind{}.Generate(s2, w, model.ViewKey(s2, w))
			if err != nil {
				t.Fatal(err)
			}
			sameResources(t, g, full)
			if kept := g.Types[resourcev3.ClusterType] == old.Types[resourcev3.ClusterType]; kept != tc.keptCDS {
				t.Errorf("CDS map kept from the previous generation: %v, want %v", kept, tc.keptCDS)
			}
			if kept := g.Types[resourcev3.EndpointType] == old.Types[resourcev3.EndpointType]; kept != tc.keptEDS {
				t.Errorf("EDS map kept from the previous generation: %v, want %v", kept, tc.keptEDS)
			}
			// A cluster no change touches is the previous generation's
			// resource, not generated again.
			for _, name := range []string{"outbound|443||my-nginx.default.svc.cluster.local", "BlackHoleCluster"} {
				if r := old.Get(resourcev3.ClusterType, name); r == nil || g.Get(resourcev3.ClusterType, name) != r {
					t.Errorf("cluster %s is not the previous generation's resource", name)
				}
			}
			httpbin := "outbound|8000||httpbin.default.svc.cluster.local"
			if kept := old.Get(resourcev3.ClusterType, httpbin) == g.Get(resourcev3.ClusterType, httpbin); kept != (tc.name != "destination rule") {
				t.Errorf("httpbin's cluster kept: %v", kept)
			}
			if routeChanged := old.Get(resourcev3.RouteType, "http.80").Hash != g.Get(resourcev3.RouteType, "http.80").Hash; routeChanged != (tc.name == "route change" || tc.name == "new destination") {
				t.Errorf("route configuration http.80 changed: %v", routeChanged)
			}
			if _, ok := g.Types[resourcev3.ClusterType].Get("outbound|80||extra.default.svc.cluster.local"); ok != (tc.name == "new destination") {
				t.Errorf("extra's cluster present: %v", ok)
			}
		})
	}
}
