package model

import (
	"slices"
	"testing"

	"github.com/vmesh/vmesh/store"
	networking "istio.io/api/networking/v1alpha3"
)

func TestResolveGatewayName(t *testing.T) {
	for _, tc := range []struct{ name, ns, want string }{
		{"gw", "shop", "shop/gw"},
		{"edge/gw", "shop", "edge/gw"},
		{"./gw", "shop", "shop/gw"},
		{"gw.edge.svc.cluster.local", "shop", "edge/gw"},
		{"gw.edge", "shop", "edge/gw"},
		{"mesh", "shop", "mesh"},
	} {
		if got := ResolveGatewayName(tc.name, tc.ns); got != tc.want {
			t.Errorf("ResolveGatewayName(%q, %q) = %q, want %q", tc.name, tc.ns, got, tc.want)
		}
	}
}

// TestGatewayBinding: the Gateways that select a router are its labels'
// (any namespace; no selector selects every router), and the
// VirtualServices bound to one are those naming it in any form, visible
// to the router's namespace, in Istio's order; one bound to the mesh only
// is no gateway's, one bound to both is both's.
func TestGatewayBinding(t *testing.T) {
	gw := func(ns, name string, sel map[string]string) *store.Object {
		return &store.Object{Key: store.Key{Kind: store.KindGateway, Namespace: ns, Name: name}, Spec: &networking.Gateway{Selector: sel}}
	}
	vs := func(ns, name string, gws, exportTo []string) *store.Object {
		return &store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: ns, Name: name},
			Spec: &networking.VirtualService{Hosts: []string{name + ".example.com"}, Gateways: gws, ExportTo: exportTo}}
	}
	objs := []*store.Object{
		gw("edge", "ingress", map[string]string{"istio": "ingressgateway"}),
		gw("shop", "all", nil),
		gw("shop", "egress", map[string]string{"istio": "egressgateway"}),
		vs("shop", "short", []string{"all"}, nil),
		vs("edge", "private", []string{"ingress"}, []string{"."}),
		vs("shop", "private-elsewhere", []string{"edge/ingress"}, []string{"."}),
		vs("shop", "exported", []string{"ingress.edge.svc.cluster.local"}, []string{"edge"}),
		vs("edge", "own", []string{"./ingress", "mesh"}, nil),
		vs("shop", "public", []string{"edge/ingress"}, nil),
		vs("shop", "mesh-only", []string{"mesh"}, nil),
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "t", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	s := Build(st.Snapshot())
	w := Workload{Kind: KindRouter, Reads: Reads{Gateways: true}, Namespace: "edge", Labels: map[string]string{"istio": "ingressgateway"}}
	v := NewView(s, w)
	var keys []string
	for _, g := range v.Gateways() {
		keys = append(keys, g.Key())
	}
	if want := []string{"edge/ingress", "shop/all"}; !slices.Equal(keys, want) {
		t.Fatalf("gateways %v, want %v", keys, want)
	}
	names := func(vss []*VirtualService) []string {
		var out []string
		for _, vs := range vss {
			out = append(out, vs.Namespace+"/"+vs.Name)
		}
		return out
	}
	if got, want := names(v.VirtualServicesForGateway(v.Gateways()[0])), []string{"edge/private", "shop/exported", "edge/own", "shop/public"}; !slices.Equal(got, want) {
		t.Errorf("ingress routes %v, want %v", got, want)
	}
	if got, want := names(v.VirtualServicesForGateway(v.Gateways()[1])), []string{"shop/short"}; !slices.Equal(got, want) {
		t.Errorf("all routes %v, want %v", got, want)
	}
	if got := names(s.VirtualServices); !slices.Contains(got, "edge/own") || !slices.Contains(got, "shop/mesh-only") || slices.Contains(got, "shop/public") {
		t.Errorf("mesh VirtualServices %v", got)
	}
	// A sidecar reads no Gateways.
	if gws := NewView(s, Workload{Kind: KindSidecar, Namespace: "edge", Labels: w.Labels}).Gateways(); gws != nil {
		t.Errorf("a sidecar's View has gateways %v", gws)
	}
}

// TestDestinationRuleThirdNamespace: a proxy takes a DestinationRule from
// its own namespace, the service's or the root namespace, never from a
// third one (Istio's lookup): the egress tasks' rule in default applies to
// default's sidecars, not to the egress gateway in istio-system.
func TestDestinationRuleThirdNamespace(t *testing.T) {
	dr := func(ns, name string) *store.Object {
		return &store.Object{Key: store.Key{Kind: store.KindDestinationRule, Namespace: ns, Name: name},
			Spec: &networking.DestinationRule{Host: "egress.istio-system.svc.cluster.local"}}
	}
	se := &store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "istio-system", Name: "egress"},
		Spec: &networking.ServiceEntry{Hosts: []string{"egress.istio-system.svc.cluster.local"}, Resolution: networking.ServiceEntry_STATIC,
			Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}}}
	build := func(objs ...*store.Object) *Snapshot {
		objs = append(objs, se)
		st := store.NewStore()
		if err := st.Replace(store.Source{Name: "t", Class: store.ClassConfig}, objs); err != nil {
			t.Fatal(err)
		}
		return Build(st.Snapshot())
	}
	s := build(dr("default", "for-sidecars"))
	const host = "egress.istio-system.svc.cluster.local"
	if got := s.DestinationRuleFor(host, "default", "istio-system"); got == nil || got.Name != "for-sidecars" {
		t.Errorf("default's own rule: %v", got)
	}
	if got := s.DestinationRuleFor(host, "istio-system", "istio-system"); got != nil {
		t.Errorf("a rule of default applies to istio-system: %s/%s", got.Namespace, got.Name)
	}
	if got := s.DestinationRuleFor(host, "shop", "other"); got != nil {
		t.Errorf("a rule of default applies to shop: %s/%s", got.Namespace, got.Name)
	}
	s = build(dr("default", "for-sidecars"), dr(DefaultRootNamespace, "mesh-wide"))
	if got := s.DestinationRuleFor(host, "shop", "other"); got == nil || got.Name != "mesh-wide" {
		t.Errorf("the root namespace's rule: %v", got)
	}
}
