package security_test

import (
	"testing"

	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	securityapi "istio.io/api/security/v1beta1"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/security"
)

func httpRBAC(t *testing.T, policies ...*model.AuthorizationPolicy) map[string]*rbacv3.RBAC {
	t.Helper()
	fs, err := security.RBACFilters(policies)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*rbacv3.RBAC{}
	for _, f := range fs {
		r := &rbacv3.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
			t.Fatal(err)
		}
		if err := r.ValidateAll(); err != nil {
			t.Fatal(err)
		}
		out[f.GetName()] = r
	}
	return out
}

// AUDIT enforces nothing; CUSTOM, without an external authorizer, denies
// what its rules match (fails closed); a dry run becomes shadow rules with
// Istio's stat prefixes and enforces nothing.
func TestAuditCustomAndDryRun(t *testing.T) {
	rule := &securityapi.Rule{To: []*securityapi.Rule_To{{Operation: &securityapi.Operation{Paths: []string{"/admin"}}}}}

	if fs := httpRBAC(t, policy(securityapi.AuthorizationPolicy_AUDIT, rule)); len(fs) != 0 {
		t.Errorf("AUDIT made filters %v", fs)
	}

	custom := httpRBAC(t, policy(securityapi.AuthorizationPolicy_CUSTOM, rule))
	if d := custom[security.DenyFilterName]; d == nil || d.GetRules().GetAction() != rbacconfigv3.RBAC_DENY || len(d.GetRules().GetPolicies()) != 1 {
		t.Errorf("CUSTOM = %v, want a DENY of its rule", custom)
	}

	dry := policy(securityapi.AuthorizationPolicy_DENY, rule)
	dry.DryRun = true
	enforced := policy(securityapi.AuthorizationPolicy_DENY, &securityapi.Rule{To: []*securityapi.Rule_To{{Operation: &securityapi.Operation{Paths: []string{"/secret"}}}}})
	enforced.Name = "enforced"
	fs := httpRBAC(t, dry, enforced)
	d := fs[security.DenyFilterName]
	if d == nil || len(d.GetRules().GetPolicies()) != 1 || d.GetRules().GetPolicies()["ns[ns]-policy[enforced]-rule[0]"] == nil {
		t.Fatalf("enforced rules = %v, want the enforced policy only", d.GetRules())
	}
	if d.GetShadowRules().GetAction() != rbacconfigv3.RBAC_DENY || d.GetShadowRules().GetPolicies()["ns[ns]-policy[p]-rule[0]"] == nil || d.GetShadowRulesStatPrefix() != "istio_dry_run_deny_" {
		t.Errorf("shadow rules = %v prefix %q", d.GetShadowRules(), d.GetShadowRulesStatPrefix())
	}

	// A dry-run ALLOW alone allows everything: no enforced rules at all.
	dryAllow := policy(securityapi.AuthorizationPolicy_ALLOW, rule)
	dryAllow.DryRun = true
	fs = httpRBAC(t, dryAllow)
	if a := fs[security.AllowFilterName]; a == nil || a.GetRules() != nil || a.GetShadowRulesStatPrefix() != "istio_dry_run_allow_" || len(a.GetShadowRules().GetPolicies()) != 1 {
		t.Errorf("dry-run ALLOW = %v, want shadow rules only", fs)
	}

	nf, err := security.NetworkRBACFilters([]*model.AuthorizationPolicy{dryAllow})
	if err != nil || len(nf) != 1 {
		t.Fatalf("network filters %v %v", nf, err)
	}
	n := &rbacnetv3.RBAC{}
	if err := nf[0].GetTypedConfig().UnmarshalTo(n); err != nil || n.ValidateAll() != nil || n.GetRules() != nil || n.GetShadowRulesStatPrefix() != "istio_dry_run_allow_" {
		t.Errorf("network dry run = %v %v", n, err)
	}
}
