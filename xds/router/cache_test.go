package router_test

import (
	"slices"
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

// TestPushKeepsClustersWithAutoPassthrough: a router with an
// AUTO_PASSTHROUGH server (SNI-DNAT clusters of every mesh-internal
// service it sees) keeps its clusters and endpoints across a push as the
// others do: a VirtualService change keeps both maps; a change of a
// service's endpoints re-makes that service's SNI-DNAT endpoints only; a
// new service adds its SNI-DNAT cluster and keeps the others; a
// DestinationRule re-makes the clusters of its host. Every push's result
// equals the full generation.
func TestPushKeepsClustersWithAutoPassthrough(t *testing.T) {
	// httpbin (routed to) and extra are mesh-internal: they have SNI-DNAT
	// clusters.
	base := strings.Replace(ingressYAML, "hosts: [httpbin.default.svc.cluster.local]\n", "hosts: [httpbin.default.svc.cluster.local]\n  location: MESH_INTERNAL\n", 1) + `---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    hosts: ["*.local"]
    tls: {mode: AUTO_PASSTHROUGH}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: extra, namespace: default}
spec:
  hosts: [extra.default.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.8, serviceAccount: extra}]
`
	routeChange := strings.Replace(base, "prefix: /delay}", "prefix: /delayed}", 1)
	otherEndpoints := strings.Replace(base, "endpoints: [{address: 10.0.0.8, serviceAccount: extra}]", "endpoints: [{address: 10.0.0.18, serviceAccount: extra}]", 1)
	newService := base + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: fresh, namespace: default}
spec:
  hosts: [fresh.default.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 9090, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.9, serviceAccount: fresh}]
`
	withDR := base + `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: httpbin, namespace: default}
spec:
  host: httpbin.default.svc.cluster.local
  trafficPolicy: {connectionPool: {tcp: {maxConnections: 7}}}
`
	const (
		httpbin     = "outbound|8000||httpbin.default.svc.cluster.local"
		httpbinDNAT = "outbound_.8000_._.httpbin.default.svc.cluster.local"
		extraDNAT   = "outbound_.80_._.extra.default.svc.cluster.local"
		freshDNAT   = "outbound_.9090_._.fresh.default.svc.cluster.local"
	)
	for _, tc := range []struct {
		name, yaml       string
		keptCDS, keptEDS bool
		// remade are the clusters (CDS and, when EDS, EDS) generated
		// again; every other one is the previous generation's.
		remade []string
	}{
		{"route change", routeChange, true, true, nil},
		{"endpoints of a service not routed to", otherEndpoints, true, false, []string{extraDNAT}},
		{"new service", newService, false, false, []string{freshDNAT}},
		{"destination rule", withDR, false, true, []string{httpbin, httpbinDNAT}},
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
			for _, name := range []string{httpbinDNAT, extraDNAT} {
				if old.Get(resourcev3.ClusterType, name) == nil {
					t.Fatalf("no SNI-DNAT cluster %s in the full generation", name)
				}
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
			// Outside remade, every resource is the previous generation's
			// (the same resource, not generated again); each of remade
			// is new or generated again in CDS or EDS.
			remade := map[string]bool{}
			for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType} {
				for name, r := range g.Types[typ].All() {
					prev := old.Get(typ, name)
					switch {
					case slices.Contains(tc.remade, name):
						if prev != r {
							remade[name] = true
						}
					case prev != r:
						t.Errorf("%s %s generated again, want the previous generation's", gen.ShortType(typ), name)
					}
				}
			}
			for _, name := range tc.remade {
				if !remade[name] {
					t.Errorf("%s not generated again", name)
				}
			}
		})
	}
}
