package sidecar_test

import (
	"fmt"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// TestUpdateRouteIsRoutes checks that a route configuration brought
// forward by UpdateRoute is the one Routes generates, when the hosts a
// change touches claim domains other hosts claim too: services that share
// an address and one namespace's short names, so that which host keeps a
// domain depends on the hosts before it.
func TestUpdateRouteIsRoutes(t *testing.T) {
	const port = 9191
	hosts := []string{"a.shop.svc.cluster.local", "b.other.internal", "c.other.internal", "d.shop.svc.cluster.local"}
	services := func() []*store.Object {
		var out []*store.Object
		for i, h := range hosts {
			addr := "240.240.9.1" // a, b and c share it
			if i == 3 {
				addr = "240.240.9.4"
			}
			out = append(out, object(store.KindServiceEntry, "shop", fmt.Sprintf("se-%d", i), &networking.ServiceEntry{
				Hosts: []string{h}, Addresses: []string{addr}, Resolution: networking.ServiceEntry_STATIC,
				Ports:     []*networking.ServicePort{{Number: port, Name: "http", Protocol: "HTTP"}},
				Endpoints: []*networking.WorkloadEntry{{Address: fmt.Sprintf("10.9.0.%d", i+1)}},
			}))
		}
		return out
	}
	// routes gives each host in timeouts a VirtualService with that timeout.
	routes := func(timeouts map[string]int) []*store.Object {
		var out []*store.Object
		for h, s := range timeouts {
			out = append(out, object(store.KindVirtualService, "shop", "vs-"+h[:1], &networking.VirtualService{
				Hosts: []string{h},
				Http:  []*networking.HTTPRoute{{Timeout: durationpb.New(time.Duration(s) * time.Second), Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: h}}}}},
			}))
		}
		return out
	}
	view := func(timeouts map[string]int) *model.View {
		s := loadEdited(t, featuresDir, nil, append(services(), routes(timeouts)...)...)
		return model.NewView(s, productpage())
	}
	routeOf := func(t *testing.T, v *model.View) *routev3.RouteConfiguration {
		t.Helper()
		rcs, err := sidecar.NewOutbound(v).Routes(map[uint32]bool{port: true})
		if err != nil || len(rcs) != 1 {
			t.Fatalf("Routes: %v, %d configurations", err, len(rcs))
		}
		return rcs[0]
	}
	before := map[string]int{hosts[0]: 1, hosts[1]: 1, hosts[2]: 1}
	old := routeOf(t, view(before))
	if n := len(old.GetVirtualHosts()); n != len(hosts)+1 {
		t.Fatalf("old configuration has %d virtual hosts, want %d", n, len(hosts)+1)
	}
	for _, dirty := range [][]string{{hosts[0]}, {hosts[1]}, {hosts[2]}, {hosts[3]}, {hosts[1], hosts[2]}, hosts} {
		t.Run(fmt.Sprint(dirty), func(t *testing.T) {
			after := map[string]int{}
			for h, s := range before {
				after[h] = s
			}
			touched := map[string]bool{}
			for _, h := range dirty {
				after[h] = 7
				touched[h] = true
			}
			v := view(after)
			got, err := sidecar.NewOutbound(v).UpdateRoute(old, touched)
			if err != nil {
				t.Fatal(err)
			}
			want := routeOf(t, v)
			if !proto.Equal(got, want) {
				t.Errorf("UpdateRoute:\n%v\nRoutes:\n%v", got, want)
			}
			if proto.Equal(got, old) {
				t.Error("the change altered nothing: the test would not see a wrong update")
			}
		})
	}
}
