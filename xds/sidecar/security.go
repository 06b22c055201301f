package sidecar

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	securityv1beta1 "istio.io/api/security/v1beta1"
)

// MTLSMode is the effective PeerAuthentication mode of a workload port.
type MTLSMode = securityv1beta1.PeerAuthentication_MutualTLS_Mode

// Mode returns the effective mTLS mode of a workload port: the last
// PeerAuthentication with a mode other than UNSET, overridden by the port
// level setting of the last policy that names the port; PERMISSIVE when
// nothing is set.
func (sec Security) Mode(port uint32) MTLSMode {
	mode := securityv1beta1.PeerAuthentication_MutualTLS_PERMISSIVE
	var portMode MTLSMode
	for _, pa := range sec.PeerAuthentications {
		if m := pa.GetMtls().GetMode(); m != securityv1beta1.PeerAuthentication_MutualTLS_UNSET {
			mode = m
		}
		if pm, ok := pa.GetPortLevelMtls()[port]; ok && pm.GetMode() != securityv1beta1.PeerAuthentication_MutualTLS_UNSET {
			portMode = pm.GetMode()
		}
	}
	if portMode != securityv1beta1.PeerAuthentication_MutualTLS_UNSET {
		return portMode
	}
	return mode
}

// rbacRules returns the Envoy RBAC rules of the workload's
// AuthorizationPolicies for one port: deny holds the DENY policies, allow
// the ALLOW policies (nil when there is no policy of that action; an ALLOW
// set without matching rules denies everything, as in Istio). AUDIT and
// CUSTOM policies are not enforced here.
//
// For a TCP port (http false) HTTP-only conditions (methods, paths, hosts,
// request headers) cannot be checked: an ALLOW rule using them never
// matches, a DENY rule drops them and so matches more, Istio's rule. The
// same holds for conditions this translation does not support (request
// principals and request.auth claims, which need JWT).
func rbacRules(policies []AuthorizationPolicy, trustDomain string, http bool) (deny, allow *rbacv3.RBAC) {
	for _, ap := range policies {
		var dst **rbacv3.RBAC
		action := rbacv3.RBAC_ALLOW
		switch ap.Spec.GetAction() {
		case securityv1beta1.AuthorizationPolicy_ALLOW:
			dst = &allow
		case securityv1beta1.AuthorizationPolicy_DENY:
			dst, action = &deny, rbacv3.RBAC_DENY
		default:
			continue
		}
		if *dst == nil {
			*dst = &rbacv3.RBAC{Action: action, Policies: map[string]*rbacv3.Policy{}}
		}
		for i, r := range ap.Spec.GetRules() {
			t := &ruleTranslator{td: trustDomain, http: http, deny: action == rbacv3.RBAC_DENY}
			pol := t.rule(r)
			if t.never {
				continue
			}
			(*dst).Policies[fmt.Sprintf("ns[%s]-policy[%s]-rule[%d]", ap.Namespace, ap.Name, i)] = pol
		}
	}
	return deny, allow
}

// ruleTranslator translates one rule. never is set when the rule cannot
// match (ALLOW with a condition it cannot check).
type ruleTranslator struct {
	td    string
	http  bool
	deny  bool
	never bool
}

// unsupported handles a condition that cannot be checked: DENY drops it,
// ALLOW never matches.
func (t *ruleTranslator) unsupported() {
	if !t.deny {
		t.never = true
	}
}

func (t *ruleTranslator) rule(r *securityv1beta1.Rule) *rbacv3.Policy {
	var ids []*rbacv3.Principal
	var perms []*rbacv3.Permission
	if len(r.GetFrom()) > 0 {
		var or []*rbacv3.Principal
		for _, f := range r.GetFrom() {
			or = append(or, andIDs(t.source(f.GetSource())))
		}
		ids = append(ids, orIDs(or))
	}
	if len(r.GetTo()) > 0 {
		var or []*rbacv3.Permission
		for _, to := range r.GetTo() {
			or = append(or, andPerms(t.operation(to.GetOperation())))
		}
		perms = append(perms, orPerms(or))
	}
	for _, c := range r.GetWhen() {
		id, perm := t.condition(c)
		if id != nil {
			ids = append(ids, id)
		}
		if perm != nil {
			perms = append(perms, perm)
		}
	}
	return &rbacv3.Policy{Permissions: []*rbacv3.Permission{andPerms(perms)}, Principals: []*rbacv3.Principal{andIDs(ids)}}
}

// field adds "values ORed" and "NOT(notValues ORed)" to list.
func field[T any](list []T, values, notValues []string, one func(string) T, or func([]T) T, not func(T) T) []T {
	if len(values) > 0 {
		var xs []T
		for _, v := range values {
			xs = append(xs, one(v))
		}
		list = append(list, or(xs))
	}
	if len(notValues) > 0 {
		var xs []T
		for _, v := range notValues {
			xs = append(xs, one(v))
		}
		list = append(list, not(or(xs)))
	}
	return list
}

func (t *ruleTranslator) source(s *securityv1beta1.Source) []*rbacv3.Principal {
	var out []*rbacv3.Principal
	out = field(out, s.GetPrincipals(), s.GetNotPrincipals(), t.principal, orIDs, notID)
	out = field(out, s.GetNamespaces(), s.GetNotNamespaces(), namespaceID, orIDs, notID)
	out = field(out, s.GetServiceAccounts(), s.GetNotServiceAccounts(), serviceAccountID, orIDs, notID)
	out = field(out, s.GetTrustDomains(), s.GetNotTrustDomains(), trustDomainID, orIDs, notID)
	out = field(out, s.GetIpBlocks(), s.GetNotIpBlocks(), directIP, orIDs, notID)
	out = field(out, s.GetRemoteIpBlocks(), s.GetNotRemoteIpBlocks(), remoteIP, orIDs, notID)
	if len(s.GetRequestPrincipals()) > 0 || len(s.GetNotRequestPrincipals()) > 0 {
		t.unsupported()
	}
	return out
}

func (t *ruleTranslator) operation(o *securityv1beta1.Operation) []*rbacv3.Permission {
	var out []*rbacv3.Permission
	if t.http {
		out = field(out, o.GetMethods(), o.GetNotMethods(), func(v string) *rbacv3.Permission { return headerPerm(":method", v) }, orPerms, notPerm)
		out = field(out, o.GetPaths(), o.GetNotPaths(), pathPerm, orPerms, notPerm)
		out = field(out, o.GetHosts(), o.GetNotHosts(), func(v string) *rbacv3.Permission { return headerPerm(":authority", v) }, orPerms, notPerm)
	} else if len(o.GetMethods())+len(o.GetNotMethods())+len(o.GetPaths())+len(o.GetNotPaths())+len(o.GetHosts())+len(o.GetNotHosts()) > 0 {
		t.unsupported()
	}
	out = field(out, o.GetPorts(), o.GetNotPorts(), portPerm, orPerms, notPerm)
	return out
}

// condition translates a "when" condition into a principal (source.*) or
// a permission (request.*, destination.*, connection.*).
func (t *ruleTranslator) condition(c *securityv1beta1.Condition) (*rbacv3.Principal, *rbacv3.Permission) {
	key := c.GetKey()
	idField := func(one func(string) *rbacv3.Principal) *rbacv3.Principal {
		return andIDs(field(nil, c.GetValues(), c.GetNotValues(), one, orIDs, notID))
	}
	permField := func(one func(string) *rbacv3.Permission) *rbacv3.Permission {
		return andPerms(field(nil, c.GetValues(), c.GetNotValues(), one, orPerms, notPerm))
	}
	switch {
	case key == "source.ip":
		return idField(directIP), nil
	case key == "remote.ip":
		return idField(remoteIP), nil
	case key == "source.namespace":
		return idField(namespaceID), nil
	case key == "source.principal":
		return idField(t.principal), nil
	case key == "source.serviceAccount":
		return idField(serviceAccountID), nil
	case key == "destination.port":
		return nil, permField(portPerm)
	case key == "destination.ip":
		return nil, permField(func(v string) *rbacv3.Permission {
			return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationIp{DestinationIp: cidr(v)}}
		})
	case key == "connection.sni":
		return nil, permField(func(v string) *rbacv3.Permission {
			return &rbacv3.Permission{Rule: &rbacv3.Permission_RequestedServerName{RequestedServerName: istioMatch(v)}}
		})
	case strings.HasPrefix(key, "request.headers[") && strings.HasSuffix(key, "]"):
		if !t.http {
			t.unsupported()
			return nil, nil
		}
		name := strings.ToLower(key[len("request.headers[") : len(key)-1])
		return nil, permField(func(v string) *rbacv3.Permission { return headerPerm(name, v) })
	}
	t.unsupported()
	return nil, nil
}

// istioMatch reads Istio's value syntax: "*" any non-empty value, "x*"
// prefix, "*x" suffix, else exact.
func istioMatch(v string) *matcherv3.StringMatcher {
	switch {
	case v == "*":
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".+"}}}
	case strings.HasSuffix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(v, "*")}}
	case strings.HasPrefix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: strings.TrimPrefix(v, "*")}}
	}
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}
}

func authenticated(m *matcherv3.StringMatcher) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: m}}}
}

func regexID(re string) *rbacv3.Principal {
	return authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}})
}

// principal matches a peer identity written without "spiffe://", e.g.
// "cluster.local/ns/default/sa/sleep".
func (t *ruleTranslator) principal(v string) *rbacv3.Principal {
	switch {
	case v == "*":
		return regexID(".+")
	case strings.HasSuffix(v, "*"):
		return authenticated(istioMatch("spiffe://" + v))
	case strings.HasPrefix(v, "*"):
		return authenticated(istioMatch(v))
	}
	return authenticated(istioMatch("spiffe://" + v))
}

// wildRegex quotes v, "*" matching any run of non-slash characters.
func wildRegex(v string) string {
	return strings.ReplaceAll(regexp.QuoteMeta(v), `\*`, `[^/]*`)
}

func namespaceID(v string) *rbacv3.Principal {
	return regexID(`spiffe://[^/]+/ns/` + wildRegex(v) + `/.*`)
}

func serviceAccountID(v string) *rbacv3.Principal {
	ns, sa, ok := strings.Cut(v, "/")
	if !ok {
		return regexID(`spiffe://[^/]+/ns/[^/]+/sa/` + wildRegex(v))
	}
	return regexID(`spiffe://[^/]+/ns/` + wildRegex(ns) + `/sa/` + wildRegex(sa))
}

func trustDomainID(v string) *rbacv3.Principal {
	return regexID(`spiffe://` + wildRegex(v) + `/.*`)
}

func directIP(v string) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_DirectRemoteIp{DirectRemoteIp: cidr(v)}}
}

func remoteIP(v string) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_RemoteIp{RemoteIp: cidr(v)}}
}

// cidr parses "a.b.c.d" or "a.b.c.d/n"; an unparsable value matches
// nothing useful but stays valid (0.0.0.0/32).
func cidr(v string) *corev3.CidrRange {
	if pfx, err := netip.ParsePrefix(v); err == nil {
		return &corev3.CidrRange{AddressPrefix: pfx.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(pfx.Bits()))}
	}
	if a, err := netip.ParseAddr(v); err == nil {
		return &corev3.CidrRange{AddressPrefix: a.String(), PrefixLen: wrapperspb.UInt32(uint32(a.BitLen()))}
	}
	return &corev3.CidrRange{AddressPrefix: "0.0.0.0", PrefixLen: wrapperspb.UInt32(32)}
}

func headerPerm(name, v string) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{
		Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: istioMatch(v)},
	}}}
}

func pathPerm(v string) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
		Rule: &matcherv3.PathMatcher_Path{Path: istioMatch(v)},
	}}}
}

func portPerm(v string) *rbacv3.Permission {
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil {
		return notPerm(&rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}) // a bad port matches nothing
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: uint32(n)}}
}

func andIDs(xs []*rbacv3.Principal) *rbacv3.Principal {
	switch len(xs) {
	case 0:
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
	case 1:
		return xs[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: xs}}}
}

func orIDs(xs []*rbacv3.Principal) *rbacv3.Principal {
	if len(xs) == 1 {
		return xs[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: xs}}}
}

func notID(x *rbacv3.Principal) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: x}}
}

func andPerms(xs []*rbacv3.Permission) *rbacv3.Permission {
	switch len(xs) {
	case 0:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
	case 1:
		return xs[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: xs}}}
}

func orPerms(xs []*rbacv3.Permission) *rbacv3.Permission {
	if len(xs) == 1 {
		return xs[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: xs}}}
}

func notPerm(x *rbacv3.Permission) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: x}}
}
