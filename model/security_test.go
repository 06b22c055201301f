package model_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

func secObj(kind store.Kind, ns, name string, spec proto.Message) *store.Object {
	return &store.Object{Key: store.Key{Kind: kind, Namespace: ns, Name: name}, Spec: spec}
}

func pa(ns, name string, sel map[string]string, mode security.PeerAuthentication_MutualTLS_Mode, ports map[uint32]security.PeerAuthentication_MutualTLS_Mode) *store.Object {
	spec := &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: mode}}
	if sel != nil {
		spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
	}
	if ports != nil {
		spec.PortLevelMtls = map[uint32]*security.PeerAuthentication_MutualTLS{}
		for p, m := range ports {
			spec.PortLevelMtls[p] = &security.PeerAuthentication_MutualTLS{Mode: m}
		}
	}
	return secObj(store.KindPeerAuthentication, ns, name, spec)
}

func TestPeerAuthenticationModeLevels(t *testing.T) {
	const (
		unset      = security.PeerAuthentication_MutualTLS_UNSET
		disable    = security.PeerAuthentication_MutualTLS_DISABLE
		permissive = security.PeerAuthentication_MutualTLS_PERMISSIVE
		strict     = security.PeerAuthentication_MutualTLS_STRICT
	)
	cart := map[string]string{"app": "cart"}
	tests := []struct {
		name   string
		objs   []*store.Object
		labels map[string]string
		port   uint32
		want   model.MTLSMode
	}{
		{name: "no policy is permissive", want: model.MTLSPermissive},
		{name: "mesh strict", objs: []*store.Object{pa("istio-system", "default", nil, strict, nil)}, want: model.MTLSStrict},
		{name: "mesh policy with selector is not mesh-wide", objs: []*store.Object{pa("istio-system", "sel", cart, strict, nil)}, labels: cart, want: model.MTLSPermissive},
		{name: "namespace overrides mesh", objs: []*store.Object{
			pa("istio-system", "default", nil, strict, nil), pa("shop", "default", nil, disable, nil)}, want: model.MTLSDisable},
		{name: "other namespace does not apply", objs: []*store.Object{pa("other", "default", nil, strict, nil)}, want: model.MTLSPermissive},
		{name: "workload overrides namespace", objs: []*store.Object{
			pa("shop", "default", nil, strict, nil), pa("shop", "cart", cart, permissive, nil)}, labels: cart, want: model.MTLSPermissive},
		{name: "workload selector not matching", objs: []*store.Object{
			pa("shop", "default", nil, strict, nil), pa("shop", "cart", cart, disable, nil)}, labels: map[string]string{"app": "web"}, want: model.MTLSStrict},
		{name: "unset workload inherits namespace", objs: []*store.Object{
			pa("shop", "default", nil, strict, nil), pa("shop", "cart", cart, unset, nil)}, labels: cart, want: model.MTLSStrict},
		{name: "unset namespace inherits mesh", objs: []*store.Object{
			pa("istio-system", "default", nil, disable, nil), pa("shop", "default", nil, unset, nil)}, want: model.MTLSDisable},
		{name: "port level overrides", objs: []*store.Object{
			pa("shop", "cart", cart, strict, map[uint32]security.PeerAuthentication_MutualTLS_Mode{8080: disable})}, labels: cart, port: 8080, want: model.MTLSDisable},
		{name: "port level other port", objs: []*store.Object{
			pa("shop", "cart", cart, strict, map[uint32]security.PeerAuthentication_MutualTLS_Mode{8080: disable})}, labels: cart, port: 7070, want: model.MTLSStrict},
		{name: "port level unset inherits workload", objs: []*store.Object{
			pa("shop", "cart", cart, strict, map[uint32]security.PeerAuthentication_MutualTLS_Mode{8080: unset})}, labels: cart, port: 8080, want: model.MTLSStrict},
		{name: "first workload policy by name wins", objs: []*store.Object{
			pa("shop", "b", cart, disable, nil), pa("shop", "a", cart, strict, nil)}, labels: cart, want: model.MTLSStrict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := build(t, tc.objs...)
			if got := s.PeerAuthenticationMode("shop", tc.labels, tc.port); got != tc.want {
				t.Fatalf("mode %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPeerAuthenticationCustomRootNamespace(t *testing.T) {
	st := store.NewStore()
	objs := []*store.Object{pa("mesh-root", "default", nil, security.PeerAuthentication_MutualTLS_STRICT, nil)}
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	if got := model.Build(st.Snapshot()).PeerAuthenticationMode("shop", nil, 1); got != model.MTLSPermissive {
		t.Fatalf("default root: %s", got)
	}
	s := model.BuildWith(st.Snapshot(), model.Mesh{RootNamespace: "mesh-root"})
	if got := s.PeerAuthenticationMode("shop", nil, 1); got != model.MTLSStrict {
		t.Fatalf("root mesh-root: %s", got)
	}
	if s.Mesh.TrustDomain != "cluster.local" {
		t.Fatalf("trust domain default: %q", s.Mesh.TrustDomain)
	}
}

func ap(ns, name string, sel map[string]string, action security.AuthorizationPolicy_Action, rules ...*security.Rule) *store.Object {
	spec := &security.AuthorizationPolicy{Action: action, Rules: rules}
	if sel != nil {
		spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
	}
	return secObj(store.KindAuthorizationPolicy, ns, name, spec)
}

func TestAuthorizationPoliciesForAndPolicyKey(t *testing.T) {
	cart := map[string]string{"app": "cart"}
	s := build(t,
		ap("istio-system", "mesh-all", nil, security.AuthorizationPolicy_DENY),
		ap("istio-system", "mesh-cart", cart, security.AuthorizationPolicy_ALLOW),
		ap("shop", "ns-all", nil, security.AuthorizationPolicy_ALLOW),
		ap("shop", "cart-only", cart, security.AuthorizationPolicy_DENY),
		ap("other", "elsewhere", nil, security.AuthorizationPolicy_DENY),
		pa("shop", "cart-pa", cart, security.PeerAuthentication_MutualTLS_STRICT, nil),
	)
	keys := func(l []*model.AuthorizationPolicy) []string {
		var out []string
		for _, p := range l {
			out = append(out, p.Key())
		}
		return out
	}
	if d := cmp.Diff([]string{"istio-system/mesh-all", "istio-system/mesh-cart", "shop/cart-only", "shop/ns-all"}, keys(s.AuthorizationPoliciesFor("shop", cart))); d != "" {
		t.Errorf("cart policies (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"istio-system/mesh-all", "shop/ns-all"}, keys(s.AuthorizationPoliciesFor("shop", map[string]string{"app": "web"}))); d != "" {
		t.Errorf("web policies (-want +got):\n%s", d)
	}
	if got, want := s.WorkloadPolicyKey("shop", cart), "ap:istio-system/mesh-cart,ap:shop/cart-only,pa:shop/cart-pa"; got != want {
		t.Errorf("cart key %q, want %q", got, want)
	}
	if got := s.WorkloadPolicyKey("shop", map[string]string{"app": "web", "v": "1"}); got != "" {
		t.Errorf("web key %q, want empty", got)
	}
	if got := s.WorkloadPolicyKey("other", cart); got != "ap:istio-system/mesh-cart" {
		t.Errorf("cart in other namespace: %q", got)
	}
}

func TestAuthorizationPolicyProblems(t *testing.T) {
	jwt := &security.Rule{From: []*security.Rule_From{{Source: &security.Source{RequestPrincipals: []string{"*"}}}}}
	exp := &security.Rule{When: []*security.Condition{{Key: "experimental.envoy.filters.a.b[c]", Values: []string{"x"}}}}
	s := build(t,
		ap("shop", "jwt-allow", nil, security.AuthorizationPolicy_ALLOW, jwt),
		ap("shop", "exp-allow", nil, security.AuthorizationPolicy_ALLOW, exp),
		ap("shop", "exp-deny", nil, security.AuthorizationPolicy_DENY, exp),
		pa("shop", "ports-no-selector", nil, security.PeerAuthentication_MutualTLS_STRICT, map[uint32]security.PeerAuthentication_MutualTLS_Mode{80: 1}),
	)
	var msgs []string
	for _, p := range s.Problems {
		msgs = append(msgs, p.Object+": "+p.Message)
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		"AuthorizationPolicy/shop/exp-allow: rules[0]: when experimental.envoy.filters.a.b[c] not supported: the rule is dropped",
		"AuthorizationPolicy/shop/exp-deny: rules[0]: when experimental.envoy.filters.a.b[c] not supported: those fields are ignored",
		"portLevelMtls ignored",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("problems lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "jwt-allow") {
		t.Errorf("requestPrincipals are enforced by Envoy sidecars (the proxyless generator fails closed on its own), yet a problem:\n%s", all)
	}
	if len(s.AuthorizationPolicies) != 3 {
		t.Errorf("policies with problems are still kept: %d", len(s.AuthorizationPolicies))
	}
}

func TestUpstreamTLS(t *testing.T) {
	se := func(loc networking.ServiceEntry_Location, sans ...string) *store.Object {
		return secObj(store.KindServiceEntry, "shop", "cart", &networking.ServiceEntry{
			Hosts: []string{"cart.shop"}, Location: loc, Resolution: networking.ServiceEntry_STATIC,
			Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC", TargetPort: 9090}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "cart"}},
			SubjectAltNames:  sans,
		})
	}
	we := func(name, addr, sa, version string) *store.Object {
		return secObj(store.KindWorkloadEntry, "shop", name, &networking.WorkloadEntry{
			Address: addr, ServiceAccount: sa, Labels: map[string]string{"app": "cart", "version": version}})
	}
	dr := func(tp *networking.TrafficPolicy, subsets ...*networking.Subset) *store.Object {
		return secObj(store.KindDestinationRule, "shop", "cart", &networking.DestinationRule{Host: "cart.shop", TrafficPolicy: tp, Subsets: subsets})
	}
	tlsPolicy := func(m networking.ClientTLSSettings_TLSmode, sans ...string) *networking.TrafficPolicy {
		return &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: m, SubjectAltNames: sans}}
	}
	strictShop := pa("shop", "default", nil, security.PeerAuthentication_MutualTLS_STRICT, nil)
	idA, idB := "spiffe://cluster.local/ns/shop/sa/cart-a", "spiffe://cluster.local/ns/shop/sa/cart-b"
	v2 := &networking.Subset{Name: "v2", Labels: map[string]string{"version": "v2"}}
	tests := []struct {
		name   string
		objs   []*store.Object
		auto   model.AutoMTLS
		subset string
		want   model.UpstreamTLS
	}{
		{name: "auto mTLS toward service accounts", objs: []*store.Object{se(networking.ServiceEntry_MESH_INTERNAL), we("a", "10.0.0.1", "cart-a", "v1"), we("b", "10.0.0.2", "cart-b", "v2")},
			want: model.UpstreamTLS{Mode: model.TLSIstioMutual, Auto: true, SubjectAltNames: []string{idA, idB}}},
		{name: "no auto mTLS when one endpoint has no service account", objs: []*store.Object{se(networking.ServiceEntry_MESH_INTERNAL), we("a", "10.0.0.1", "cart-a", "v1"), we("b", "10.0.0.2", "", "v2")},
			want: model.UpstreamTLS{}},
		{name: "subset endpoints decide", objs: []*store.Object{se(networking.ServiceEntry_MESH_INTERNAL), we("a", "10.0.0.1", "", "v1"), we("b", "10.0.0.2", "cart-b", "v2"), dr(nil, v2)},
			subset: "v2", want: model.UpstreamTLS{Mode: model.TLSIstioMutual, Auto: true, SubjectAltNames: []string{idB}}},
		{name: "mesh external never auto", objs: []*store.Object{se(networking.ServiceEntry_MESH_EXTERNAL), we("a", "10.0.0.1", "cart-a", "v1")},
			want: model.UpstreamTLS{}},
		{name: "destination DISABLE blocks auto", objs: []*store.Object{se(networking.ServiceEntry_MESH_INTERNAL), we("a", "10.0.0.1", "cart-a", "v1"),
			pa("shop", "cart", map[string]string{"app": "cart"}, security.PeerAuthentication_MutualTLS_STRICT, map[uint32]security.PeerAuthentication_MutualTLS_Mode{9090: security.PeerAuthentication_MutualTLS_DISABLE})},
			want: model.UpstreamTLS{}},
		{name: "strict-only skips permissive", objs: []*store.Object{se(networking.ServiceEntry_MESH_INTERNAL), we("a", "10.0.0.1", "cart-a", "v1")}, auto: model.AutoMTLSStrictOnly,
			want: model.UpstreamTLS{}},
		{name: "strict-only toward strict", objs: []*store.Object{se(networking.ServiceEntry_MESH_INTERNAL), we("a", "10.0.0.1", "cart-a", "v1"), strictShop}, auto: model.AutoMTLSStrictOnly,
			want: model.UpstreamTLS{Mode: model.TLSIstioMutual, Auto: true, SubjectAltNames: []string{idA}}},
		{name: "ISTIO_MUTUAL with service SANs", objs: []*store.Object{se(networking.ServiceEntry_MESH_EXTERNAL, "spiffe://other/ns/x/sa/y"), we("a", "10.0.0.1", "cart-a", "v1"),
			dr(tlsPolicy(networking.ClientTLSSettings_ISTIO_MUTUAL))}, auto: model.AutoMTLSStrictOnly,
			want: model.UpstreamTLS{Mode: model.TLSIstioMutual, SubjectAltNames: []string{idA, "spiffe://other/ns/x/sa/y"}}},
		{name: "ISTIO_MUTUAL with rule SANs", objs: []*store.Object{se(networking.ServiceEntry_MESH_INTERNAL), we("a", "10.0.0.1", "cart-a", "v1"),
			dr(tlsPolicy(networking.ClientTLSSettings_ISTIO_MUTUAL, "spiffe://cluster.local/ns/shop/sa/pinned"))},
			want: model.UpstreamTLS{Mode: model.TLSIstioMutual, SubjectAltNames: []string{"spiffe://cluster.local/ns/shop/sa/pinned"}}},
		{name: "DISABLE in rule beats auto", objs: []*store.Object{se(networking.ServiceEntry_MESH_INTERNAL), we("a", "10.0.0.1", "cart-a", "v1"), strictShop, dr(tlsPolicy(networking.ClientTLSSettings_DISABLE))},
			want: model.UpstreamTLS{}},
		{name: "subset TLS overrides top level", objs: []*store.Object{se(networking.ServiceEntry_MESH_INTERNAL), we("a", "10.0.0.1", "", "v2"),
			dr(tlsPolicy(networking.ClientTLSSettings_DISABLE), &networking.Subset{Name: "v2", Labels: map[string]string{"version": "v2"}, TrafficPolicy: tlsPolicy(networking.ClientTLSSettings_ISTIO_MUTUAL)})},
			subset: "v2", want: model.UpstreamTLS{Mode: model.TLSIstioMutual}},
		{name: "port level TLS overrides top level", objs: []*store.Object{se(networking.ServiceEntry_MESH_INTERNAL), we("a", "10.0.0.1", "cart-a", "v1"),
			dr(&networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL},
				PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{Port: &networking.PortSelector{Number: 7070}, Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_DISABLE}}}})},
			want: model.UpstreamTLS{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := build(t, tc.objs...)
			svc := s.ServicesForHost("cart.shop")[0]
			dr := s.DestinationRuleFor("cart.shop", "shop", "shop")
			got := s.UpstreamTLS(svc, svc.Ports[0], tc.subset, dr, tc.auto)
			got.Settings = nil
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
		})
	}
}
