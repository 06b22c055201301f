package security_test

import (
	"regexp"
	"testing"

	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/security"
	"google.golang.org/protobuf/encoding/protojson"
	securityapi "istio.io/api/security/v1beta1"
)

func policy(action securityapi.AuthorizationPolicy_Action, rules ...*securityapi.Rule) *model.AuthorizationPolicy {
	return &model.AuthorizationPolicy{Namespace: "ns", Name: "p", Action: action, Rules: rules}
}

func onlyPolicy(t *testing.T, p *model.AuthorizationPolicy) *rbacconfigv3.Policy {
	t.Helper()
	fs, err := security.RBACFilters([]*model.AuthorizationPolicy{p})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 {
		t.Fatalf("filters: %d", len(fs))
	}
	r := &rbacv3.RBAC{}
	if err := fs[0].GetTypedConfig().UnmarshalTo(r); err != nil {
		t.Fatal(err)
	}
	if err := r.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	pol := r.GetRules().GetPolicies()["ns[ns]-policy[p]-rule[0]"]
	if pol == nil {
		t.Fatalf("no policy in %v", r)
	}
	return pol
}

// The namespace, service-account and trust-domain patterns are regular
// expressions on the SPIFFE ID (grpc-go and Envoy match them whole).
func TestSourcePatterns(t *testing.T) {
	tests := []struct {
		name     string
		src      *securityapi.Source
		match    []string
		nonMatch []string
	}{
		{name: "namespace", src: &securityapi.Source{Namespaces: []string{"shop"}},
			match: []string{"spiffe://cluster.local/ns/shop/sa/x"}, nonMatch: []string{"spiffe://cluster.local/ns/shopping/sa/x", "spiffe://cluster.local/ns/x/sa/shop"}},
		{name: "namespace prefix", src: &securityapi.Source{Namespaces: []string{"team-*"}},
			match: []string{"spiffe://td/ns/team-a/sa/x"}, nonMatch: []string{"spiffe://td/ns/other/sa/team-a"}},
		{name: "namespace with dot is literal", src: &securityapi.Source{Namespaces: []string{"a.b"}},
			match: []string{"spiffe://td/ns/a.b/sa/x"}, nonMatch: []string{"spiffe://td/ns/aXb/sa/x"}},
		{name: "service account", src: &securityapi.Source{ServiceAccounts: []string{"shop/cart"}},
			match: []string{"spiffe://any.domain/ns/shop/sa/cart"}, nonMatch: []string{"spiffe://td/ns/shop/sa/carts", "spiffe://td/ns/x/sa/cart"}},
		{name: "trust domain", src: &securityapi.Source{TrustDomains: []string{"corp.example"}},
			match: []string{"spiffe://corp.example/ns/a/sa/b"}, nonMatch: []string{"spiffe://other/ns/a/sa/b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pol := onlyPolicy(t, policy(securityapi.AuthorizationPolicy_DENY, &securityapi.Rule{From: []*securityapi.Rule_From{{Source: tc.src}}}))
			re := regexp.MustCompile("^(?:" + pol.GetPrincipals()[0].GetAuthenticated().GetPrincipalName().GetSafeRegex().GetRegex() + ")$")
			for _, id := range tc.match {
				if !re.MatchString(id) {
					t.Errorf("%s does not match %s", re, id)
				}
			}
			for _, id := range tc.nonMatch {
				if re.MatchString(id) {
					t.Errorf("%s matches %s", re, id)
				}
			}
		})
	}
}

func TestRuleShapes(t *testing.T) {
	rule := &securityapi.Rule{
		From: []*securityapi.Rule_From{
			{Source: &securityapi.Source{Principals: []string{"cluster.local/ns/a/sa/b", "*/sa/admin", "cluster.local/ns/x/*"}, NotIpBlocks: []string{"10.0.0.0/8"}}},
			{Source: &securityapi.Source{RemoteIpBlocks: []string{"192.168.1.1"}}},
		},
		To: []*securityapi.Rule_To{{Operation: &securityapi.Operation{Hosts: []string{"api.example.com"}, NotPorts: []string{"9090"}}}},
		When: []*securityapi.Condition{
			{Key: "source.namespace", Values: []string{"a"}},
			{Key: "destination.port", NotValues: []string{"8080"}},
			{Key: "request.auth.claims[iss]", Values: []string{"x"}}, // unsupported: ignored in DENY
		},
	}
	pol := onlyPolicy(t, policy(securityapi.AuthorizationPolicy_DENY, rule))
	got, err := protojson.Marshal(pol)
	if err != nil {
		t.Fatal(err)
	}
	// Istio's layout: one principal per `from` (its fields AND the
	// source condition), one permission per `to` (its fields AND the
	// destination condition); Envoy ORs each list.
	if len(pol.GetPrincipals()) != 2 || len(pol.GetPermissions()) != 1 {
		t.Fatalf("policy shape: %s", got)
	}
	from0 := pol.GetPrincipals()[0].GetAndIds().GetIds()
	if len(from0) != 3 || from0[2].GetAuthenticated().GetPrincipalName().GetSafeRegex() == nil {
		t.Fatalf("from[0] shape (principals, notIpBlocks, namespace condition): %s", got)
	}
	principals := from0[0].GetOrIds().GetIds()
	if principals[0].GetAuthenticated().GetPrincipalName().GetExact() != "spiffe://cluster.local/ns/a/sa/b" ||
		principals[1].GetAuthenticated().GetPrincipalName().GetSuffix() != "/sa/admin" ||
		principals[2].GetAuthenticated().GetPrincipalName().GetPrefix() != "spiffe://cluster.local/ns/x/" {
		t.Errorf("principal values: %s", got)
	}
	if from0[1].GetNotId().GetDirectRemoteIp().GetPrefixLen().GetValue() != 8 {
		t.Errorf("notIpBlocks: %s", got)
	}
	from1 := pol.GetPrincipals()[1].GetAndIds().GetIds()
	if r := from1[0].GetRemoteIp(); len(from1) != 2 || r.GetAddressPrefix() != "192.168.1.1" || r.GetPrefixLen().GetValue() != 32 || from1[1].GetAuthenticated() == nil {
		t.Errorf("from[1] (remoteIpBlocks AND the namespace condition): %s", got)
	}
	// Permission: the operation's fields AND NOT port 8080 (the JWT
	// condition is dropped: proxyless servers cannot check it).
	op := pol.GetPermissions()[0].GetAndRules().GetRules()
	if len(op) != 3 || op[2].GetNotRule().GetDestinationPort() != 8080 {
		t.Fatalf("permission shape: %s", got)
	}
	host := op[0].GetOrRules().GetRules()
	if host[0].GetHeader().GetName() != ":authority" || !host[0].GetHeader().GetStringMatch().GetIgnoreCase() || host[1].GetHeader().GetStringMatch().GetPrefix() != "api.example.com:" {
		t.Errorf("hosts: %s", got)
	}
	if op[1].GetNotRule().GetDestinationPort() != 9090 {
		t.Errorf("notPorts: %s", got)
	}

	// The same rule in an ALLOW policy is dropped: it would allow too much.
	fs, err := security.RBACFilters([]*model.AuthorizationPolicy{policy(securityapi.AuthorizationPolicy_ALLOW, rule)})
	if err != nil {
		t.Fatal(err)
	}
	r := &rbacv3.RBAC{}
	if len(fs) != 1 || fs[0].GetTypedConfig().UnmarshalTo(r) != nil || len(r.GetRules().GetPolicies()) != 0 || r.GetRules().GetAction() != rbacconfigv3.RBAC_ALLOW {
		t.Errorf("ALLOW with an unsupported condition: %v", r)
	}
}

func TestBadValuesAreErrors(t *testing.T) {
	for _, rule := range []*securityapi.Rule{
		{From: []*securityapi.Rule_From{{Source: &securityapi.Source{IpBlocks: []string{"not-an-ip"}}}}},
		{From: []*securityapi.Rule_From{{Source: &securityapi.Source{ServiceAccounts: []string{"a/b/c"}}}}},
		{To: []*securityapi.Rule_To{{Operation: &securityapi.Operation{Ports: []string{"http"}}}}},
	} {
		if _, err := security.RBACFilters([]*model.AuthorizationPolicy{policy(securityapi.AuthorizationPolicy_DENY, rule)}); err == nil {
			t.Errorf("rule %v: want an error", rule)
		}
	}
}

// Istio's short form: a serviceAccounts entry without a namespace is of the
// policy's namespace.
func TestServiceAccountShortForm(t *testing.T) {
	p := policy(securityapi.AuthorizationPolicy_ALLOW, &securityapi.Rule{From: []*securityapi.Rule_From{{Source: &securityapi.Source{ServiceAccounts: []string{"cart"}}}}})
	b, err := protojson.Marshal(onlyPolicy(t, p))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`/ns/ns/sa/cart`).Match(b) {
		t.Errorf("serviceAccounts [cart] of a policy in ns: %s", b)
	}
}

// On a TCP port a network RBAC filter sees connections only: an ALLOW rule
// that needs request fields can never match and is dropped; a DENY rule
// loses those fields and so denies every connection its other fields
// match (Istio's conservative rule); the rest is translated as for HTTP.
func TestNetworkRulesDropHTTPFields(t *testing.T) {
	httpOnly := &securityapi.Rule{To: []*securityapi.Rule_To{{Operation: &securityapi.Operation{Methods: []string{"DELETE"}}}}}
	withPort := &securityapi.Rule{
		From: []*securityapi.Rule_From{{Source: &securityapi.Source{Namespaces: []string{"shop"}}}},
		To:   []*securityapi.Rule_To{{Operation: &securityapi.Operation{Paths: []string{"/admin*"}, Ports: []string{"9000"}}}},
		When: []*securityapi.Condition{{Key: "request.headers[x-user]", Values: []string{"bob"}}},
	}
	deny, allow, err := security.Rules([]*model.AuthorizationPolicy{
		{Namespace: "ns", Name: "d", Action: securityapi.AuthorizationPolicy_DENY, Rules: []*securityapi.Rule{httpOnly, withPort}},
		{Namespace: "ns", Name: "a", Action: securityapi.AuthorizationPolicy_ALLOW, Rules: []*securityapi.Rule{httpOnly}},
	}, security.TCP)
	if err != nil {
		t.Fatal(err)
	}
	if p := deny.GetPolicies()["ns[ns]-policy[d]-rule[0]"]; p == nil || !p.GetPermissions()[0].GetAny() || !p.GetPrincipals()[0].GetAny() {
		t.Errorf("DENY on methods over TCP = %v, want any connection", p)
	}
	p := deny.GetPolicies()["ns[ns]-policy[d]-rule[1]"]
	if p.GetPermissions()[0].GetDestinationPort() != 9000 || p.GetPrincipals()[0].GetAuthenticated() == nil {
		t.Errorf("DENY with port and namespace over TCP = %v, want port 9000 and the namespace kept", p)
	}
	if allow == nil || len(allow.GetPolicies()) != 0 {
		t.Errorf("ALLOW with only HTTP rules over TCP = %v, want present and empty (allows nothing)", allow)
	}
	fs, err := security.NetworkRBACFilters([]*model.AuthorizationPolicy{policy(securityapi.AuthorizationPolicy_ALLOW, withPort)})
	if err != nil || len(fs) != 1 || fs[0].GetName() != security.NetworkFilterName {
		t.Fatalf("network filters = %v, %v", fs, err)
	}
	// Over HTTP the same rules keep their request fields.
	deny, _, err = security.Rules([]*model.AuthorizationPolicy{policy(securityapi.AuthorizationPolicy_DENY, withPort)}, security.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	if got := protojson.Format(deny); !regexp.MustCompile(`/admin`).MatchString(got) || !regexp.MustCompile(`x-user`).MatchString(got) {
		t.Errorf("HTTP rule lost request fields: %s", got)
	}
}

// RBAC policies are a map: the packed filter must still be the same bytes
// every time, or every push would resend unchanged listeners (resources
// are versioned by a hash of their bytes).
func TestRBACFiltersAreDeterministic(t *testing.T) {
	var rules []*securityapi.Rule
	for _, ns := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		rules = append(rules, &securityapi.Rule{From: []*securityapi.Rule_From{{Source: &securityapi.Source{Namespaces: []string{ns}}}}})
	}
	policies := []*model.AuthorizationPolicy{policy(securityapi.AuthorizationPolicy_ALLOW, rules...)}
	var first []byte
	for i := range 20 {
		fs, err := security.RBACFilters(policies)
		if err != nil {
			t.Fatal(err)
		}
		b := fs[0].GetTypedConfig().GetValue()
		if i == 0 {
			first = b
		} else if string(b) != string(first) {
			t.Fatalf("generation %d packed different bytes", i)
		}
	}
}
