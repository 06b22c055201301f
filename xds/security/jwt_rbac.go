package security

//lint:file-ignore SA1019 Principal.metadata is what Istio's authz builder generates for JWT claims (Envoy accepts it; sourced_metadata is its successor)

import (
	"fmt"
	"strings"

	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// The RBAC principals of requestPrincipals and request.auth.* read the
// payload jwt_authn stored in dynamic metadata (JWTFilterName, key
// JWTPayloadKey), as Istio's authz builder does when its own istio_authn
// filter is not used: Envoy's standard filters are all vmesh configures.
// A request without a verified token has no such metadata, so a matcher
// on it matches nothing.

// requestPrincipalID matches requestPrincipals values, Istio's
// "<iss>/<sub>" (split at the last "/", since the issuer may be a URL),
// each side exact, "*", prefix* or *suffix, as Istio's
// requestPrincipalGenerator does.
func requestPrincipalID(values []string) *rbacconfigv3.Principal {
	var or []*rbacconfigv3.Principal
	for _, v := range values {
		idx := strings.LastIndex(v, "/")
		found := idx >= 0
		iss, sub := v, ""
		if found {
			iss, sub = v[:idx], v[idx+1:]
		}
		var mIss, mSub *matcherv3.StringMatcher
		switch {
		case v == "*":
			mIss, mSub = matchAnyValue(), matchAnyValue()
		case strings.HasPrefix(v, "*"):
			if found {
				if iss == "*" {
					mIss = matchAnyValue()
				} else {
					mIss = suffixMatch(strings.TrimPrefix(iss, "*"))
				}
				mSub = exactMatch(sub)
			} else {
				mIss, mSub = matchAnyValue(), suffixMatch(strings.TrimPrefix(v, "*"))
			}
		case strings.HasSuffix(v, "*"):
			if found {
				mIss = exactMatch(iss)
				if sub == "*" {
					mSub = matchAnyValue()
				} else {
					mSub = prefixMatch(strings.TrimSuffix(sub, "*"))
				}
			} else {
				mIss, mSub = prefixMatch(strings.TrimSuffix(v, "*")), matchAnyValue()
			}
		default:
			mIss, mSub = exactMatch(iss), exactMatch(sub)
		}
		or = append(or, &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_AndIds{AndIds: &rbacconfigv3.Principal_Set{Ids: []*rbacconfigv3.Principal{
			metadataID(claimMatcher([]string{"iss"}, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: mIss}}, false)),
			metadataID(claimMatcher([]string{"sub"}, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: mSub}}, false)),
		}}}})
	}
	if len(or) == 1 {
		return or[0]
	}
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_OrIds{OrIds: &rbacconfigv3.Principal_Set{Ids: or}}}
}

// jwtConditionID is the principal of a request.auth.* `when` key for
// values: principal as requestPrincipalID; audiences (claim aud),
// presenter (azp) and claims[a][b] match a claim that is the value or a
// list holding it, as Istio's generators do.
func jwtConditionID(key string, values []string) (*rbacconfigv3.Principal, error) {
	var claims []string
	switch key {
	case "request.auth.principal":
		return requestPrincipalID(values), nil
	case "request.auth.audiences":
		claims = []string{"aud"}
	case "request.auth.presenter":
		claims = []string{"azp"}
	default:
		var err error
		if claims, err = claimPath(strings.TrimPrefix(key, "request.auth.claims")); err != nil {
			return nil, err
		}
	}
	var or []*matcherv3.ValueMatcher
	for _, v := range values {
		or = append(or, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: stringMatch(v, "", false)}})
	}
	value := or[0]
	if len(or) > 1 {
		value = &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{ValueMatchers: or}}}
	}
	return metadataID(claimMatcher(claims, value, true)), nil
}

// claimPath parses "[a][b]" (nested claims) or "[a.b]" (one claim named
// a.b) into claim names.
func claimPath(s string) ([]string, error) {
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, fmt.Errorf("claim %q is not [name] or [name][nested]", s)
	}
	var out []string
	for _, part := range strings.Split(s[1:len(s)-1], "][") {
		if part == "" || strings.ContainsAny(part, "[]") {
			return nil, fmt.Errorf("claim %q is not [name] or [name][nested]", s)
		}
		out = append(out, part)
	}
	return out, nil
}

// claimMatcher matches claims (a path inside the JWT payload) against
// value; orList also accepts a list claim holding a matching value.
func claimMatcher(claims []string, value *matcherv3.ValueMatcher, orList bool) *matcherv3.MetadataMatcher {
	path := []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: JWTPayloadKey}}}
	for _, c := range claims {
		path = append(path, &matcherv3.MetadataMatcher_PathSegment{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: c}})
	}
	m := &matcherv3.MetadataMatcher{Filter: JWTFilterName, Path: path, Value: value}
	if orList {
		m.Value = &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{ValueMatchers: []*matcherv3.ValueMatcher{
			{MatchPattern: &matcherv3.ValueMatcher_ListMatch{ListMatch: &matcherv3.ListMatcher{MatchPattern: &matcherv3.ListMatcher_OneOf{OneOf: value}}}},
			value,
		}}}}
	}
	return m
}

func metadataID(m *matcherv3.MetadataMatcher) *rbacconfigv3.Principal {
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_Metadata{Metadata: m}}
}

func matchAnyValue() *matcherv3.StringMatcher { return regexMatch(".+") }

func exactMatch(v string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}
}

func prefixMatch(v string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: v}}
}

func suffixMatch(v string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: v}}
}
