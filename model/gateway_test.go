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
