package security

import (
	"fmt"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	extauthznetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/translate"
	"google.golang.org/protobuf/types/known/durationpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	security "istio.io/api/security/v1beta1"
)

// Filter names of an Envoy sidecar's inbound HTTP chain beyond DENY and
// ALLOW.
const (
	AuditFilterName    = "envoy.filters.http.rbac.audit"
	CustomFilterPrefix = "envoy.filters.http.rbac.custom."
	ExtAuthzFilterName = "envoy.filters.http.ext_authz"
	// NetworkExtAuthzFilterName is the network ext_authz filter of a TCP
	// chain (CUSTOM with a gRPC provider).
	NetworkExtAuthzFilterName = "envoy.filters.network.ext_authz"
	// rbacMetadataNamespace and networkRBACMetadataNamespace are where
	// Envoy's RBAC filters write their shadow result, whatever the filter
	// instance is named.
	rbacMetadataNamespace        = "envoy.filters.http.rbac"
	networkRBACMetadataNamespace = "envoy.filters.network.rbac"
)

// Istio's names for CUSTOM policies: the RBAC shadow rules that select
// requests for ext_authz are named extAuthzPrefix-<provider>-ns[...]..., and
// their result is read from <extAuthzStatPrefix>shadow_effective_policy_id.
const (
	extAuthzPrefix     = "istio-ext-authz"
	extAuthzStatPrefix = "istio_ext_authz_"
)

// Envoy is what an Envoy sidecar's inbound filters enforce for one
// workload: its AuthorizationPolicies and RequestAuthentications, the key
// sets fetched for them and the mesh's extension providers.
type Envoy struct {
	Policies               []*model.AuthorizationPolicy
	RequestAuthentications []*model.RequestAuthentication
	JWKS                   JWKSLookup
	Mesh                   model.Mesh
	// Service finds an extension provider's service (host, or
	// namespace/host); nil: none is found.
	Service func(host string) *model.Service
}

// ForEnvoy collects what the inbound filters of a sidecar's workload
// enforce from its view.
func ForEnvoy(v *model.View) Envoy {
	return Envoy{Policies: v.AuthorizationPolicies(), RequestAuthentications: v.RequestAuthentications(), JWKS: v.JWKS, Mesh: v.Mesh(), Service: v.ServiceFor}
}

// HTTPFilters returns the HTTP filters of an inbound HTTP chain, before the
// router, in Istio's order: for the workload's CUSTOM provider when it can
// be asked, an RBAC filter whose shadow rules mark the requests its
// policies match and the ext_authz filter that asks the provider about
// those; the jwt_authn
// filter (JWTFilter); an RBAC filter with action LOG for AUDIT policies;
// then DENY and ALLOW (with request principals and request.auth.*
// enforced from jwt_authn's metadata). A CUSTOM policy whose provider the
// mesh config does not define (or defines as something other than
// envoyExtAuthzHttp/envoyExtAuthzGrpc, or with a service vmesh does not
// know) denies what it matches, as in Istio; so do all CUSTOM policies of
// a workload whose policies name more than one provider (Istio's default
// allows one provider per workload).
func (e Envoy) HTTPFilters() ([]*hcmv3.HttpFilter, error) {
	var out []*hcmv3.HttpFilter
	asked := map[string]bool{}
	custom, err := e.customFilters(asked)
	if err != nil {
		return nil, err
	}
	out = append(out, custom...)
	if f := JWTFilter(e.RequestAuthentications, e.lookup()); f != nil {
		out = append(out, f)
	}
	audit, auditShadow, err := auditRules(e.Policies, HTTP, true)
	if err != nil {
		return nil, err
	}
	if audit != nil || auditShadow != nil {
		out = append(out, rbacHTTP(AuditFilterName, &rbacv3.RBAC{Rules: audit, ShadowRules: auditShadow}))
	}
	o := ruleOptions{jwt: true, askProvider: func(p *model.AuthorizationPolicy) bool { return asked[p.Provider] }}
	rbac, err := rbacFilters(e.Policies, o)
	if err != nil {
		return nil, err
	}
	return append(out, rbac...), nil
}

// NetworkFilters returns the network filters of an inbound TCP chain, in
// Istio's order: for a CUSTOM provider of type envoyExtAuthzGrpc, a
// network RBAC filter whose shadow rules mark the connections to check and
// the network ext_authz filter that asks the provider about those; an RBAC
// filter with action LOG for AUDIT policies; then DENY and ALLOW
// (NetworkRBACFilters). CUSTOM policies whose provider cannot be asked on
// TCP (an envoyExtAuthzHttp provider among them: Istio ignores those on
// TCP, vmesh fails closed) deny what they match. HTTP-only fields of a
// CUSTOM rule are ignored on TCP, so the provider is asked about more
// connections, never fewer.
func (e Envoy) NetworkFilters() ([]*listenerv3.Filter, error) {
	asked := map[string]bool{}
	out, err := e.customNetworkFilters(asked)
	if err != nil {
		return nil, err
	}
	audit, auditShadow, err := auditRules(e.Policies, TCP, false)
	if err != nil {
		return nil, err
	}
	if audit != nil || auditShadow != nil {
		out = append(out, &listenerv3.Filter{Name: NetworkFilterName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: translate.MustAny(
			&rbacnetv3.RBAC{Rules: audit, ShadowRules: auditShadow, StatPrefix: "audit_"})}})
	}
	rest, err := networkRBACFilters(e.Policies, func(p *model.AuthorizationPolicy) bool { return asked[p.Provider] })
	if err != nil {
		return nil, err
	}
	return append(out, rest...), nil
}

// customNetworkFilters is customFilters for TCP chains: gRPC providers only.
func (e Envoy) customNetworkFilters(asked map[string]bool) ([]*listenerv3.Filter, error) {
	name, policies := e.customProvider()
	if name == "" {
		return nil, nil
	}
	ext, err := e.extAuthz(name)
	grpc := ext.GetGrpcService()
	if err != nil || grpc == nil {
		return nil, nil // its policies deny what they match
	}
	enforce, dry, err := customRules(name, policies, TCP)
	if err != nil {
		return nil, err
	}
	cfg := &rbacnetv3.RBAC{ShadowRules: enforce, StatPrefix: "tcp.", ShadowRulesStatPrefix: extAuthzStatPrefix}
	if len(dry.Policies) > 0 {
		cfg.Rules = dry
	}
	tcp := &extauthznetv3.ExtAuthz{
		StatPrefix: "tcp.", FailureModeAllow: ext.GetFailureModeAllow(), TransportApiVersion: corev3.ApiVersion_V3, GrpcService: grpc,
		FilterEnabledMetadata: customEnabled(networkRBACMetadataNamespace, name),
	}
	asked[name] = true
	return []*listenerv3.Filter{
		{Name: NetworkFilterName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: translate.MustAny(cfg)}},
		{Name: NetworkExtAuthzFilterName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: translate.MustAny(tcp)}},
	}, nil
}

// customProvider returns the one provider the CUSTOM policies name and
// those policies; "" when there is none, or several (Istio's default
// allows one provider per workload: with several, none is asked).
func (e Envoy) customProvider() (string, []*model.AuthorizationPolicy) {
	var name string
	var policies []*model.AuthorizationPolicy
	for _, p := range e.Policies {
		if p.Action != security.AuthorizationPolicy_CUSTOM {
			continue
		}
		if len(policies) > 0 && p.Provider != name {
			return "", nil
		}
		name, policies = p.Provider, append(policies, p)
	}
	return name, policies
}

// customRules are the rules of one provider's CUSTOM policies, named as
// Istio names them: enforced ones (for shadow rules) and dry-run ones.
func customRules(name string, policies []*model.AuthorizationPolicy, proto Protocol) (enforce, dry *rbacconfigv3.RBAC, err error) {
	enforce = &rbacconfigv3.RBAC{Action: rbacconfigv3.RBAC_DENY, Policies: map[string]*rbacconfigv3.Policy{}}
	dry = &rbacconfigv3.RBAC{Action: rbacconfigv3.RBAC_DENY, Policies: map[string]*rbacconfigv3.Policy{}}
	for _, p := range policies {
		pols, err := policyRules(p, proto, proto == HTTP, false)
		if err != nil {
			return nil, nil, err
		}
		if len(p.Rules) == 0 {
			pols = map[string]*rbacconfigv3.Policy{fmt.Sprintf("ns[%s]-policy[%s]-rule[0]", p.Namespace, p.Name): matchNever()}
		}
		dst := enforce
		if p.DryRun {
			dst = dry
		}
		for n, pol := range pols {
			dst.Policies[customPrefix(name)+n] = pol
		}
	}
	return enforce, dry, nil
}

// customEnabled enables an ext_authz filter for what the provider's shadow
// rules matched: the RBAC filter's shadow_effective_policy_id (in
// namespace ns) starts with the provider's prefix.
func customEnabled(ns, provider string) *matcherv3.MetadataMatcher {
	return &matcherv3.MetadataMatcher{
		Filter: ns,
		Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: extAuthzStatPrefix + "shadow_effective_policy_id"}}},
		Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: extAuthzPrefix + "-" + provider}}}},
	}
}

func (e Envoy) lookup() JWKSLookup {
	if e.JWKS == nil {
		return func(string) (model.JWKS, bool) { return model.JWKS{}, false }
	}
	return e.JWKS
}

func rbacHTTP(name string, cfg *rbacv3.RBAC) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: translate.MustAny(cfg)}}
}

// auditRules are the rules of the AUDIT policies, action LOG: Envoy marks
// the requests they match for audit logging (access logs read the
// metadata) and lets them through, as Istio's AUDIT does. Dry-run AUDIT
// policies go into shadow rules.
func auditRules(policies []*model.AuthorizationPolicy, proto Protocol, jwt bool) (rules, shadow *rbacconfigv3.RBAC, err error) {
	for _, p := range policies {
		if p.Action != security.AuthorizationPolicy_AUDIT {
			continue
		}
		pols, err := policyRules(p, proto, jwt && proto == HTTP, false)
		if err != nil {
			return nil, nil, err
		}
		dst := &rules
		if p.DryRun {
			dst = &shadow
		}
		if *dst == nil {
			*dst = &rbacconfigv3.RBAC{Action: rbacconfigv3.RBAC_LOG, Policies: map[string]*rbacconfigv3.Policy{}}
		}
		for name, pol := range pols {
			(*dst).Policies[name] = pol
		}
	}
	return rules, shadow, nil
}

// customFilters builds, for the one CUSTOM provider of the workload when
// it can be asked, the RBAC filter whose shadow rules name the requests to
// check and the ext_authz filter enabled by that result; asked gets the
// provider built.
func (e Envoy) customFilters(asked map[string]bool) ([]*hcmv3.HttpFilter, error) {
	name, policies := e.customProvider()
	if name == "" {
		return nil, nil
	}
	ext, err := e.extAuthz(name)
	if err != nil {
		return nil, nil // its policies deny what they match (rules: askProvider false)
	}
	enforce, dry, err := customRules(name, policies, HTTP)
	if err != nil {
		return nil, err
	}
	// Shadow rules only evaluate: their result, in metadata, enables
	// ext_authz, which enforces. Dry-run CUSTOM policies are evaluated as
	// rules of the same filter, which then enforces nothing either (their
	// action names ext_authz's prefix), as in Istio.
	cfg := &rbacv3.RBAC{ShadowRules: enforce, ShadowRulesStatPrefix: extAuthzStatPrefix}
	if len(dry.Policies) > 0 {
		cfg.Rules = dry
	}
	ext.FilterEnabledMetadata = customEnabled(rbacMetadataNamespace, name)
	asked[name] = true
	return []*hcmv3.HttpFilter{rbacHTTP(CustomFilterPrefix+name, cfg),
		{Name: ExtAuthzFilterName + "." + name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: translate.MustAny(ext)}}}, nil
}

func matchNever() *rbacconfigv3.Policy {
	return &rbacconfigv3.Policy{
		Permissions: []*rbacconfigv3.Permission{{Rule: &rbacconfigv3.Permission_NotRule{NotRule: anyPermission()}}},
		Principals:  []*rbacconfigv3.Principal{{Identifier: &rbacconfigv3.Principal_NotId{NotId: anyPrincipal()}}},
	}
}

// extAuthz builds the ext_authz filter of a MeshConfig extension provider
// as Istio does: envoyExtAuthzHttp (HTTP service at the provider's
// service, port, pathPrefix, with its timeout, default 600 s, headers to
// send and to pass back) or envoyExtAuthzGrpc (Envoy gRPC to the
// provider's cluster), with failOpen, statusOnError and
// includeRequestBodyInCheck.
func (e Envoy) extAuthz(name string) (*extauthzv3.ExtAuthz, error) {
	p := e.Mesh.ExtensionProvider(name)
	if p == nil {
		return nil, fmt.Errorf("the mesh config defines no extension provider %q", name)
	}
	cluster := func(service string, port uint32) (host, cluster string, err error) {
		if port == 0 || port > 65535 {
			return "", "", fmt.Errorf("provider %q: port must be in the range [1, 65535], found: %d", name, port)
		}
		host = service
		if _, h, ok := strings.Cut(service, "/"); ok {
			host = h
		}
		if e.Service == nil {
			return "", "", fmt.Errorf("provider %q: service %s unknown", name, service)
		}
		svc := e.Service(host)
		if svc == nil {
			return "", "", fmt.Errorf("provider %q: no ServiceEntry defines %s", name, service)
		}
		return svc.Hostname, model.ClusterName(port, "", svc.Hostname), nil
	}
	status := func(s string) (*typev3.HttpStatus, error) {
		if s == "" {
			return nil, nil
		}
		var code int32
		if _, err := fmt.Sscanf(s, "%d", &code); err != nil {
			return nil, fmt.Errorf("provider %q: invalid statusOnError %q", name, s)
		}
		if _, ok := typev3.StatusCode_name[code]; !ok {
			return nil, fmt.Errorf("provider %q: unsupported statusOnError %s", name, s)
		}
		return &typev3.HttpStatus{Code: typev3.StatusCode(code)}, nil
	}
	timeout := func(d *durationpb.Duration) *durationpb.Duration {
		if d == nil {
			return durationpb.New(600e9)
		}
		return d
	}
	body := func(b *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationRequestBody) *extauthzv3.BufferSettings {
		if b == nil {
			return nil
		}
		return &extauthzv3.BufferSettings{MaxRequestBytes: b.GetMaxRequestBytes(), AllowPartialMessage: b.GetAllowPartialMessage(), PackAsBytes: b.GetPackAsBytes()}
	}
	switch {
	case p.GetEnvoyExtAuthzHttp() != nil:
		c := p.GetEnvoyExtAuthzHttp()
		host, cl, err := cluster(c.GetService(), c.GetPort())
		if err != nil {
			return nil, err
		}
		st, err := status(c.GetStatusOnError())
		if err != nil {
			return nil, err
		}
		svc := &extauthzv3.HttpService{
			PathPrefix: c.GetPathPrefix(),
			ServerUri:  &corev3.HttpUri{Uri: "http://" + host, HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cl}, Timeout: timeout(c.GetTimeout())},
		}
		var add []*corev3.HeaderValue
		keys := make([]string, 0, len(c.GetIncludeAdditionalHeadersInCheck()))
		for k := range c.GetIncludeAdditionalHeadersInCheck() {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			add = append(add, &corev3.HeaderValue{Key: k, Value: c.GetIncludeAdditionalHeadersInCheck()[k]})
		}
		if len(add) > 0 {
			svc.AuthorizationRequest = &extauthzv3.AuthorizationRequest{HeadersToAdd: add}
		}
		if len(c.GetHeadersToUpstreamOnAllow())+len(c.GetHeadersToDownstreamOnDeny())+len(c.GetHeadersToDownstreamOnAllow()) > 0 {
			svc.AuthorizationResponse = &extauthzv3.AuthorizationResponse{
				AllowedUpstreamHeaders:        headerList(c.GetHeadersToUpstreamOnAllow()),
				AllowedClientHeaders:          headerList(c.GetHeadersToDownstreamOnDeny()),
				AllowedClientHeadersOnSuccess: headerList(c.GetHeadersToDownstreamOnAllow()),
			}
		}
		out := &extauthzv3.ExtAuthz{
			StatusOnError: st, FailureModeAllow: c.GetFailOpen(), TransportApiVersion: corev3.ApiVersion_V3,
			Services:        &extauthzv3.ExtAuthz_HttpService{HttpService: svc},
			WithRequestBody: body(c.GetIncludeRequestBodyInCheck()),
		}
		allowed := c.GetIncludeRequestHeadersInCheck()
		if len(allowed) == 0 {
			//lint:ignore SA1019 deprecated, still read by Istio when includeRequestHeadersInCheck is unset
			allowed = c.GetIncludeHeadersInCheck()
		}
		if l := headerList(allowed); l != nil {
			out.AllowedHeaders = l
		}
		return out, nil
	case p.GetEnvoyExtAuthzGrpc() != nil:
		c := p.GetEnvoyExtAuthzGrpc()
		host, cl, err := cluster(c.GetService(), c.GetPort())
		if err != nil {
			return nil, err
		}
		st, err := status(c.GetStatusOnError())
		if err != nil {
			return nil, err
		}
		return &extauthzv3.ExtAuthz{
			StatusOnError: st, FailureModeAllow: c.GetFailOpen(), TransportApiVersion: corev3.ApiVersion_V3,
			Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{
				TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cl, Authority: host}},
				Timeout:         timeout(c.GetTimeout()),
			}},
			WithRequestBody: body(c.GetIncludeRequestBodyInCheck()),
		}, nil
	}
	return nil, fmt.Errorf("extension provider %q is not envoyExtAuthzHttp or envoyExtAuthzGrpc", name)
}

// headerList matches header names case-insensitively: "prefix*", "*suffix"
// or exact.
func headerList(headers []string) *matcherv3.ListStringMatcher {
	if len(headers) == 0 {
		return nil
	}
	var ps []*matcherv3.StringMatcher
	for _, h := range headers {
		m := &matcherv3.StringMatcher{IgnoreCase: true}
		if after, ok := strings.CutPrefix(h, "*"); ok {
			m.MatchPattern = &matcherv3.StringMatcher_Suffix{Suffix: after}
		} else if before, ok := strings.CutSuffix(h, "*"); ok {
			m.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: before}
		} else {
			m.MatchPattern = &matcherv3.StringMatcher_Exact{Exact: h}
		}
		ps = append(ps, m)
	}
	return &matcherv3.ListStringMatcher{Patterns: ps}
}
