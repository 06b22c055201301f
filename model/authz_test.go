package model_test

import (
	"strings"
	"testing"

	securityapi "istio.io/api/security/v1beta1"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
)

// istio.io/dry-run marks a policy as a dry run; AUDIT and CUSTOM policies
// are kept (the generators decide how they apply); a CUSTOM policy whose
// provider the mesh config does not define has a problem saying it denies.
func TestAuthorizationPolicyActionsAndDryRun(t *testing.T) {
	ap := func(name string, action securityapi.AuthorizationPolicy_Action, ann map[string]string) *store.Object {
		return &store.Object{Key: store.Key{Kind: store.KindAuthorizationPolicy, Namespace: "ns", Name: name}, Annotations: ann,
			Spec: &securityapi.AuthorizationPolicy{Action: action, Rules: []*securityapi.Rule{{}}}}
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, []*store.Object{
		ap("dry", securityapi.AuthorizationPolicy_DENY, map[string]string{model.DryRunAnnotation: "true"}),
		ap("audit", securityapi.AuthorizationPolicy_AUDIT, nil),
		ap("custom", securityapi.AuthorizationPolicy_CUSTOM, nil),
	}); err != nil {
		t.Fatal(err)
	}
	s := model.Build(st.Snapshot())
	got := map[string]*model.AuthorizationPolicy{}
	for _, p := range s.AuthorizationPoliciesFor("ns", nil) {
		got[p.Name] = p
	}
	if len(got) != 3 || !got["dry"].DryRun || got["audit"].DryRun || got["custom"].Action != securityapi.AuthorizationPolicy_CUSTOM {
		t.Fatalf("policies = %v", got)
	}
	var problems []string
	for _, p := range s.Problems {
		problems = append(problems, p.Object+": "+p.Message)
	}
	all := strings.Join(problems, "\n")
	for _, want := range []string{"ns/custom: action CUSTOM", "no extension provider", "requests matching its rules are denied"} {
		if !strings.Contains(all, want) {
			t.Errorf("problems lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "ns/audit") {
		t.Errorf("AUDIT is enforced (Envoy RBAC LOG), yet has a problem:\n%s", all)
	}
}
