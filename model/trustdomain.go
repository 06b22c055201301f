package model

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
)

// trustDomainBundle is Istio's trust domain bundle (trustdomain.NewBundle):
// the mesh's trust domain, then its aliases.
func (m Mesh) trustDomainBundle() []string {
	out := []string{m.TrustDomain}
	for _, td := range strings.Split(m.TrustDomainAliases, ",") {
		if td != "" {
			out = append(out, td)
		}
	}
	return out
}

// migrateTrustDomain returns an AuthorizationPolicy's rules as Istio's
// authorization applies them (Model.MigrateTrustDomain): each principal
// "TD/ns/NS/sa/SA" (source principals and notPrincipals, when
// source.principal values and notValues) whose trust domain is the mesh's,
// one of its aliases, or cluster.local (which stands for the local trust
// domain) becomes one principal per trust domain of the mesh, and a
// trustDomains value (source trustDomains and notTrustDomains, when
// source.trustDomain) naming one of them becomes all of them. So a policy
// written for cluster.local applies under --trust-domain, and one naming
// an old trust domain keeps matching after a migration. rules is not
// modified: a rule that changes is a copy.
func (m Mesh) migrateTrustDomain(rules []*security.Rule) []*security.Rule {
	tds := m.trustDomainBundle()
	out, copied := rules, false
	for i, r := range rules {
		nr := proto.Clone(r).(*security.Rule)
		for _, f := range nr.GetFrom() {
			s := f.GetSource()
			if s == nil {
				continue
			}
			s.Principals, s.NotPrincipals = replaceTrustDomains(s.Principals, tds), replaceTrustDomains(s.NotPrincipals, tds)
			s.TrustDomains, s.NotTrustDomains = expandTrustDomains(s.TrustDomains, tds), expandTrustDomains(s.NotTrustDomains, tds)
		}
		for _, c := range nr.GetWhen() {
			switch c.GetKey() {
			case "source.principal":
				c.Values, c.NotValues = replaceTrustDomains(c.Values, tds), replaceTrustDomains(c.NotValues, tds)
			case "source.trustDomain":
				c.Values, c.NotValues = expandTrustDomains(c.Values, tds), expandTrustDomains(c.NotValues, tds)
			}
		}
		if proto.Equal(nr, r) {
			continue
		}
		if !copied {
			out, copied = slices.Clone(rules), true
		}
		out[i] = nr
	}
	return out
}

// replaceTrustDomains is Istio's Bundle.ReplaceTrustDomainAliases.
func replaceTrustDomains(principals, tds []string) []string {
	if len(principals) == 0 {
		return principals
	}
	var out []string
	for _, p := range principals {
		parts := strings.Split(p, "/")
		if len(parts) != 5 || parts[0] == "*" || !(trustDomainListed(parts[0], tds) || parts[0] == "cluster.local") {
			out = append(out, p)
			continue
		}
		var each []string
		for _, td := range tds {
			np := p
			if !suffixPattern(td, parts[0]) { // a "*suffix" principal matching td stays as it is
				np = td + "/" + strings.Join(parts[1:], "/")
			}
			if !slices.Contains(each, np) {
				each = append(each, np)
			}
		}
		out = append(out, each...)
	}
	return out
}

// expandTrustDomains is Istio's Bundle.ExpandTrustDomainAliases.
func expandTrustDomains(values, tds []string) []string {
	if len(values) == 0 {
		return values
	}
	var out []string
	for _, v := range values {
		add := []string{v}
		if slices.Contains(tds, v) {
			add = tds
		}
		for _, a := range add {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// trustDomainListed is Istio's trustdomain stringMatch: a equals one of
// list, or one is a "prefix*" or "*suffix" pattern matching the other.
func trustDomainListed(a string, list []string) bool {
	for _, s := range list {
		if a == s || s == "*" || prefixPattern(a, s) || prefixPattern(s, a) || suffixPattern(a, s) || suffixPattern(s, a) {
			return true
		}
	}
	return false
}

// prefixPattern reports whether pattern is "prefix*" and a starts with
// prefix.
func prefixPattern(a, pattern string) bool {
	p, ok := strings.CutSuffix(pattern, "*")
	return ok && strings.HasPrefix(a, p)
}

// suffixPattern reports whether pattern is "*suffix" and a ends with
// suffix.
func suffixPattern(a, pattern string) bool {
	p, ok := strings.CutPrefix(pattern, "*")
	return ok && strings.HasSuffix(a, p)
}
