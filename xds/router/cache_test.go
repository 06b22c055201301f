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
	for _, tc := range []struct {
		name, yaml string
		kept       bool
	}{
		{"route change", routeChange, true},
		{"new destination", newDestination, false},
		{"destination rule", withDR, false},
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
			for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType} {
				if kept := g.Types[typ] == old.Types[typ]; kept != tc.kept {
					t.Errorf("%s kept from the previous generation: %v, want %v", gen.ShortType(typ), kept, tc.kept)
				}
			}
			if tc.kept {
				if r, ok := old.Types[resourcev3.ClusterType].Get("outbound|8000||httpbin.default.svc.cluster.local"); !ok || g.Get(resourcev3.ClusterType, r.Name) != r {
					t.Error("httpbin's cluster is not the previous generation's resource")
				}
			}
			if routeChanged := old.Get(resourcev3.RouteType, "http.80").Hash != g.Get(resourcev3.RouteType, "http.80").Hash; routeChanged != (tc.name != "destination rule") {
				t.Errorf("route configuration http.80 changed: %v", routeChanged)
			}
			if _, ok := g.Types[resourcev3.ClusterType].Get("outbound|80||extra.default.svc.cluster.local"); ok != (tc.name == "new destination") {
				t.Errorf("extra's cluster present: %v", ok)
			}
		})
	}
}
