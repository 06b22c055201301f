package model_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/store"
)

func prefix(p string) *networking.StringMatch {
	return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: p}}
}

// A root VirtualService's delegating routes are replaced by the delegate's
// routes merged as Istio merges them (pilot/pkg/model/virtualservice.go):
// matches narrowed by the root's, unset fields from the root route,
// destination hosts qualified in the delegate's namespace; a missing or
// unexported delegate drops the route with a problem.
func TestDelegateVirtualServicesMerged(t *testing.T) {
	se := obj(store.KindServiceEntry, "default", "reviews", &networking.ServiceEntry{
		Hosts: []string{"reviews.default.svc.cluster.local"}, Ports: []*networking.ServicePort{{Number: 9080, Name: "http", Protocol: "HTTP"}}, Resolution: networking.ServiceEntry_STATIC,
	})
	root := obj(store.KindVirtualService, "default", "root", &networking.VirtualService{
		Hosts: []string{"reviews"},
		Http: []*networking.HTTPRoute{
			{Name: "api", Match: []*networking.HTTPMatchRequest{{Uri: prefix("/api")}}, Timeout: durationpb.New(7e9), Delegate: &networking.Delegate{Name: "routes", Namespace: "team"}},
			{Name: "gone", Delegate: &networking.Delegate{Name: "missing"}},
			{Name: "private", Delegate: &networking.Delegate{Name: "private", Namespace: "team"}},
			{Name: "rest", Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews"}}}},
		},
	})
	delegate := obj(store.KindVirtualService, "team", "routes", &networking.VirtualService{
		Http: []*networking.HTTPRoute{
			{Name: "v2", Match: []*networking.HTTPMatchRequest{{Uri: prefix("/api/v2")}}, Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews-v2"}}}},
			{Name: "outside", Match: []*networking.HTTPMatchRequest{{Uri: prefix("/other")}}, Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews-v2"}}}},
			{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews.default.svc.cluster.local"}}}, Timeout: durationpb.New(1e9)},
		},
	})
	private := obj(store.KindVirtualService, "team", "private", &networking.VirtualService{
		ExportTo: []string{"."},
		Http:     []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews"}}}}},
	})
	s := build(t, se, root, delegate, private)
	vs := s.VirtualServiceFor("reviews.default.svc.cluster.local", "default")
	if vs == nil {
		t.Fatal("the root VirtualService is not bound to its host")
	}
	var names []string
	for _, r := range vs.Spec.GetHttp() {
		names = append(names, r.GetName())
	}
	if got := strings.Join(names, ","); got != "api-v2,api,rest" {
		t.Fatalf("merged routes %s, want api-v2,api,rest:\n%s", got, prototext.Format(vs.Spec))
	}
	v2, catchAll := vs.Spec.GetHttp()[0], vs.Spec.GetHttp()[1]
	if v2.GetMatch()[0].GetUri().GetPrefix() != "/api/v2" || v2.GetRoute()[0].GetDestination().GetHost() != "reviews-v2.team.svc.cluster.local" || v2.GetTimeout().AsDuration() != 7e9 {
		t.Errorf("merged v2 route = %v", v2)
	}
	if catchAll.GetMatch()[0].GetUri().GetPrefix() != "/api" || catchAll.GetTimeout().AsDuration() != 1e9 || catchAll.GetDelegate() != nil {
		t.Errorf("merged catch-all route = %v (the root's match, the delegate's own timeout)", catchAll)
	}
	// The store's objects are untouched.
	if root.Spec.(*networking.VirtualService).GetHttp()[0].GetDelegate() == nil || delegate.Spec.(*networking.VirtualService).GetHttp()[0].GetName() != "v2" {
		t.Error("merging changed the Store's objects")
	}
	var problems []string
	for _, p := range s.Problems {
		problems = append(problems, p.Object+": "+p.Message)
	}
	all := strings.Join(problems, "\n")
	for _, want := range []string{"http[1].delegate: VirtualService default/missing not found", "http[2].delegate: VirtualService team/private is not exported to namespace default", "route 1 of team/routes matches nothing the root route matches"} {
		if !strings.Contains(all, want) {
			t.Errorf("problems lack %q:\n%s", want, all)
		}
	}
	// A delegate is bound to no host of its own.
	for _, v := range s.VirtualServices {
		if v.Name == "routes" || v.Name == "private" {
			t.Errorf("delegate %s/%s is a VirtualService of its own", v.Namespace, v.Name)
		}
	}
}

// Sidecar egress "~ns/host" hides what it matches even where another entry
// imports it, as in Istio; "~/host" does so in every namespace.
func TestSidecarEgressExclusion(t *testing.T) {
	se := func(ns, host string) *store.Object {
		return obj(store.KindServiceEntry, ns, host, &networking.ServiceEntry{
			Hosts: []string{host}, Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}, Resolution: networking.ServiceEntry_STATIC,
		})
	}
	s := build(t, se("ns1", "a.ns1.svc.cluster.local"), se("ns2", "b.ns2.svc.cluster.local"), se("ns2", "c.ns2.svc.cluster.local"),
		obj(store.KindSidecar, "bar", "default", &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"*/*", "~ns1/*", "~/c.ns2.svc.cluster.local"}}}}))
	var got []string
	for _, svc := range s.VisibleServices("bar", s.SidecarFor("bar", nil)) {
		got = append(got, svc.Hostname)
	}
	if strings.Join(got, ",") != "b.ns2.svc.cluster.local" {
		t.Errorf("visible with */*, ~ns1/* and ~/c: %v, want only b.ns2", got)
	}
}

// An inline endpoint with only a network is left out, never an endpoint
// with an empty address (Envoy would reject the whole assignment).
func TestEndpointWithoutAddressLeftOut(t *testing.T) {
	s := build(t, obj(store.KindServiceEntry, "default", "remote", &networking.ServiceEntry{
		Hosts: []string{"remote.default.svc.cluster.local"}, Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
		Resolution: networking.ServiceEntry_STATIC,
		Endpoints:  []*networking.WorkloadEntry{{Address: "10.0.0.1"}, {Network: "net2", Ports: map[string]uint32{"http": 8080}}},
	}))
	svc := s.ServicesForHost("remote.default.svc.cluster.local")
	if len(svc) != 1 || len(svc[0].Endpoints) != 1 || svc[0].Endpoints[0].Address != "10.0.0.1" {
		t.Fatalf("endpoints = %+v", svc)
	}
}
