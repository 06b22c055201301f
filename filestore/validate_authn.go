package filestore

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	security "istio.io/api/security/v1beta1"
)

// strictHeaderName is Istio's ValidateStrictHTTPHeaderName.
var strictHeaderName = regexp.MustCompile(`^[-_A-Za-z0-9]+$`)

// validateRequestAuthentication applies Istio's rules
// (ValidateRequestAuthentication): one of selector, targetRef and
// targetRefs; each rule with an issuer or a jwksUri, an http(s) jwksUri, an
// inline jwks that parses as a JSON Web Key Set, non-empty audiences and
// token locations, outputClaimToHeaders with a claim and a strict header
// name, and a timeout of at least 1 ms at millisecond precision.
func validateRequestAuthentication(v *validator, ra *security.RequestAuthentication) {
	checkPolicyTarget(v, ra.Selector, ra.TargetRef, ra.TargetRefs)
	if len(ra.JwtRules) > 4096 {
		v.add("jwtRules", "must have at most 4096 items")
	}
	for i, r := range ra.JwtRules {
		if r == nil {
			continue // Istio skips a null rule
		}
		validateJWTRule(v, at("jwtRules", i), r)
	}
}

func validateJWTRule(v *validator, path string, r *security.JWTRule) {
	for i, a := range r.Audiences {
		if a == "" {
			v.add(at(path+".audiences", i), "audience must be non-empty string")
		}
	}
	if r.Issuer == "" && r.JwksUri == "" {
		v.add(path+".issuer", "issuer or jwksUri must be non-empty string")
	}
	if r.JwksUri != "" {
		v.check(path+".jwksUri", checkJWKSURI(r.JwksUri))
		if len(r.JwksUri) > 2048 {
			v.add(path+".jwksUri", "must be at most 2048 characters")
		}
		if r.Jwks != "" {
			v.add(path, "only one of jwks or jwksUri can be set")
		}
	}
	if len(r.SpaceDelimitedClaims) > 64 {
		v.add(path+".spaceDelimitedClaims", "must have at most 64 items")
	}
	for i, c := range r.SpaceDelimitedClaims {
		if c == "" {
			v.add(at(path+".spaceDelimitedClaims", i), "must be at least 1 character long")
		}
	}
	if r.Jwks != "" {
		if _, err := ParseJWKS(r.Jwks); err != nil {
			v.add(path+".jwks", "jwks parse error: %v", err)
		}
	}
	for i, h := range r.FromHeaders {
		if h == nil {
			v.add(at(path+".fromHeaders", i), "location header name must be non-null")
			continue
		}
		if h.Name == "" {
			v.add(at(path+".fromHeaders", i)+".name", "location header name must be non-empty string")
		}
	}
	for i, p := range r.FromParams {
		if p == "" {
			v.add(at(path+".fromParams", i), "location query must be non-empty string")
		}
	}
	for i, c := range r.FromCookies {
		if c == "" {
			v.add(at(path+".fromCookies", i), "cookie name must be non-empty string")
		}
	}
	for i, ch := range r.OutputClaimToHeaders {
		p := at(path+".outputClaimToHeaders", i)
		if ch == nil {
			v.add(p, "outputClaimToHeaders must not be null")
			continue
		}
		if ch.Claim == "" || ch.Header == "" {
			v.add(p, "outputClaimToHeaders header and claim value must be non-empty string")
			continue
		}
		if !strictHeaderName.MatchString(ch.Header) {
			v.add(p+".header", "header name %s is not a valid header name", ch.Header)
		}
	}
	if r.Timeout != nil {
		d := r.Timeout.AsDuration()
		switch {
		case d < time.Millisecond:
			v.add(path+".timeout", "duration must be greater than 1ms")
		case d%time.Millisecond != 0:
			v.add(path+".timeout", "only durations to ms precision are supported")
		}
	}
}

// checkJWKSURI is Istio's ParseJwksURI: an http or https URL whose port,
// when given, is a number.
func checkJWKSURI(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return err.Error()
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Sprintf("URI scheme %q is not supported", u.Scheme)
	}
	if p := u.Port(); p != "" {
		if _, err := strconv.Atoi(p); err != nil {
			return err.Error()
		}
	}
	return ""
}

// ParseJWKS parses a JSON Web Key Set ({"keys": [...]}) into its public
// keys; like Istio it accepts a set without keys (no token verifies
// against it) and keys carrying private members, which verification does
// not use (they are dropped before parsing: a partial private key would
// not parse).
func ParseJWKS(s string) (*jose.JSONWebKeySet, error) {
	var raw struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, err
	}
	set := &jose.JSONWebKeySet{}
	for i, k := range raw.Keys {
		if kty := string(k["kty"]); kty != `"oct"` {
			for _, private := range []string{"d", "p", "q", "dp", "dq", "qi", "oth"} {
				delete(k, private)
			}
		}
		js, err := json.Marshal(k)
		if err != nil {
			return nil, fmt.Errorf("keys[%d]: %w", i, err)
		}
		var key jose.JSONWebKey
		if err := key.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("keys[%d]: %w", i, err)
		}
		set.Keys = append(set.Keys, key)
	}
	return set, nil
}
