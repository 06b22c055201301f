package model_test

import (
	"slices"
	"testing"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

func ra(ns, name string, sel map[string]string, rules ...*security.JWTRule) *store.Object {
	spec := &security.RequestAuthentication{JwtRules: rules}
	if sel != nil {
		spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
	}
	return secObj(store.KindRequestAuthentication, ns, name, spec)
}

func jwksObj(key, keys, errMsg string) *store.Object {
	o := &store.Object{Key: store.Key{Kind: store.KindJWKS, Name: key}, Spec: wrapperspb.String(keys)}
	if errMsg != "" {
		o.Annotations = map[string]string{store.JWKSErrorAnnotation: errMsg}
	}
	return o
}

// RequestAuthentications select workloads as Istio's: the root
// namespace's without selector apply mesh-wide, with a selector to the
// workloads it matches; the workload namespace's likewise; targetRef(s)
// policies apply to none. Selector policies split proxy groups; fetched
// key sets are read by key (jwksUri, or issuer: for discovery).
func TestRequestAuthenticationsForAndJWKS(t *testing.T) {
	rule := &security.JWTRule{Issuer: "iss", JwksUri: "https://iss/keys"}
	target := ra("shop", "gw", nil, rule)
	target.Spec.(*security.RequestAuthentication).TargetRefs = []*typev1beta1.PolicyTargetReference{{Kind: "Gateway", Group: "gateway.networking.k8s.io", Name: "g"}}
	s := build(t,
		ra("istio-system", "mesh", nil, rule),
		ra("istio-system", "mesh-cart", map[string]string{"app": "cart"}, &security.JWTRule{Issuer: "other"}),
		ra("shop", "ns", nil, &security.JWTRule{Issuer: "iss2", Jwks: `{"keys":[]}`}),
		ra("shop", "cart", map[string]string{"app": "cart"}, rule),
		ra("other", "x", nil, rule),
		target,
		jwksObj("https://iss/keys", `{"keys":[]}`, ""),
		jwksObj(model.IssuerKeyPrefix+"other", "", "GET: 404"),
	)
	keys := func(l []*model.RequestAuthentication) []string {
		var out []string
		for _, r := range l {
			out = append(out, r.Key())
		}
		return out
	}
	if got, want := keys(s.RequestAuthenticationsFor("shop", map[string]string{"app": "cart"})), []string{"istio-system/mesh", "istio-system/mesh-cart", "shop/cart", "shop/ns"}; !slices.Equal(got, want) {
		t.Errorf("cart: %v, want %v", got, want)
	}
	if got, want := keys(s.RequestAuthenticationsFor("shop", map[string]string{"app": "web"})), []string{"istio-system/mesh", "shop/ns"}; !slices.Equal(got, want) {
		t.Errorf("web: %v, want %v", got, want)
	}
	if got := s.WorkloadPolicyKey("shop", map[string]string{"app": "cart"}); got != "ra:istio-system/mesh-cart,ra:shop/cart" {
		t.Errorf("policy key %q", got)
	}
	if j, ok := s.JWKS("https://iss/keys"); !ok || j.Keys != `{"keys":[]}` {
		t.Errorf("JWKS = %v %v", j, ok)
	}
	if j, ok := s.JWKS(model.IssuerKeyPrefix + "other"); !ok || j.Keys != "" || j.Error != "GET: 404" {
		t.Errorf("failed JWKS = %v %v", j, ok)
	}
}

// A changed key set is a global change: every proxy's JWT filter may differ.
func TestJWKSChangeIsGlobal(t *testing.T) {
	rule := &security.JWTRule{Issuer: "iss", JwksUri: "https://iss/keys"}
	a := build(t, ra("shop", "r", nil, rule), jwksObj("https://iss/keys", `{"keys":[1]}`, ""))
	b := build(t, ra("shop", "r", nil, rule), jwksObj("https://iss/keys", `{"keys":[2]}`, ""))
	c := build(t, ra("shop", "r", nil, rule), jwksObj("https://iss/keys", `{"keys":[1]}`, ""))
	if !model.Compare(a, b).Global {
		t.Error("a new key set is not a global change")
	}
	if !model.Compare(a, c).Empty() {
		t.Error("the same key set is a change")
	}
}
