package xds_test

import (
	"context"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
)

// A root VirtualService delegates one route to a VirtualService of another
// namespace: grpc-go follows the merged routes (the root's header match,
// the delegate's destination).
func TestDelegateVirtualServiceRoutes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := store.NewStore()
	const host = "echo.default.svc.cluster.local"
	se := &store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "default", Name: "echo"}, Spec: &networking.ServiceEntry{
		Hosts: []string{host}, Resolution: networking.ServiceEntry_STATIC,
		Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "echo"}},
	}}
	if err := st.Replace(testSource, []*store.Object{se}); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, ctx, st)
	objs := []*store.Object{se,
		{Key: store.Key{Kind: store.KindDestinationRule, Namespace: "default", Name: "echo"}, Spec: &networking.DestinationRule{
			Host: host, Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}, {Name: "v2", Labels: map[string]string{"version": "v2"}}},
		}},
		{Key: store.Key{Kind: store.KindVirtualService, Namespace: "default", Name: "root"}, Spec: &networking.VirtualService{
			Hosts: []string{host},
			Http: []*networking.HTTPRoute{
				{Match: []*networking.HTTPMatchRequest{{Headers: map[string]*networking.StringMatch{"x-team": {MatchType: &networking.StringMatch_Exact{Exact: "a"}}}}}, Delegate: &networking.Delegate{Name: "echo-routes", Namespace: "team"}},
				{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: host, Subset: "v1"}}}},
			},
		}},
		{Key: store.Key{Kind: store.KindVirtualService, Namespace: "team", Name: "echo-routes"}, Spec: &networking.VirtualService{
			Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: host, Subset: "v2"}}}}},
		}},
	}
	for _, v := range []string{"v1", "v2"} {
		b := xdstest.StartBackend(t, m.addr, xdstest.Node{ID: "echo-" + v, Namespace: "default", Labels: map[string]string{"app": "echo", "version": v}})
		objs = append(objs, &store.Object{Key: store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: "echo-" + v},
			Spec: &networking.WorkloadEntry{Address: "127.0.0.1", Ports: map[string]uint32{"grpc": uint32(b.Port)}, Labels: map[string]string{"app": "echo", "version": v}}})
	}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	client := xdstest.Dial(t, m.addr, xdstest.Node{ID: "client", Namespace: "default"}, host+":7070")
	if got := xdstest.CallUntil(t, client, 20*time.Second); got != "echo-v1" {
		t.Fatalf("without the header: %q, want echo-v1", got)
	}
	xdstest.Eventually(t, "x-team: a routed by the delegate to v2", func() bool {
		id, _ := call(client, "x-team", "a")
		return id == "echo-v2"
	})
	for range 20 {
		if id, code := call(client, "x-team", "a"); id != "echo-v2" {
			t.Fatalf("x-team: a reached %q (%v), want echo-v2", id, code)
		}
		if id, code := call(client); id != "echo-v1" {
			t.Fatalf("no header reached %q (%v), want echo-v1", id, code)
		}
	}
}
