package model

import (
	"testing"

	"github.com/vmesh/vmesh/store"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// TestSameViewKeys checks Diff.SameViewKeys against the keys themselves:
// whenever a diff says every ViewKey stays, each workload's key is the
// same at both snapshots, and the changes that do move a workload to
// another group are Global.
func TestSameViewKeys(t *testing.T) {
	base := append(rebuildBase(),
		&store.Object{Key: store.Key{Kind: store.KindSidecar, Namespace: "ns-0", Name: "web"},
			Spec: &networking.Sidecar{WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"tier": "web"}},
				Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*"}}}}},
		&store.Object{Key: store.Key{Kind: store.KindPeerAuthentication, Namespace: "ns-0", Name: "strict"},
			Spec: &securityv1beta1.PeerAuthentication{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"tier": "web"}},
				Mtls: &securityv1beta1.PeerAuthentication_MutualTLS{Mode: securityv1beta1.PeerAuthentication_MutualTLS_STRICT}}},
		&store.Object{Key: store.Key{Kind: store.KindAuthorizationPolicy, Namespace: "ns-1", Name: "deny"},
			Spec: &securityv1beta1.AuthorizationPolicy{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"tier": "batch"}},
				Action: securityv1beta1.AuthorizationPolicy_DENY, Rules: []*securityv1beta1.Rule{{}}}},
		&store.Object{Key: store.Key{Kind: store.KindGateway, Namespace: "ns-0", Name: "edge"},
			Spec: &networking.Gateway{Selector: map[string]string{"tier": "web"}, Servers: []*networking.Server{
				{Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"}}}}},
		&store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "ns-0", Name: "edge"},
			Spec: &networking.VirtualService{Hosts: []string{"edge.example.com"}, Gateways: []string{"edge"},
				Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "edge.internal"}}}}}}},
	)
	var vs, dr, se *store.Object
	for _, o := range base {
		switch {
		case vs == nil && o.Kind == store.KindVirtualService && o.Name != "edge":
			vs = o
		case dr == nil && o.Kind == store.KindDestinationRule:
			dr = o
		case se == nil && o.Kind == store.KindServiceEntry:
			se = o
		}
	}
	var workloads []Workload
	for _, ns := range []string{"ns-0", "ns-1"} {
		for _, tier := range []string{"web", "batch", ""} {
			// The two kinds' Reads, as xds/sidecar and xds/grpc declare them.
			for _, k := range []struct {
				kind  ProxyKind
				reads Reads
			}{{KindSidecar, Reads{Workload: true, EgressPorts: true}}, {KindGRPC, Reads{Resolvable: true}}, {KindRouter, Reads{Gateways: true, Locality: true}}} {
				workloads = append(workloads, Workload{ID: ns + tier, Kind: k.kind, Reads: k.reads, Namespace: ns, Labels: map[string]string{"tier": tier, "app": "x"}, IPs: []string{"10.0.0.9"}})
			}
		}
	}
	cases := []struct {
		name string
		edit func([]*store.Object) []*store.Object
		// moves: some workload's key differs after the edit.
		moves bool
	}{
		{"VirtualService weights", editObject(vs.Kind, vs.Namespace, vs.Name, func(o *store.Object) {
			for _, r := range o.Spec.(*networking.VirtualService).GetHttp()[0].GetRoute() {
				r.Weight = 50
			}
		}), false},
		{"DestinationRule removed", editObject(dr.Kind, dr.Namespace, dr.Name, func(o *store.Object) { o.Spec = nil }), false},
		{"ServiceEntry port added", editObject(se.Kind, se.Namespace, se.Name, func(o *store.Object) {
			e := o.Spec.(*networking.ServiceEntry)
			e.Ports = append(e.Ports, &networking.ServicePort{Name: "http", Number: 8080, Protocol: "HTTP"})
		}), false},
		{"Sidecar selects batch too", editObject(store.KindSidecar, "ns-0", "web", func(o *store.Object) {
			o.Spec.(*networking.Sidecar).WorkloadSelector = nil
		}), true},
		{"PeerAuthentication selects batch", editObject(store.KindPeerAuthentication, "ns-0", "strict", func(o *store.Object) {
			o.Spec.(*securityv1beta1.PeerAuthentication).Selector.MatchLabels = map[string]string{"tier": "batch"}
		}), true},
		{"AuthorizationPolicy removed", editObject(store.KindAuthorizationPolicy, "ns-1", "deny", func(o *store.Object) { o.Spec = nil }), true},
		{"Gateway VirtualService route", editObject(store.KindVirtualService, "ns-0", "edge", func(o *store.Object) {
			o.Spec.(*networking.VirtualService).GetHttp()[0].GetRoute()[0].GetDestination().Host = "other.internal"
		}), false},
		{"Gateway servers", editObject(store.KindGateway, "ns-0", "edge", func(o *store.Object) {
			o.Spec.(*networking.Gateway).GetServers()[0].GetPort().Number = 8080
		}), false},
		{"Gateway selects batch", editObject(store.KindGateway, "ns-0", "edge", func(o *store.Object) {
			o.Spec.(*networking.Gateway).Selector = map[string]string{"tier": "batch"}
		}), true},
	}
	build := func(t *testing.T, objs []*store.Object) *Snapshot {
		t.Helper()
		st := store.NewStore()
		if err := st.Replace(store.Source{Name: "t", Class: store.ClassConfig}, objs); err != nil {
			t.Fatal(err)
		}
		return Build(st.Snapshot())
	}
	s0 := build(t, base)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s1 := build(t, tc.edit(base))
			d := Compare(s0, s1)
			if d.Empty() {
				t.Fatal("the edit changed nothing the generators read")
			}
			moved := false
			for _, w := range workloads {
				if ViewKey(s0, w) != ViewKey(s1, w) {
					moved = true
					if d.SameViewKeys() {
						t.Errorf("%s (%s): key %q -> %q, but SameViewKeys", w.ID, w.Kind, ViewKey(s0, w), ViewKey(s1, w))
					}
				}
			}
			if moved != tc.moves {
				t.Errorf("some key moved: %v, want %v", moved, tc.moves)
			}
			if d.SameViewKeys() == tc.moves {
				t.Errorf("SameViewKeys = %v for an edit that moves keys: %v", d.SameViewKeys(), tc.moves)
			}
		})
	}
	var none *Diff
	if none.SameViewKeys() {
		t.Error("no diff (no previous snapshot) says the keys stay")
	}
}

// A change of the tracing provider's service is Global: every HTTP
// connection manager of Envoy proxies names its cluster, not only those of
// its ports; another service's change is not.
func TestCompareTracingCollector(t *testing.T) {
	mesh := DefaultMesh()
	mesh.Tracing.DefaultProvider = "zipkin"
	mesh.ExtensionProviders = &ExtensionProviders{List: []*meshv1alpha1.MeshConfig_ExtensionProvider{{Name: "zipkin",
		Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_Zipkin{Zipkin: &meshv1alpha1.MeshConfig_ExtensionProvider_ZipkinTracingProvider{
			Service: "istio-system/zipkin.istio-system.svc.cluster.local", Port: 9411}}}}}
	se := func(ns, host string) *store.Object {
		return &store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: ns, Name: host},
			Spec: &networking.ServiceEntry{Hosts: []string{host}, Resolution: networking.ServiceEntry_STATIC,
				Ports: []*networking.ServicePort{{Name: "http", Number: 9411, Protocol: "HTTP"}}, Endpoints: []*networking.WorkloadEntry{{Address: "10.9.0.1"}}}}
	}
	build := func(objs ...*store.Object) *Snapshot {
		st := store.NewStore()
		if err := st.Replace(store.Source{Name: "t", Class: store.ClassConfig}, objs); err != nil {
			t.Fatal(err)
		}
		return BuildWith(st.Snapshot(), mesh)
	}
	base := se("shop", "reviews.shop.svc.cluster.local")
	s0 := build(base)
	if d := Compare(s0, build(base, se("istio-system", "zipkin.istio-system.svc.cluster.local"))); !d.Global {
		t.Errorf("tracing collector added: diff not Global: %+v", d)
	}
	if d := Compare(s0, build(base, se("shop", "ratings.shop.svc.cluster.local"))); d.Global {
		t.Errorf("another service added: diff Global")
	}
}
