package xds_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"github.com/vmesh/vmesh/xds/router"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// routerObjects is an ingress router's config: httpbin, a Gateway
// selecting istio=ingressgateway with an HTTP server (route configuration
// http.80) and a SIMPLE HTTPS server (https.443.https.edge.istio-system),
// a VirtualService for each host; timeout sets the HTTP one's timeout.
func routerObjects(timeout time.Duration) []*store.Object {
	obj := func(kind store.Kind, ns, name string, spec any) *store.Object {
		o := &store.Object{Key: store.Key{Kind: kind, Namespace: ns, Name: name}}
		switch s := spec.(type) {
		case *networking.ServiceEntry:
			o.Spec = s
		case *networking.Gateway:
			o.Spec = s
		case *networking.VirtualService:
			o.Spec = s
		}
		return o
	}
	route := func(host string) []*networking.HTTPRoute {
		return []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: host}}}}}
	}
	plain := route("httpbin.default.svc.cluster.local")
	if timeout > 0 {
		plain[0].Timeout = durationpb.New(timeout)
	}
	return []*store.Object{
		obj(store.KindServiceEntry, "default", "httpbin", &networking.ServiceEntry{
			Hosts: []string{"httpbin.default.svc.cluster.local"}, Location: networking.ServiceEntry_MESH_INTERNAL, Resolution: networking.ServiceEntry_STATIC,
			Ports:     []*networking.ServicePort{{Number: 8000, Name: "http", Protocol: "HTTP"}},
			Endpoints: []*networking.WorkloadEntry{{Address: "10.0.1.20"}},
		}),
		obj(store.KindGateway, "istio-system", "edge", &networking.Gateway{Selector: map[string]string{"istio": "ingressgateway"}, Servers: []*networking.Server{
			{Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*/plain.example.com"}},
			{Port: &networking.Port{Number: 443, Name: "https", Protocol: "HTTPS"}, Hosts: []string{"secure.example.com"},
				Tls: &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialName: "secure-cred"}},
		}}),
		obj(store.KindVirtualService, "default", "plain", &networking.VirtualService{Hosts: []string{"plain.example.com"}, Gateways: []string{"istio-system/edge"}, Http: plain}),
		obj(store.KindVirtualService, "default", "secure", &networking.VirtualService{Hosts: []string{"secure.example.com"}, Gateways: []string{"edge.istio-system.svc.cluster.local"},
			Http: route("httpbin.default.svc.cluster.local")}),
	}
}

// routerNode is an Istio ingress gateway's node: router~IP~id~ns id, its
// labels, no GENERATOR.
func routerNode(t *testing.T) *corev3.Node {
	t.Helper()
	md, err := structpb.NewStruct(map[string]any{"LABELS": map[string]any{"istio": "ingressgateway", "app": "istio-ingressgateway"}, "INSTANCE_IPS": "10.0.5.1"})
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Node{Id: "router~10.0.5.1~ingress-1.istio-system~istio-system.svc.cluster.local", Metadata: md}
}

// TestRouterDelivery: a raw ADS client as a router node (both protocols)
// gets the router's generated LDS, RDS, CDS and EDS and ACKs them; over
// delta, a VirtualService change reaches it within the debounce and a
// second, and only the route configuration it changes is re-sent (no
// listener, cluster or other route configuration in between).
func TestRouterDelivery(t *testing.T) {
	for _, protocol := range []string{"sotw", "delta"} {
		t.Run(protocol, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cs := store.NewStore()
			if err := cs.Replace(testSource, routerObjects(0)); err != nil {
				t.Fatal(err)
			}
			m := startMesh(t, ctx, cs)
			node := routerNode(t)
			p, err := xds.ProxyFromNode(node)
			if err != nil || p.Kind != xds.KindRouter || p.Namespace != "istio-system" {
				t.Fatalf("node: %+v, %v", p, err)
			}
			var c adsClient
			var dc *deltaClient
			if protocol == "sotw" {
				c = newSotwADS(t, ctx, m.addr, node)
			} else {
				dc = newDeltaADS(t, ctx, m.addr, node)
				c = dc
			}
			held := receiveLikeEnvoy(t, c)
			got := decode(t, held)
			v := model.NewView(model.Build(cs.Snapshot()), p.Workload())
			want := &sidecar.Resources{Missing: v.MissingCluster}
			if want.Listeners, err = router.Listeners(v); err != nil {
				t.Fatal(err)
			}
			if want.Routes, err = router.Routes(v); err != nil {
				t.Fatal(err)
			}
			if want.Clusters, err = router.Clusters(v); err != nil {
				t.Fatal(err)
			}
			if want.Endpoints, err = router.Endpoints(v); err != nil {
				t.Fatal(err)
			}
			got.Missing = want.Missing
			if err := got.Consistent(); err != nil {
				t.Errorf("delivered config: %v", err)
			}
			if diff := cmp.Diff(byName(want), got, protocmp.Transform(), cmpopts.IgnoreFields(sidecar.Resources{}, "Missing")); diff != "" {
				t.Errorf("delivered config differs from the generated one (-generated +delivered):\n%s", diff)
			}
			if len(got.Listeners) != 2 || len(got.Routes) != 2 || len(got.Clusters) != 2 || len(got.Endpoints) != 1 {
				t.Fatalf("want 2 listeners, 2 route configurations, 2 clusters, 1 load assignment; got %d, %d, %d, %d",
					len(got.Listeners), len(got.Routes), len(got.Clusters), len(got.Endpoints))
			}
			eventually(t, "LDS, RDS, CDS and EDS ACKed", func() bool { return routerAcked(m.syncz(), p.ID, protocol) })
			if dc == nil {
				return
			}

			// A change of the plain VirtualService: only http.80 comes; then
			// one of the secure one: only its route configuration. Responses
			// arrive in order, so anything else re-sent for the first change
			// would come before the second's.
			var seq []string
			var plainRC *routev3.RouteConfiguration
			start := time.Now()
			if err := cs.Replace(testSource, routerObjects(3*time.Second)); err != nil {
				t.Fatal(err)
			}
			for plainRC == nil {
				r := dc.next()
				for _, res := range r.GetResources() {
					seq = append(seq, shortTypeName(r.GetTypeUrl())+" "+res.GetName())
					if res.GetName() == "http.80" {
						plainRC = &routev3.RouteConfiguration{}
						if err := res.GetResource().UnmarshalTo(plainRC); err != nil {
							t.Fatal(err)
						}
					}
				}
				for _, n := range r.GetRemovedResources() {
					seq = append(seq, "removed "+n)
				}
			}
			if took, limit := time.Since(start), 200*time.Millisecond+time.Second; took > limit {
				t.Errorf("the VirtualService change took %v to arrive, want at most the debounce and 1 s (%v)", took, limit)
			}
			if d := plainRC.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetTimeout().AsDuration(); d != 3*time.Second {
				t.Errorf("http.80 after the change: timeout %v, want 3s", d)
			}
			objs := routerObjects(3 * time.Second)
			objs[3].Spec.(*networking.VirtualService).GetHttp()[0].Timeout = durationpb.New(time.Second)
			if err := cs.Replace(testSource, objs); err != nil {
				t.Fatal(err)
			}
			for !slices.Contains(seq, "RDS https.443.https.edge.istio-system") {
				r := dc.next()
				for _, res := range r.GetResources() {
					seq = append(seq, shortTypeName(r.GetTypeUrl())+" "+res.GetName())
				}
				for _, n := range r.GetRemovedResources() {
					seq = append(seq, "removed "+n)
				}
			}
			if want := []string{"RDS http.80", "RDS https.443.https.edge.istio-system"}; !slices.Equal(seq, want) {
				t.Errorf("re-sent %v, want only the changed route configurations %v", seq, want)
			}
		})
	}
}

func shortTypeName(typeURL string) string {
	switch typeURL {
	case resourcev3.ListenerType:
		return "LDS"
	case resourcev3.RouteType:
		return "RDS"
	case resourcev3.ClusterType:
		return "CDS"
	case resourcev3.EndpointType:
		return "EDS"
	}
	return typeURL
}

// routerAcked reports whether the router id's stream of protocol has
// ACKed what it was sent of all four types.
func routerAcked(st []xds.SyncStatus, id, protocol string) bool {
	for _, s := range st {
		if s.ID != id || s.Protocol != protocol || s.Kind != xds.KindRouter {
			continue
		}
		for _, typ := range []string{"LDS", "RDS", "CDS", "EDS"} {
			ts := s.Types[typ]
			if ts == nil || ts.Sent == "" || ts.Acked != ts.Sent || ts.Nack != "" {
				return false
			}
		}
		return true
	}
	return false
}
