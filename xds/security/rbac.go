package security

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/vmesh/vmesh/xds/translate"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"
)

// RBAC filter names. HTTP filter names are unique per HttpConnectionManager,
// as grpc-go requires; Envoy's network RBAC filters share one name.
const (
	DenyFilterName    = "envoy.filters.http.rbac.deny"
	AllowFilterName   = "envoy.filters.http.rbac.allow"
	NetworkFilterName = "envoy.filters.network.rbac"
)

// Protocol is what a server port speaks, which decides the request fields
// an RBAC filter can see.
type Protocol int

// Protocols.
const (
	// HTTP ports (HTTP, HTTP2, gRPC) get HTTP RBAC filters that see every
	// field.
	HTTP Protocol = iota
	// TCP ports get network RBAC filters, which see connections, not
	// requests: hosts, methods, paths and request headers cannot be checked.
	TCP
)

// Rules translates the AuthorizationPolicies that apply to a workload (those
// model.Snapshot.AuthorizationPoliciesFor returns) into Envoy RBAC rules, in
// Istio's way: deny holds the rules of DENY policies (nil when there is
// none: a request matching any DENY rule is refused), allow the rules of
// ALLOW policies (nil when no ALLOW policy applies; otherwise a request must
// match one of its rules, so ALLOW policies without usable rules allow
// nothing). No policy, no rules: everything is allowed.
//
// Each rule becomes one RBAC policy named "ns[NS]-policy[NAME]-rule[I]" laid
// out as Istio's authz builder does: one permission per `to` operation
// (its fields AND every destination condition) and one principal per
// `from` source (its fields AND every source condition); Envoy ORs each
// list. A rule
// using fields that cannot be checked (model.UnsupportedRuleFields, and on a
// TCP port hosts, methods, paths and request headers) is dropped from an
// ALLOW policy (it would allow too much) and has those fields ignored in a
// DENY policy (it denies more, never less). A value that cannot be
// translated (e.g. a serviceAccounts entry that is not <namespace>/<name>)
// is an error: the caller fails closed.
//
// Dry-run policies are left out (rules with ruleOptions.dryRun has them), AUDIT policies too
// (they only log), and CUSTOM policies count as DENY (model.AuthorizationPolicy).
func Rules(policies []*model.AuthorizationPolicy, proto Protocol) (deny, allow *rbacconfigv3.RBAC, err error) {
	return rules(policies, proto, ruleOptions{})
}

// ruleOptions say what a proxy can enforce beyond the common rules.
type ruleOptions struct {
	// dryRun selects the dry-run policies (shadow rules) instead of the
	// enforced ones.
	dryRun bool
	// jwt: the HTTP filter chain has Envoy's jwt_authn filter, so
	// requestPrincipals and request.auth.* become metadata matchers.
	jwt bool
	// askProvider reports the CUSTOM policies an ext_authz filter enforces:
	// they are left out of the DENY rules. nil: none (every CUSTOM policy
	// denies what it matches).
	askProvider func(*model.AuthorizationPolicy) bool
}

func rules(policies []*model.AuthorizationPolicy, proto Protocol, o ruleOptions) (deny, allow *rbacconfigv3.RBAC, err error) {
	denyPolicies := map[string]*rbacconfigv3.Policy{}
	anyAllow := false
	allowPolicies := map[string]*rbacconfigv3.Policy{}
	for _, p := range policies {
		if p.DryRun != o.dryRun || p.Action == security.AuthorizationPolicy_AUDIT {
			continue
		}
		if p.Action == security.AuthorizationPolicy_CUSTOM && o.askProvider != nil && o.askProvider(p) {
			continue
		}
		isDeny := p.Action == security.AuthorizationPolicy_DENY || p.Action == security.AuthorizationPolicy_CUSTOM
		anyAllow = anyAllow || !isDeny
		prefix, suffix := "", ""
		if p.Action == security.AuthorizationPolicy_CUSTOM {
			prefix, suffix = customPrefix(p.Provider), badCustomSuffix
		}
		pols, err := policyRules(p, proto, o.jwt && proto == HTTP, !isDeny)
		if err != nil {
			return nil, nil, err
		}
		for name, pol := range pols {
			if isDeny {
				denyPolicies[prefix+name+suffix] = pol
			} else {
				allowPolicies[name] = pol
			}
		}
	}
	if len(denyPolicies) > 0 {
		deny = &rbacconfigv3.RBAC{Action: rbacconfigv3.RBAC_DENY, Policies: denyPolicies}
	}
	if anyAllow {
		allow = &rbacconfigv3.RBAC{Action: rbacconfigv3.RBAC_ALLOW, Policies: allowPolicies}
	}
	return deny, allow, nil
}

// badCustomSuffix marks the DENY rules of a CUSTOM policy whose provider
// cannot be asked (Istio's suffix).
const badCustomSuffix = "-deny-due-to-bad-CUSTOM-action"

// customPrefix starts the rule names of a CUSTOM policy, as Istio names
// them: istio-ext-authz-<provider>-.
func customPrefix(provider string) string {
	if provider == "" {
		return extAuthzPrefix + "-"
	}
	return extAuthzPrefix + "-" + provider + "-"
}

// policyRules translates the rules of one policy into RBAC policies named
// "ns[NS]-policy[NAME]-rule[I]". strict (ALLOW): a rule with a field the
// proxy cannot check is dropped; otherwise the field is ignored.
func policyRules(p *model.AuthorizationPolicy, proto Protocol, jwt, strict bool) (map[string]*rbacconfigv3.Policy, error) {
	out := map[string]*rbacconfigv3.Policy{}
	for i, r := range p.Rules {
		if strict && len(model.UnsupportedRuleFieldsFor(r, jwt)) > 0 {
			continue
		}
		if proto == TCP {
			var hadHTTP bool
			if r, hadHTTP = withoutHTTPFields(r); hadHTTP && strict {
				continue
			}
		}
		pol, err := rulePolicy(r, p.Namespace, jwt)
		if err != nil {
			return nil, fmt.Errorf("AuthorizationPolicy %s rules[%d]: %w", p.Key(), i, err)
		}
		out[fmt.Sprintf("ns[%s]-policy[%s]-rule[%d]", p.Namespace, p.Name, i)] = pol
	}
	return out, nil
}

// withoutHTTPFields returns r without the fields only an HTTP request has
// (operation hosts, methods and paths; request.headers conditions), and
// whether it had any. r itself is not modified.
func withoutHTTPFields(r *security.Rule) (*security.Rule, bool) {
	had := false
	for _, t := range r.GetTo() {
		op := t.GetOperation()
		had = had || len(op.GetHosts())+len(op.GetNotHosts())+len(op.GetMethods())+len(op.GetNotMethods())+len(op.GetPaths())+len(op.GetNotPaths()) > 0
	}
	for _, c := range r.GetWhen() {
		had = had || strings.HasPrefix(c.GetKey(), "request.headers[")
	}
	if !had {
		return r, false
	}
	out := &security.Rule{From: r.GetFrom()}
	for _, t := range r.GetTo() {
		op := t.GetOperation()
		out.To = append(out.To, &security.Rule_To{Operation: &security.Operation{Ports: op.GetPorts(), NotPorts: op.GetNotPorts()}})
	}
	for _, c := range r.GetWhen() {
		if !strings.HasPrefix(c.GetKey(), "request.headers[") {
			out.When = append(out.When, c)
		}
	}
	return out, true
}

// RBACFilters returns the HTTP filters that enforce AuthorizationPolicies on
// an HTTP port (see Rules), to go before the router: a DENY filter, then an
// ALLOW filter, each when its rules exist.
//
// Dry-run policies go into the same filters as shadow rules, with Istio's
// stat prefixes istio_dry_run_deny_ and istio_dry_run_allow_; a filter with
// shadow rules only enforces nothing (grpc-go ignores shadow rules).
func RBACFilters(policies []*model.AuthorizationPolicy) ([]*hcmv3.HttpFilter, error) {
	return rbacFilters(policies, ruleOptions{})
}

// rbacFilters is RBACFilters for a proxy that can enforce what o says
// beyond the common rules (o.dryRun is not read: both the enforced and the
// dry-run rules are built).
func rbacFilters(policies []*model.AuthorizationPolicy, o ruleOptions) ([]*hcmv3.HttpFilter, error) {
	o.dryRun = false
	deny, allow, err := rules(policies, HTTP, o)
	if err != nil {
		return nil, err
	}
	o.dryRun = true
	shadowDeny, shadowAllow, err := rules(policies, HTTP, o)
	if err != nil {
		return nil, err
	}
	var out []*hcmv3.HttpFilter
	for _, f := range []struct {
		name          string
		rules, shadow *rbacconfigv3.RBAC
		prefix        string
	}{{DenyFilterName, deny, shadowDeny, dryRunDenyPrefix}, {AllowFilterName, allow, shadowAllow, dryRunAllowPrefix}} {
		if f.rules == nil && f.shadow == nil {
			continue
		}
		cfg := &rbacv3.RBAC{Rules: f.rules}
		if f.shadow != nil {
			cfg.ShadowRules, cfg.ShadowRulesStatPrefix = f.shadow, f.prefix
		}
		out = append(out, rbacHTTP(f.name, cfg))
	}
	return out, nil
}

// Istio's stat prefixes of dry-run (shadow) rules.
const (
	dryRunDenyPrefix  = "istio_dry_run_deny_"
	dryRunAllowPrefix = "istio_dry_run_allow_"
)

// NetworkRBACFilters returns the network filters that enforce
// AuthorizationPolicies on a TCP port (see Rules), to go before the
// tcp_proxy: a DENY filter (stat prefix "deny_"), then an ALLOW filter
// ("allow_"), each when its rules exist.
func NetworkRBACFilters(policies []*model.AuthorizationPolicy) ([]*listenerv3.Filter, error) {
	return networkRBACFilters(policies, nil)
}

// networkRBACFilters is NetworkRBACFilters leaving out the CUSTOM
// policies askProvider says a network ext_authz filter enforces.
func networkRBACFilters(policies []*model.AuthorizationPolicy, askProvider func(*model.AuthorizationPolicy) bool) ([]*listenerv3.Filter, error) {
	deny, allow, err := rules(policies, TCP, ruleOptions{askProvider: askProvider})
	if err != nil {
		return nil, err
	}
	shadowDeny, shadowAllow, err := rules(policies, TCP, ruleOptions{dryRun: true, askProvider: askProvider})
	if err != nil {
		return nil, err
	}
	var out []*listenerv3.Filter
	for _, f := range []struct {
		prefix        string
		rules, shadow *rbacconfigv3.RBAC
		shadowPrefix  string
	}{{"deny_", deny, shadowDeny, dryRunDenyPrefix}, {"allow_", allow, shadowAllow, dryRunAllowPrefix}} {
		if f.rules == nil && f.shadow == nil {
			continue
		}
		cfg := &rbacnetv3.RBAC{Rules: f.rules, StatPrefix: f.prefix}
		if f.shadow != nil {
			cfg.ShadowRules, cfg.ShadowRulesStatPrefix = f.shadow, f.shadowPrefix
		}
		out = append(out, &listenerv3.Filter{Name: NetworkFilterName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: translate.MustAny(cfg)}})
	}
	return out, nil
}

// rulePolicy translates one rule of a policy in namespace ns.
func rulePolicy(r *security.Rule, ns string, jwt bool) (*rbacconfigv3.Policy, error) {
	// The conditions first: Istio's layout repeats them in every `from`
	// principal and every `to` permission.
	var condIDs []*rbacconfigv3.Principal
	var condPerms []*rbacconfigv3.Permission
	for _, c := range r.GetWhen() {
		if jwt && model.JWTConditionKey(c.GetKey()) {
			id, err := jwtCondition(c)
			if err != nil {
				return nil, err
			}
			condIDs = append(condIDs, id)
			continue
		}
		if !model.SupportedConditionKey(c.GetKey()) {
			continue // DENY only: ALLOW rules with these were dropped
		}
		id, perm, err := condition(c)
		if err != nil {
			return nil, err
		}
		if id != nil {
			condIDs = append(condIDs, id)
		}
		if perm != nil {
			condPerms = append(condPerms, perm)
		}
	}
	pol := &rbacconfigv3.Policy{}
	for _, f := range r.GetFrom() {
		p, err := sourcePrincipal(f.GetSource(), ns, jwt)
		if err != nil {
			return nil, err
		}
		pol.Principals = append(pol.Principals, andIDs(append(flatIDs(p), cloneAll(condIDs)...)))
	}
	if len(pol.Principals) == 0 {
		pol.Principals = []*rbacconfigv3.Principal{andIDs(condIDs)}
	}
	for _, t := range r.GetTo() {
		p, err := operationPermission(t.GetOperation())
		if err != nil {
			return nil, err
		}
		pol.Permissions = append(pol.Permissions, andRules(append(flatRules(p), cloneAll(condPerms)...)))
	}
	if len(pol.Permissions) == 0 {
		pol.Permissions = []*rbacconfigv3.Permission{andRules(condPerms)}
	}
	return pol, nil
}

// flatIDs is the parts of an AND, or p alone.
func flatIDs(p *rbacconfigv3.Principal) []*rbacconfigv3.Principal {
	if a := p.GetAndIds(); a != nil {
		return a.GetIds()
	}
	return []*rbacconfigv3.Principal{p}
}

// flatRules is the parts of an AND, or p alone.
func flatRules(p *rbacconfigv3.Permission) []*rbacconfigv3.Permission {
	if a := p.GetAndRules(); a != nil {
		return a.GetRules()
	}
	return []*rbacconfigv3.Permission{p}
}

// cloneAll copies messages placed in several parents.
func cloneAll[T proto.Message](ms []T) []T {
	out := make([]T, len(ms))
	for i, m := range ms {
		out[i] = proto.Clone(m).(T)
	}
	return out
}

// sourcePrincipal ANDs the fields of a source, each an OR of its values;
// ns is the policy's namespace, which a serviceAccounts entry without one
// ("sa", Istio's short form) names.
func sourcePrincipal(s *security.Source, ns string, jwt bool) (*rbacconfigv3.Principal, error) {
	serviceAccount := func(v string) (*rbacconfigv3.Principal, error) {
		if !strings.Contains(v, "/") {
			v = ns + "/" + v
		}
		return serviceAccountID(v)
	}
	var and []*rbacconfigv3.Principal
	add := func(values []string, not bool, one func(string) (*rbacconfigv3.Principal, error)) error {
		if len(values) == 0 {
			return nil
		}
		var ids []*rbacconfigv3.Principal
		for _, v := range values {
			id, err := one(v)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		id := orIDs(ids)
		if not {
			id = &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_NotId{NotId: id}}
		}
		and = append(and, id)
		return nil
	}
	if jwt {
		// First, as in Istio's rule model.
		if v := s.GetRequestPrincipals(); len(v) > 0 {
			and = append(and, requestPrincipalID(v))
		}
		if v := s.GetNotRequestPrincipals(); len(v) > 0 {
			and = append(and, &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_NotId{NotId: requestPrincipalID(v)}})
		}
	}
	for _, f := range []struct {
		values []string
		not    bool
		one    func(string) (*rbacconfigv3.Principal, error)
	}{
		{s.GetPrincipals(), false, principalID},
		{s.GetNotPrincipals(), true, principalID},
		{s.GetNamespaces(), false, namespaceID},
		{s.GetNotNamespaces(), true, namespaceID},
		{s.GetServiceAccounts(), false, serviceAccount},
		{s.GetNotServiceAccounts(), true, serviceAccount},
		{s.GetTrustDomains(), false, trustDomainID},
		{s.GetNotTrustDomains(), true, trustDomainID},
		{s.GetIpBlocks(), false, directRemoteIP},
		{s.GetNotIpBlocks(), true, directRemoteIP},
		{s.GetRemoteIpBlocks(), false, remoteIP},
		{s.GetNotRemoteIpBlocks(), true, remoteIP},
	} {
		if err := add(f.values, f.not, f.one); err != nil {
			return nil, err
		}
	}
	return andIDs(and), nil
}

// operationPermission ANDs the fields of an operation, each an OR of its
// values.
func operationPermission(op *security.Operation) (*rbacconfigv3.Permission, error) {
	var and []*rbacconfigv3.Permission
	add := func(values []string, not bool, one func(string) (*rbacconfigv3.Permission, error)) error {
		if len(values) == 0 {
			return nil
		}
		var rules []*rbacconfigv3.Permission
		for _, v := range values {
			p, err := one(v)
			if err != nil {
				return err
			}
			rules = append(rules, p)
		}
		p := orRules(rules)
		if not {
			p = &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_NotRule{NotRule: p}}
		}
		and = append(and, p)
		return nil
	}
	for _, f := range []struct {
		values []string
		not    bool
		one    func(string) (*rbacconfigv3.Permission, error)
	}{
		{op.GetHosts(), false, hostPermission},
		{op.GetNotHosts(), true, hostPermission},
		{op.GetPorts(), false, portPermission},
		{op.GetNotPorts(), true, portPermission},
		{op.GetMethods(), false, methodPermission},
		{op.GetNotMethods(), true, methodPermission},
		{op.GetPaths(), false, pathPermission},
		{op.GetNotPaths(), true, pathPermission},
	} {
		if err := add(f.values, f.not, f.one); err != nil {
			return nil, err
		}
	}
	return andRules(and), nil
}

// condition maps a `when` condition to a principal (source.*, remote.ip and
// request.headers, as in Istio) or a permission (the rest): (any value) AND NOT
// (any notValue).
func condition(c *security.Condition) (*rbacconfigv3.Principal, *rbacconfigv3.Permission, error) {
	key := c.GetKey()
	var idOf func(string) (*rbacconfigv3.Principal, error)
	var permOf func(string) (*rbacconfigv3.Permission, error)
	switch key {
	case "source.ip":
		idOf = directRemoteIP
	case "remote.ip":
		idOf = remoteIP
	case "source.namespace":
		idOf = namespaceID
	case "source.principal":
		idOf = principalID
	case "source.serviceAccount":
		idOf = serviceAccountID
	case "destination.ip":
		permOf = func(v string) (*rbacconfigv3.Permission, error) {
			cidr, err := cidrRange(v)
			if err != nil {
				return nil, err
			}
			return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_DestinationIp{DestinationIp: cidr}}, nil
		}
	case "destination.port":
		permOf = portPermission
	case "connection.sni":
		permOf = func(v string) (*rbacconfigv3.Permission, error) {
			return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_RequestedServerName{RequestedServerName: stringMatch(v, "", false)}}, nil
		}
	default:
		name, ok := strings.CutPrefix(key, "request.headers[")
		if !ok {
			return nil, nil, fmt.Errorf("unsupported condition key %q", key)
		}
		// A principal, as in Istio; the name lowercased, since grpc-go
		// looks metadata keys up as written (Envoy ignores case).
		name = strings.ToLower(strings.TrimSuffix(name, "]"))
		idOf = func(v string) (*rbacconfigv3.Principal, error) {
			return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_Header{Header: conditionHeader(name, v)}}, nil
		}
	}
	if idOf != nil {
		var and []*rbacconfigv3.Principal
		for i, values := range [][]string{c.GetValues(), c.GetNotValues()} {
			if len(values) == 0 {
				continue
			}
			var ids []*rbacconfigv3.Principal
			for _, v := range values {
				id, err := idOf(v)
				if err != nil {
					return nil, nil, fmt.Errorf("condition %s: %w", key, err)
				}
				ids = append(ids, id)
			}
			id := orIDs(ids)
			if i == 1 {
				id = &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_NotId{NotId: id}}
			}
			and = append(and, id)
		}
		return andIDs(and), nil, nil
	}
	var and []*rbacconfigv3.Permission
	for i, values := range [][]string{c.GetValues(), c.GetNotValues()} {
		if len(values) == 0 {
			continue
		}
		var rules []*rbacconfigv3.Permission
		for _, v := range values {
			p, err := permOf(v)
			if err != nil {
				return nil, nil, fmt.Errorf("condition %s: %w", key, err)
			}
			rules = append(rules, p)
		}
		p := orRules(rules)
		if i == 1 {
			p = &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_NotRule{NotRule: p}}
		}
		and = append(and, p)
	}
	return nil, andRules(and), nil
}

// jwtCondition is the principal of a request.auth.* condition: (any
// value) AND NOT (any notValue).
func jwtCondition(c *security.Condition) (*rbacconfigv3.Principal, error) {
	var and []*rbacconfigv3.Principal
	for i, values := range [][]string{c.GetValues(), c.GetNotValues()} {
		if len(values) == 0 {
			continue
		}
		id, err := jwtConditionID(c.GetKey(), values)
		if err != nil {
			return nil, fmt.Errorf("condition %s: %w", c.GetKey(), err)
		}
		if i == 1 {
			id = &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_NotId{NotId: id}}
		}
		and = append(and, id)
	}
	return andIDs(and), nil
}

// stringMatch maps Istio's value syntax: "*" any non-empty value,
// "prefix*", "*suffix", else exact; prefix is prepended to exact and prefix
// patterns.
func stringMatch(v, prefix string, ignoreCase bool) *matcherv3.StringMatcher {
	switch {
	case v == "*":
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".+"}}}
	case strings.HasPrefix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: v[1:]}, IgnoreCase: ignoreCase}
	case strings.HasSuffix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix + v[:len(v)-1]}, IgnoreCase: ignoreCase}
	}
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: prefix + v}, IgnoreCase: ignoreCase}
}

func regexMatch(re string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}
}

// namePattern turns one Istio name pattern ("*", "prefix*", "*suffix",
// exact) into a regular expression for one path segment.
func namePattern(v string) string {
	switch {
	case v == "*":
		return "[^/]+"
	case strings.HasPrefix(v, "*"):
		return "[^/]*" + regexp.QuoteMeta(v[1:])
	case strings.HasSuffix(v, "*"):
		return regexp.QuoteMeta(v[:len(v)-1]) + "[^/]*"
	}
	return regexp.QuoteMeta(v)
}

func authenticated(m *matcherv3.StringMatcher) *rbacconfigv3.Principal {
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_Authenticated_{Authenticated: &rbacconfigv3.Principal_Authenticated{PrincipalName: m}}}
}

// principalID matches Istio's principal syntax "<trust-domain>/ns/<ns>/sa/<sa>"
// against the peer certificate's SPIFFE ID.
func principalID(v string) (*rbacconfigv3.Principal, error) {
	return authenticated(stringMatch(v, "spiffe://", false)), nil
}

func namespaceID(v string) (*rbacconfigv3.Principal, error) {
	return authenticated(regexMatch("spiffe://[^/]+/ns/" + namePattern(v) + "/sa/[^/]+")), nil
}

// serviceAccountID matches "<ns>/<sa>" in any trust domain.
func serviceAccountID(v string) (*rbacconfigv3.Principal, error) {
	ns, sa, ok := strings.Cut(v, "/")
	if !ok || ns == "" || sa == "" || strings.Contains(sa, "/") {
		return nil, fmt.Errorf("service account %q is not <namespace>/<name>", v)
	}
	return authenticated(regexMatch("spiffe://[^/]+/ns/" + regexp.QuoteMeta(ns) + "/sa/" + regexp.QuoteMeta(sa))), nil
}

func trustDomainID(v string) (*rbacconfigv3.Principal, error) {
	return authenticated(regexMatch("spiffe://" + namePattern(v) + "/.*")), nil
}

func directRemoteIP(v string) (*rbacconfigv3.Principal, error) {
	cidr, err := cidrRange(v)
	if err != nil {
		return nil, err
	}
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_DirectRemoteIp{DirectRemoteIp: cidr}}, nil
}

func remoteIP(v string) (*rbacconfigv3.Principal, error) {
	cidr, err := cidrRange(v)
	if err != nil {
		return nil, err
	}
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_RemoteIp{RemoteIp: cidr}}, nil
}

func cidrRange(v string) (*corev3.CidrRange, error) {
	if !strings.Contains(v, "/") {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP or CIDR", v)
		}
		return &corev3.CidrRange{AddressPrefix: a.String(), PrefixLen: wrapperspb.UInt32(uint32(a.BitLen()))}, nil
	}
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IP or CIDR", v)
	}
	return &corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}, nil
}

// conditionHeader is Istio's request.headers matcher: "*" present,
// "*suffix", "prefix*", else exact.
func conditionHeader(name, v string) *routev3.HeaderMatcher {
	if v == "*" {
		return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
	}
	return headerMatch(name, v, false)
}

func headerMatch(name, v string, ignoreCase bool) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: stringMatch(v, "", ignoreCase)}}
}

// hostPermission matches the :authority with or without a port, ignoring
// case, as Istio does.
func hostPermission(v string) (*rbacconfigv3.Permission, error) {
	exact := &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_Header{Header: headerMatch(":authority", v, true)}}
	if strings.Contains(v, "*") {
		return exact, nil
	}
	withPort := &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_Header{Header: &routev3.HeaderMatcher{
		Name: ":authority", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: v + ":"}, IgnoreCase: true}}}}}
	return orRules([]*rbacconfigv3.Permission{exact, withPort}), nil
}

func portPermission(v string) (*rbacconfigv3.Permission, error) {
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("port %q is not a port number", v)
	}
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_DestinationPort{DestinationPort: uint32(n)}}, nil
}

func methodPermission(v string) (*rbacconfigv3.Permission, error) {
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_Header{Header: headerMatch(":method", v, false)}}, nil
}

// pathPermission matches the request path: for gRPC the full method name,
// "/package.Service/Method".
func pathPermission(v string) (*rbacconfigv3.Permission, error) {
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{Path: stringMatch(v, "", false)}}}}, nil
}

func anyPrincipal() *rbacconfigv3.Principal {
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_Any{Any: true}}
}

func anyPermission() *rbacconfigv3.Permission {
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_Any{Any: true}}
}

// orIDs is any of ids; Any when there are none.
func orIDs(ids []*rbacconfigv3.Principal) *rbacconfigv3.Principal {
	switch len(ids) {
	case 0:
		return anyPrincipal()
	case 1:
		return ids[0]
	}
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_OrIds{OrIds: &rbacconfigv3.Principal_Set{Ids: ids}}}
}

// andIDs is all of ids, dropping Any; Any when nothing is left.
func andIDs(ids []*rbacconfigv3.Principal) *rbacconfigv3.Principal {
	var keep []*rbacconfigv3.Principal
	for _, id := range ids {
		if !id.GetAny() {
			keep = append(keep, id)
		}
	}
	switch len(keep) {
	case 0:
		return anyPrincipal()
	case 1:
		return keep[0]
	}
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_AndIds{AndIds: &rbacconfigv3.Principal_Set{Ids: keep}}}
}

func orRules(rules []*rbacconfigv3.Permission) *rbacconfigv3.Permission {
	switch len(rules) {
	case 0:
		return anyPermission()
	case 1:
		return rules[0]
	}
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_OrRules{OrRules: &rbacconfigv3.Permission_Set{Rules: rules}}}
}

func andRules(rules []*rbacconfigv3.Permission) *rbacconfigv3.Permission {
	var keep []*rbacconfigv3.Permission
	for _, r := range rules {
		if !r.GetAny() {
			keep = append(keep, r)
		}
	}
	switch len(keep) {
	case 0:
		return anyPermission()
	case 1:
		return keep[0]
	}
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_AndRules{AndRules: &rbacconfigv3.Permission_Set{Rules: keep}}}
}
