package security_test

//lint:file-ignore SA1019 Principal.metadata is what Istio's authz builder generates for JWT claims (Envoy accepts it; sourced_metadata is its successor)

import (
	"strings"
	"testing"
	"time"

	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	extauthznetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	securityapi "istio.io/api/security/v1beta1"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/security"
)

func envoyFilters(t *testing.T, e security.Envoy) ([]string, map[string]proto.Message) {
	t.Helper()
	fs, err := e.HTTPFilters()
	if err != nil {
		t.Fatal(err)
	}
	return unpackAll(t, fs)
}

func unpackAll(t *testing.T, fs []*hcmv3.HttpFilter) ([]string, map[string]proto.Message) {
	t.Helper()
	var order []string
	out := map[string]proto.Message{}
	for _, f := range fs {
		m, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
			t.Fatalf("%s: %v", f.GetName(), err)
		}
		order = append(order, f.GetName())
		out[f.GetName()] = m
	}
	return order, out
}

var jwtRule = &securityapi.Rule{From: []*securityapi.Rule_From{{Source: &securityapi.Source{RequestPrincipals: []string{"https://iss.test/alice"}}}}}

// grpc-go has no JWT filter: for proxyless servers (RBACFilters) an ALLOW
// rule that needs a request principal matches nothing, and a DENY rule
// ignores the JWT fields, so it denies every request the rest of it
// matches: fail closed both ways.
func TestProxylessFailsClosedOnRequestPrincipals(t *testing.T) {
	allow := httpRBAC(t, policy(securityapi.AuthorizationPolicy_ALLOW, jwtRule))[security.AllowFilterName]
	if allow == nil || allow.GetRules().GetAction() != rbacconfigv3.RBAC_ALLOW || len(allow.GetRules().GetPolicies()) != 0 {
		t.Errorf("proxyless ALLOW requestPrincipals = %v, want an ALLOW filter without policies (allows nothing)", allow)
	}
	requireJWT := &securityapi.Rule{From: []*securityapi.Rule_From{{Source: &securityapi.Source{NotRequestPrincipals: []string{"*"}}}}}
	deny := httpRBAC(t, policy(securityapi.AuthorizationPolicy_DENY, requireJWT))[security.DenyFilterName]
	pol := deny.GetRules().GetPolicies()["ns[ns]-policy[p]-rule[0]"]
	if pol == nil || !pol.GetPrincipals()[0].GetAny() {
		t.Errorf("proxyless DENY notRequestPrincipals = %v, want a rule denying every request", deny)
	}
	when := &securityapi.Rule{When: []*securityapi.Condition{{Key: "request.auth.claims[groups]", Values: []string{"admin"}}}}
	if a := httpRBAC(t, policy(securityapi.AuthorizationPolicy_ALLOW, when))[security.AllowFilterName]; len(a.GetRules().GetPolicies()) != 0 {
		t.Errorf("proxyless ALLOW request.auth.claims = %v, want nothing allowed", a)
	}
}

// For Envoy sidecars the same rules are metadata matchers on the payload
// jwt_authn stores, as Istio's authz builder generates them.
func TestEnvoyRequestPrincipalsAndClaims(t *testing.T) {
	rule := &securityapi.Rule{
		From: []*securityapi.Rule_From{{Source: &securityapi.Source{RequestPrincipals: []string{"https://iss.test/alice", "*/bob"}, Namespaces: []string{"shop"}}}},
		When: []*securityapi.Condition{
			{Key: "request.auth.claims[groups]", Values: []string{"admin"}},
			{Key: "request.auth.claims[nested][role]", NotValues: []string{"guest"}},
			{Key: "request.auth.audiences", Values: []string{"api"}},
			{Key: "request.auth.presenter", Values: []string{"web-*"}},
		},
	}
	_, fs := envoyFilters(t, security.Envoy{Policies: []*model.AuthorizationPolicy{policy(securityapi.AuthorizationPolicy_ALLOW, rule)}})
	allow := fs[security.AllowFilterName].(*rbacv3.RBAC)
	pol := allow.GetRules().GetPolicies()["ns[ns]-policy[p]-rule[0]"]
	if pol == nil {
		t.Fatalf("Envoy ALLOW with request principals: %v, want the rule kept", allow)
	}
	// Istio's layout: the from's fields (request principals first, then
	// the namespace) AND the four conditions.
	ids := pol.GetPrincipals()[0].GetAndIds().GetIds()
	if len(ids) != 6 || ids[1].GetAuthenticated() == nil {
		t.Fatalf("principal parts %d, want request principals, namespace and 4 conditions: %v", len(ids), pol.GetPrincipals()[0])
	}
	alternatives := ids[0].GetOrIds().GetIds()
	if len(alternatives) != 2 {
		t.Fatalf("request principals = %v, want two alternatives", ids[0])
	}
	alice := alternatives[0].GetAndIds().GetIds()
	if alice[0].GetMetadata().GetFilter() != security.JWTFilterName || alice[0].GetMetadata().GetPath()[1].GetKey() != "iss" ||
		alice[0].GetMetadata().GetValue().GetStringMatch().GetExact() != "https://iss.test" ||
		alice[1].GetMetadata().GetPath()[1].GetKey() != "sub" || alice[1].GetMetadata().GetValue().GetStringMatch().GetExact() != "alice" {
		t.Errorf("https://iss.test/alice = %v", alternatives[0])
	}
	bob := alternatives[1].GetAndIds().GetIds()
	if bob[0].GetMetadata().GetValue().GetStringMatch().GetSafeRegex().GetRegex() != ".+" || bob[1].GetMetadata().GetValue().GetStringMatch().GetExact() != "bob" {
		t.Errorf("*/bob = %v: want any issuer, subject bob", alternatives[1])
	}
	ids = ids[1:] // the conditions at 2..5
	groups := ids[1].GetMetadata()
	if p := groups.GetPath(); len(p) != 2 || p[0].GetKey() != security.JWTPayloadKey || p[1].GetKey() != "groups" {
		t.Errorf("claims[groups] path %v", p)
	}
	or := groups.GetValue().GetOrMatch().GetValueMatchers()
	if len(or) != 2 || or[0].GetListMatch().GetOneOf().GetStringMatch().GetExact() != "admin" || or[1].GetStringMatch().GetExact() != "admin" {
		t.Errorf("claims[groups] value %v: want a list holding admin, or admin", groups.GetValue())
	}
	if p := ids[2].GetNotId().GetMetadata().GetPath(); len(p) != 3 || p[1].GetKey() != "nested" || p[2].GetKey() != "role" {
		t.Errorf("notValues of claims[nested][role] = %v", ids[2])
	}
	if ids[3].GetMetadata().GetPath()[1].GetKey() != "aud" || ids[4].GetMetadata().GetPath()[1].GetKey() != "azp" ||
		ids[4].GetMetadata().GetValue().GetOrMatch().GetValueMatchers()[1].GetStringMatch().GetPrefix() != "web-" {
		t.Errorf("audiences/presenter = %v / %v", ids[3], ids[4])
	}

	// On TCP ports nothing carries a JWT: the ALLOW rule is dropped there.
	nf, err := security.Envoy{Policies: []*model.AuthorizationPolicy{policy(securityapi.AuthorizationPolicy_ALLOW, rule)}}.NetworkFilters()
	if err != nil || len(nf) != 1 {
		t.Fatalf("network filters %v %v", nf, err)
	}
	n := &rbacnetv3.RBAC{}
	if err := nf[0].GetTypedConfig().UnmarshalTo(n); err != nil || len(n.GetRules().GetPolicies()) != 0 {
		t.Errorf("TCP ALLOW with request principals = %v %v, want no policies", n, err)
	}
}

// AUDIT is an RBAC filter with action LOG before DENY and ALLOW (HTTP and
// TCP), as Istio's builder makes it: it marks, it never refuses.
func TestEnvoyAudit(t *testing.T) {
	rule := &securityapi.Rule{To: []*securityapi.Rule_To{{Operation: &securityapi.Operation{Paths: []string{"/admin"}}}}}
	deny := policy(securityapi.AuthorizationPolicy_DENY, rule)
	deny.Name = "deny"
	order, fs := envoyFilters(t, security.Envoy{Policies: []*model.AuthorizationPolicy{policy(securityapi.AuthorizationPolicy_AUDIT, rule), deny}})
	if strings.Join(order, ",") != security.AuditFilterName+","+security.DenyFilterName {
		t.Fatalf("filters %v, want audit then deny", order)
	}
	a := fs[security.AuditFilterName].(*rbacv3.RBAC)
	if a.GetRules().GetAction() != rbacconfigv3.RBAC_LOG || a.GetRules().GetPolicies()["ns[ns]-policy[p]-rule[0]"] == nil {
		t.Errorf("audit = %v", a)
	}
	nf, err := security.Envoy{Policies: []*model.AuthorizationPolicy{policy(securityapi.AuthorizationPolicy_AUDIT, &securityapi.Rule{})}}.NetworkFilters()
	if err != nil || len(nf) != 1 {
		t.Fatalf("network filters %v %v", nf, err)
	}
	n := &rbacnetv3.RBAC{}
	if err := nf[0].GetTypedConfig().UnmarshalTo(n); err != nil || n.ValidateAll() != nil || n.GetRules().GetAction() != rbacconfigv3.RBAC_LOG {
		t.Errorf("TCP audit = %v %v", n, err)
	}
}

// CUSTOM with a MeshConfig envoyExtAuthzHttp or envoyExtAuthzGrpc
// provider: an RBAC filter whose shadow rules name the requests to check
// and an ext_authz filter enabled by that result, with the provider's
// cluster, timeout, failOpen and headers; a provider the mesh config lacks
// denies what its rules match.
func TestEnvoyCustomExtAuthz(t *testing.T) {
	mesh := model.DefaultMesh()
	mesh.ExtensionProviders = &model.ExtensionProviders{List: []*meshv1alpha1.MeshConfig_ExtensionProvider{
		{Name: "http-authz", Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExtAuthzHttp{EnvoyExtAuthzHttp: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{
			Service: "shop/authz.shop.internal", Port: 9000, Timeout: durationpb.New(2 * time.Second), FailOpen: true,
			IncludeRequestHeadersInCheck: []string{"x-user"}, HeadersToUpstreamOnAllow: []string{"x-auth-*"}, PathPrefix: "/check",
		}}},
		{Name: "grpc-authz", Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExtAuthzGrpc{EnvoyExtAuthzGrpc: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider{
			Service: "authz.shop.internal", Port: 9001,
		}}},
	}}
	svc := &model.Service{Hostname: "authz.shop.internal", Namespace: "shop"}
	lookup := func(h string) *model.Service {
		if h == svc.Hostname {
			return svc
		}
		return nil
	}
	custom := func(name, provider string) *model.AuthorizationPolicy {
		p := policy(securityapi.AuthorizationPolicy_CUSTOM, &securityapi.Rule{To: []*securityapi.Rule_To{{Operation: &securityapi.Operation{Paths: []string{"/" + name}}}}})
		p.Name, p.Provider = name, provider
		return p
	}
	e := security.Envoy{Mesh: mesh, Service: lookup, Policies: []*model.AuthorizationPolicy{custom("h", "http-authz")}}
	order, fs := envoyFilters(t, e)
	want := []string{security.CustomFilterPrefix + "http-authz", security.ExtAuthzFilterName + ".http-authz"}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Fatalf("filters %v, want %v", order, want)
	}
	sel := fs[security.CustomFilterPrefix+"http-authz"].(*rbacv3.RBAC)
	if sel.GetRules() != nil || sel.GetShadowRulesStatPrefix() != "istio_ext_authz_" || sel.GetShadowRules().GetPolicies()["istio-ext-authz-http-authz-ns[ns]-policy[h]-rule[0]"] == nil {
		t.Errorf("selecting RBAC = %v: want shadow rules named for the provider, nothing enforced", sel)
	}
	h := fs[security.ExtAuthzFilterName+".http-authz"].(*extauthzv3.ExtAuthz)
	hs := h.GetHttpService()
	if hs.GetServerUri().GetCluster() != "outbound|9000||authz.shop.internal" || hs.GetServerUri().GetTimeout().AsDuration() != 2*time.Second || !h.GetFailureModeAllow() ||
		hs.GetPathPrefix() != "/check" || h.GetAllowedHeaders().GetPatterns()[0].GetExact() != "x-user" ||
		hs.GetAuthorizationResponse().GetAllowedUpstreamHeaders().GetPatterns()[0].GetPrefix() != "x-auth-" {
		t.Errorf("HTTP ext_authz = %v", h)
	}
	if m := h.GetFilterEnabledMetadata(); m.GetFilter() != "envoy.filters.http.rbac" || m.GetPath()[0].GetKey() != "istio_ext_authz_shadow_effective_policy_id" ||
		m.GetValue().GetStringMatch().GetPrefix() != "istio-ext-authz-http-authz" {
		t.Errorf("ext_authz enabled by %v", m)
	}
	_, fs = envoyFilters(t, security.Envoy{Mesh: mesh, Service: lookup, Policies: []*model.AuthorizationPolicy{custom("g", "grpc-authz")}})
	g := fs[security.ExtAuthzFilterName+".grpc-authz"].(*extauthzv3.ExtAuthz)
	if g.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "outbound|9001||authz.shop.internal" || g.GetGrpcService().GetTimeout().AsDuration() != 600*time.Second || g.GetFailureModeAllow() {
		t.Errorf("gRPC ext_authz = %v", g)
	}
	order, fs = envoyFilters(t, security.Envoy{Mesh: mesh, Service: lookup, Policies: []*model.AuthorizationPolicy{custom("x", "missing")}})
	d := fs[security.DenyFilterName].(*rbacv3.RBAC)
	if strings.Join(order, ",") != security.DenyFilterName || len(d.GetRules().GetPolicies()) != 1 || d.GetRules().GetPolicies()["istio-ext-authz-missing-ns[ns]-policy[x]-rule[0]-deny-due-to-bad-CUSTOM-action"] == nil {
		t.Errorf("missing provider: filters %v, deny %v: want only a DENY of its rules", order, d.GetRules())
	}
	// Two providers for one workload: none is asked (Istio's default), all
	// deny.
	order, fs = envoyFilters(t, security.Envoy{Mesh: mesh, Service: lookup, Policies: []*model.AuthorizationPolicy{custom("h", "http-authz"), custom("g", "grpc-authz")}})
	if strings.Join(order, ",") != security.DenyFilterName || len(fs[security.DenyFilterName].(*rbacv3.RBAC).GetRules().GetPolicies()) != 2 {
		t.Errorf("two providers: filters %v, want one DENY of both policies", order)
	}

	// TCP chains: a gRPC provider is asked through the network ext_authz
	// filter; an HTTP provider cannot be, so its policy denies.
	nf, err := security.Envoy{Mesh: mesh, Service: lookup, Policies: []*model.AuthorizationPolicy{custom("g", "grpc-authz")}}.NetworkFilters()
	if err != nil || len(nf) != 2 || nf[0].GetName() != security.NetworkFilterName || nf[1].GetName() != security.NetworkExtAuthzFilterName {
		t.Fatalf("TCP gRPC provider: %v %v, want RBAC (shadow) then ext_authz", nf, err)
	}
	nsel := &rbacnetv3.RBAC{}
	next := &extauthznetv3.ExtAuthz{}
	if err := nf[0].GetTypedConfig().UnmarshalTo(nsel); err != nil || nsel.ValidateAll() != nil || nsel.GetRules() != nil ||
		nsel.GetShadowRules().GetPolicies()["istio-ext-authz-grpc-authz-ns[ns]-policy[g]-rule[0]"] == nil {
		t.Errorf("TCP selecting RBAC = %v %v", nsel, err)
	}
	if err := nf[1].GetTypedConfig().UnmarshalTo(next); err != nil || next.ValidateAll() != nil ||
		next.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "outbound|9001||authz.shop.internal" || next.GetFilterEnabledMetadata().GetFilter() != "envoy.filters.network.rbac" {
		t.Errorf("TCP ext_authz = %v %v", next, err)
	}
	nf, err = security.Envoy{Mesh: mesh, Service: lookup, Policies: []*model.AuthorizationPolicy{custom("h", "http-authz")}}.NetworkFilters()
	nd := &rbacnetv3.RBAC{}
	if err != nil || len(nf) != 1 || nf[0].GetTypedConfig().UnmarshalTo(nd) != nil || nd.GetRules().GetAction() != rbacconfigv3.RBAC_DENY {
		t.Errorf("TCP HTTP provider: %v %v, want a DENY of its rules", nf, err)
	}

	// Without the provider's service, the provider cannot be asked: deny.
	e.Service = func(string) *model.Service { return nil }
	order, _ = envoyFilters(t, e)
	if strings.Join(order, ",") != security.DenyFilterName {
		t.Errorf("unknown provider service: filters %v, want deny only", order)
	}
}

// The jwt_authn config follows Istio's authn builder: providers origins-N
// by issuer; inline jwks wins; a missing token passes (authorization
// decides) unless a rule's presence is REQUIRED.
func TestJWTFilterRequirements(t *testing.T) {
	inline := `{"keys":[]}`
	ras := []*model.RequestAuthentication{{Namespace: "ns", Name: "a", Rules: []*securityapi.JWTRule{
		{Issuer: "z.test", Jwks: inline},
		{Issuer: "a.test", JwksUri: "https://a.test/keys"},
	}}}
	fetched := func(k string) (model.JWKS, bool) {
		if k == "https://a.test/keys" {
			return model.JWKS{Keys: `{"keys":[{"kty":"oct"}]}`}, true
		}
		return model.JWKS{}, false
	}
	_, fs := unpackAll(t, []*hcmv3.HttpFilter{security.JWTFilter(ras, fetched)})
	cfg := fs[security.JWTFilterName].(*jwtv3.JwtAuthentication)
	if cfg.GetProviders()["origins-0"].GetIssuer() != "a.test" || cfg.GetProviders()["origins-1"].GetLocalJwks().GetInlineString() != inline ||
		cfg.GetProviders()["origins-0"].GetLocalJwks().GetInlineString() != `{"keys":[{"kty":"oct"}]}` || !cfg.GetBypassCorsPreflight() {
		t.Errorf("providers %v", cfg.GetProviders())
	}
	if got := cfg.GetProviders()["origins-0"].GetNormalizePayloadInMetadata().GetSpaceDelimitedClaims(); strings.Join(got, ",") != "permission,scope" {
		t.Errorf("space-delimited claims %v", got)
	}
	if security.JWTFilter(nil, fetched) != nil {
		t.Error("a filter without rules")
	}
	one := []*model.RequestAuthentication{{Rules: []*securityapi.JWTRule{{Issuer: "a.test", JwksUri: "https://a.test/keys"}}}}
	_, fs = unpackAll(t, []*hcmv3.HttpFilter{security.JWTFilter(one, fetched)})
	alts := fs[security.JWTFilterName].(*jwtv3.JwtAuthentication).GetRules()[0].GetRequires().GetRequiresAny().GetRequirements()
	if len(alts) != 2 || alts[0].GetProviderName() != "origins-0" || alts[1].GetAllowMissing() == nil {
		t.Errorf("one provider: %v, want provider or allow_missing", alts)
	}
	one[0].Rules[0].Presence = securityapi.JWTRule_REQUIRED
	_, fs = unpackAll(t, []*hcmv3.HttpFilter{security.JWTFilter(one, fetched)})
	all := fs[security.JWTFilterName].(*jwtv3.JwtAuthentication).GetRules()[0].GetRequires().GetRequiresAll().GetRequirements()
	if len(all) != 2 || all[0].GetProviderName() != "origins-0" {
		t.Errorf("REQUIRED: %v, want the provider required", all)
	}
}
