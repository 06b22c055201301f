package filestore

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

func validatePeerAuthentication(v *validator, pa *security.PeerAuthentication) {
	if (pa.Selector == nil || len(pa.Selector.MatchLabels) == 0) && len(pa.PortLevelMtls) > 0 {
		v.add("portLevelMtls", "portLevelMtls needs a workload selector (mesh and namespace policies cannot have it)")
	}
	if pa.PortLevelMtls != nil && len(pa.PortLevelMtls) == 0 {
		v.add("portLevelMtls", "portLevelMtls, when given, needs at least one port")
	}
	for port := range pa.PortLevelMtls {
		v.check(fmt.Sprintf("portLevelMtls.%d", port), checkIstioPort(int64(port)))
	}
	if pa.Selector != nil {
		checkSelectorLabels(v, "selector.matchLabels", pa.Selector.MatchLabels)
	}
}

// validateAuthorizationPolicy applies Istio's rules, and two of vmesh's own
// where its translation would otherwise refuse the whole listener: a
// source.serviceAccount condition value must name its namespace, and ports
// must be 1-65535 (a serviceAccounts entry may use Istio's short form, the
// policy's namespace).
//
// Accepted, and enforced as the model says (model.AuthorizationPolicy):
// AUDIT (no effect: vmesh writes no audit log), CUSTOM (what its rules match
// is denied, as no external authorizer is asked: fail closed), dry runs
// (shadow rules). Accepted but not (fully) enforced, and failing closed in
// xds (an ALLOW rule using them is dropped, a DENY rule ignores them):
// requestPrincipals, and request.auth.*, source.trustDomain and
// experimental.* conditions. Each is a warning (warnings.go).
func validateAuthorizationPolicy(v *validator, ap *security.AuthorizationPolicy) {
	checkPolicyTarget(v, ap.Selector, ap.TargetRef, ap.TargetRefs)
	if ap.Action == security.AuthorizationPolicy_CUSTOM {
		validateCustomPolicy(v, ap)
	}
	if ap.GetProvider() != nil && ap.Action != security.AuthorizationPolicy_CUSTOM {
		v.add("provider", "provider is only allowed with action CUSTOM")
	}
	if ap.Action == security.AuthorizationPolicy_DENY && ap.Rules == nil {
		v.add("rules", "a DENY policy without rules never applies; add an empty rule {} to deny every request")
	}
	for i, r := range ap.Rules {
		path := at("rules", i)
		if r == nil {
			v.add(path, "a rule must not be null")
			continue
		}
		for j, f := range r.From {
			fp := at(path+".from", j) + ".source"
			s := f.GetSource()
			if s == nil {
				v.add(fp, "source is required")
				continue
			}
			validateSource(v, fp, s)
		}
		for j, t := range r.To {
			tp := at(path+".to", j) + ".operation"
			op := t.GetOperation()
			if op == nil {
				v.add(tp, "operation is required")
				continue
			}
			validateOperation(v, tp, op)
		}
		for j, c := range r.When {
			cp := at(path+".when", j)
			if c == nil {
				v.add(cp, "a condition must not be null")
				continue
			}
			switch {
			case c.Key == "":
				v.add(cp+".key", "key is required")
			case len(c.Values)+len(c.NotValues) == 0:
				v.add(cp+".values", "values or notValues is required")
			default:
				checkCondition(v, cp, c)
			}
		}
	}
}

// checkPolicyTarget applies Istio's rules on what a policy selects: one of
// a workload selector, targetRef and targetRefs, each valid.
func checkPolicyTarget(v *validator, selector *typev1beta1.WorkloadSelector, targetRef *typev1beta1.PolicyTargetReference, targetRefs []*typev1beta1.PolicyTargetReference) {
	set := 0
	for _, s := range []bool{selector != nil, targetRef != nil, len(targetRefs) > 0} {
		if s {
			set++
		}
	}
	if set > 1 {
		v.add("selector", "only one of selector, targetRef and targetRefs can be set")
	}
	if selector != nil {
		checkSelectorLabels(v, "selector.matchLabels", selector.MatchLabels)
	}
	if targetRef != nil {
		checkTargetRef(v, "targetRef", targetRef.Group, targetRef.Kind, targetRef.Name, targetRef.Namespace)
	}
	for i, r := range targetRefs {
		checkTargetRef(v, at("targetRefs", i), r.GetGroup(), r.GetKind(), r.GetName(), r.GetNamespace())
	}
}

var targetRefKinds = []string{"/Service", "networking.istio.io/ServiceEntry", "gateway.networking.k8s.io/Gateway", "gateway.networking.k8s.io/GatewayClass"}

func checkTargetRef(v *validator, path, group, kind, name, namespace string) {
	if name == "" {
		v.add(path+".name", "name is required")
	}
	if namespace != "" {
		v.add(path+".namespace", "namespace must not be set: cross-namespace references are not supported")
	}
	if group == "core" {
		group = "" // the core API group, as Service's
	}
	ok := slices.Contains(targetRefKinds, group+"/"+kind)
	if !ok {
		v.add(path, "targetRef must be a Service, ServiceEntry, Gateway or GatewayClass, not %s", quote(group+"/"+kind))
	}
}

func validateSource(v *validator, fp string, s *security.Source) {
	if len(s.Principals)+len(s.NotPrincipals)+len(s.Namespaces)+len(s.NotNamespaces) > 0 && len(s.ServiceAccounts)+len(s.NotServiceAccounts) > 0 {
		v.add(fp+".serviceAccounts", "serviceAccounts cannot be combined with principals or namespaces")
	}
	if len(s.Principals)+len(s.NotPrincipals)+len(s.Namespaces)+len(s.NotNamespaces)+len(s.IpBlocks)+
		len(s.NotIpBlocks)+len(s.RequestPrincipals)+len(s.NotRequestPrincipals)+len(s.RemoteIpBlocks)+len(s.NotRemoteIpBlocks)+
		len(s.ServiceAccounts)+len(s.NotServiceAccounts)+len(s.TrustDomains)+len(s.NotTrustDomains) == 0 {
		v.add(fp, "source must set at least one field")
	}
	for _, f := range []struct {
		name   string
		values []string
		check  func(string) string
	}{
		{"ipBlocks", s.IpBlocks, checkIPOrRange}, {"notIpBlocks", s.NotIpBlocks, checkIPOrRange},
		{"remoteIpBlocks", s.RemoteIpBlocks, checkIPOrRange}, {"notRemoteIpBlocks", s.NotRemoteIpBlocks, checkIPOrRange},
		{"principals", s.Principals, nil}, {"notPrincipals", s.NotPrincipals, nil},
		{"requestPrincipals", s.RequestPrincipals, nil}, {"notRequestPrincipals", s.NotRequestPrincipals, nil},
		{"namespaces", s.Namespaces, nil}, {"notNamespaces", s.NotNamespaces, nil},
		{"serviceAccounts", s.ServiceAccounts, checkServiceAccount}, {"notServiceAccounts", s.NotServiceAccounts, checkServiceAccount},
		{"trustDomains", s.TrustDomains, checkTrustDomain}, {"notTrustDomains", s.NotTrustDomains, checkTrustDomain},
	} {
		eachValue(v, fp+"."+f.name, f.values, f.check)
	}
	for _, f := range []struct {
		name   string
		values []string
	}{{"serviceAccounts", s.ServiceAccounts}, {"notServiceAccounts", s.NotServiceAccounts}} {
		if len(f.values) > 16 {
			v.add(fp+"."+f.name, "at most 16 service accounts are allowed")
		}
	}
}

func validateOperation(v *validator, tp string, op *security.Operation) {
	if len(op.Hosts)+len(op.NotHosts)+len(op.Ports)+len(op.NotPorts)+len(op.Methods)+len(op.NotMethods)+
		len(op.Paths)+len(op.NotPaths) == 0 {
		v.add(tp, "operation must set at least one field")
	}
	for _, f := range []struct {
		name   string
		values []string
		check  func(string) string
	}{
		{"ports", op.Ports, checkAuthzPort}, {"notPorts", op.NotPorts, checkAuthzPort},
		{"methods", op.Methods, nil}, {"notMethods", op.NotMethods, nil},
		{"paths", op.Paths, checkPathTemplate}, {"notPaths", op.NotPaths, checkPathTemplate},
		{"hosts", op.Hosts, nil}, {"notHosts", op.NotHosts, nil},
	} {
		eachValue(v, tp+"."+f.name, f.values, f.check)
	}
}

// eachValue reports an empty value, or what check finds, at its index.
func eachValue(v *validator, path string, values []string, check func(string) string) {
	for i, s := range values {
		switch {
		case s == "":
			v.add(at(path, i), "empty values are not allowed")
		case check != nil:
			v.check(at(path, i), check(s))
		}
	}
}

// checkQualifiedServiceAccounts is vmesh's rule beyond Istio's for the
// source.serviceAccount condition: its values must be <namespace>/<name>.
func checkQualifiedServiceAccounts(v *validator, path string, values []string) {
	for i, s := range values {
		if s != "" && !strings.Contains(s, "/") {
			v.add(at(path, i), "service account %s must be <namespace>/<name> (the source.serviceAccount condition has no short form in vmesh)", quote(s))
		}
	}
}

func checkIPOrRange(s string) string {
	if strings.Contains(s, "/") {
		if _, err := netip.ParsePrefix(s); err != nil {
			return fmt.Sprintf("%s is not a CIDR range", quote(s))
		}
	} else if !isIP(s) {
		return fmt.Sprintf("%s is not an IP address", quote(s))
	}
	return ""
}

// checkAuthzPort: Istio allows a number in 0-65535; vmesh refuses 0, which
// matches nothing and which xds/security cannot translate.
func checkAuthzPort(s string) string {
	p, err := strconv.ParseUint(s, 10, 32)
	switch {
	case err != nil || p > 65535:
		return fmt.Sprintf("port %s is not a number", quote(s))
	case p == 0:
		return "port 0 matches nothing (vmesh refuses it)"
	}
	return ""
}

// checkServiceAccount: "name" (the policy's namespace) or
// "namespace/name", without wildcards, at most 320 characters.
func checkServiceAccount(s string) string {
	ns, name, hasNS := strings.Cut(s, "/")
	switch {
	case strings.Contains(s, "*"):
		return fmt.Sprintf("service account %s: wildcards are not allowed", quote(s))
	case strings.Count(s, "/") > 1, hasNS && (ns == "" || name == ""):
		return fmt.Sprintf("service account %s must be <name> or <namespace>/<name>", quote(s))
	case len(s) > 320:
		return fmt.Sprintf("service account %s is longer than 320 characters", quote(s))
	}
	return ""
}

// checkWildcard: at most one '*', at the start or the end.
func checkWildcard(s string) string {
	n := strings.Count(s, "*")
	if n > 1 || (n == 1 && s != "*" && !strings.HasPrefix(s, "*") && !strings.HasSuffix(s, "*")) {
		return fmt.Sprintf("%s: at most one wildcard, at the start or the end", quote(s))
	}
	return ""
}

func checkTrustDomain(s string) string {
	if msg := checkWildcard(s); msg != "" {
		return msg
	}
	if strings.Contains(s, "/") {
		return fmt.Sprintf("trust domain %s must not contain '/'", quote(s))
	}
	return ""
}

var pathLiteralRE = regexp.MustCompile(`^[a-zA-Z0-9-._~%!$&'()+,;:@=]+$`)

// checkPathTemplate: {*} matches one segment, {**} the rest (last only);
// other braces are not allowed, and a templated path's segments are
// literals.
func checkPathTemplate(p string) string {
	templated := strings.Contains(p, "{*}") || strings.Contains(p, "{**}")
	anySeen := false
	for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
		switch {
		case (seg == "{*}" || seg == "{**}") && anySeen:
			return fmt.Sprintf("path %s: {**} must be the last operator", quote(p))
		case seg == "{*}":
		case seg == "{**}":
			anySeen = true
		case strings.ContainsAny(seg, "{}"):
			return fmt.Sprintf("path %s: '{' or '}' outside a {*} or {**} template", quote(p))
		case templated && !pathLiteralRE.MatchString(seg):
			return fmt.Sprintf("path %s: segment %s is not a valid literal", quote(p), quote(seg))
		}
	}
	return ""
}

// checkCondition is Istio's rule for a `when` key and its values.
func checkCondition(v *validator, cp string, c *security.Condition) {
	key := c.Key
	var check func(string) string
	switch {
	case strings.HasPrefix(key, "request.headers"), strings.HasPrefix(key, "request.auth.claims"), strings.HasPrefix(key, "experimental.envoy.filters."):
		open := strings.Index(key, "[")
		if !strings.HasSuffix(key, "]") || open <= 0 || open >= len(key)-2 {
			v.add(cp+".key", "key %s must have the form a[b]", quote(key))
		}
	case key == "source.ip", key == "remote.ip", key == "destination.ip":
		check = checkIPOrRange
	case key == "source.serviceAccount":
		check = checkServiceAccount
		checkQualifiedServiceAccounts(v, cp+".values", c.Values)
		checkQualifiedServiceAccounts(v, cp+".notValues", c.NotValues)
	case key == "source.trustDomain":
		check = checkWildcard
	case key == "destination.port":
		check = checkAuthzPort
	case key == "source.namespace", key == "source.principal", key == "request.auth.principal", key == "request.auth.audiences",
		key == "request.auth.presenter", key == "connection.sni":
	case key == "destination.namespace":
		v.add(cp+".key", "destination.namespace is replaced by the policy's namespace")
	case strings.HasPrefix(key, "destination.labels"):
		v.add(cp+".key", "destination.labels is replaced by the workload selector")
	case key == "destination.name", key == "destination.user":
		v.add(cp+".key", "%s is only supported in v1alpha1", key)
	default:
		v.add(cp+".key", "unknown condition key %s", quote(key))
	}
	eachValue(v, cp+".values", c.Values, check)
	eachValue(v, cp+".notValues", c.NotValues, check)
}

// validateCustomPolicy: a CUSTOM policy needs rules and a provider name, and
// its rules may not match on the peer's identity or a request's JWT, which
// Istio checks before the external authorizer is asked.
func validateCustomPolicy(v *validator, ap *security.AuthorizationPolicy) {
	if ap.Rules == nil {
		v.add("rules", "CUSTOM action without rules never applies; add an empty rule {} to send every request to the provider")
	} else if ap.GetProvider().GetName() == "" {
		v.add("provider.name", "must not be empty")
	}
	for i, r := range ap.GetRules() {
		for j, f := range r.GetFrom() {
			src := f.GetSource()
			fp := fmt.Sprintf("rules[%d].from[%d].source", i, j)
			for _, c := range []struct {
				name string
				n    int
			}{
				{"namespaces", len(src.GetNamespaces())}, {"notNamespaces", len(src.GetNotNamespaces())},
				{"serviceAccounts", len(src.GetServiceAccounts())}, {"notServiceAccounts", len(src.GetNotServiceAccounts())},
				{"trustDomains", len(src.GetTrustDomains())}, {"notTrustDomains", len(src.GetNotTrustDomains())},
				{"principals", len(src.GetPrincipals())}, {"notPrincipals", len(src.GetNotPrincipals())},
				{"requestPrincipals", len(src.GetRequestPrincipals())}, {"notRequestPrincipals", len(src.GetNotRequestPrincipals())},
			} {
				if c.n > 0 {
					v.add(fp+"."+c.name, "is not supported with action CUSTOM")
				}
			}
		}
		for j, c := range r.GetWhen() {
			switch k := c.GetKey(); {
			case k == "source.namespace", k == "source.serviceAccount", k == "source.trustDomain", k == "source.principal", strings.HasPrefix(k, "request.auth."):
				v.add(fmt.Sprintf("rules[%d].when[%d].key", i, j), "%s is not supported with action CUSTOM", k)
			}
		}
	}
}
