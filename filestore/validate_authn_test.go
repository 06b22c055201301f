package filestore_test

import (
	"strings"
	"testing"

	"github.com/vmesh/vmesh/filestore"
)

// RequestAuthentication is validated as Istio's webhook and CRD do (the
// parity test compares the verdicts on Istio's own documents); here each
// rule once, with the field it names.
func TestValidateRequestAuthentication(t *testing.T) {
	head := "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: ra, namespace: ns}\nspec:\n"
	tests := []struct {
		name, spec, field, msg string
	}{
		{name: "valid", spec: "  jwtRules: [{issuer: a, jwksUri: 'https://a/keys', timeout: 2s}]\n"},
		{name: "no issuer nor jwksUri", spec: "  jwtRules: [{audiences: [x]}]\n", field: "jwtRules[0].issuer", msg: "issuer or jwksUri"},
		{name: "empty audience", spec: "  jwtRules: [{issuer: a, audiences: ['']}]\n", field: "jwtRules[0].audiences[0]", msg: "non-empty"},
		{name: "jwksUri scheme", spec: "  jwtRules: [{issuer: a, jwksUri: 'ftp://a/keys'}]\n", field: "jwtRules[0].jwksUri", msg: "not supported"},
		{name: "jwks and jwksUri", spec: "  jwtRules: [{issuer: a, jwksUri: 'https://a/keys', jwks: '{\"keys\":[]}'}]\n", field: "jwtRules[0]", msg: "only one of jwks or jwksUri"},
		{name: "bad jwks", spec: "  jwtRules: [{issuer: a, jwks: 'not json'}]\n", field: "jwtRules[0].jwks", msg: "jwks parse error"},
		{name: "header name", spec: "  jwtRules: [{issuer: a, fromHeaders: [{prefix: x}]}]\n", field: "jwtRules[0].fromHeaders[0].name", msg: "non-empty"},
		{name: "param", spec: "  jwtRules: [{issuer: a, fromParams: ['']}]\n", field: "jwtRules[0].fromParams[0]", msg: "non-empty"},
		{name: "claim to header", spec: "  jwtRules: [{issuer: a, outputClaimToHeaders: [{header: 'x y', claim: sub}]}]\n", field: "jwtRules[0].outputClaimToHeaders[0].header", msg: "not a valid header name"},
		{name: "timeout precision", spec: "  jwtRules: [{issuer: a, timeout: 1.5ms}]\n", field: "jwtRules[0].timeout", msg: "ms precision"},
		{name: "selector and targetRefs", spec: "  selector: {matchLabels: {app: a}}\n  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: g}]\n", field: "selector", msg: "only one of"},
		{name: "space-delimited claim", spec: "  jwtRules: [{issuer: a, spaceDelimitedClaims: ['']}]\n", field: "jwtRules[0].spaceDelimitedClaims[0]", msg: "at least 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, errs := filestore.Decode("ra.yaml", []byte(head+tc.spec))
			if tc.field == "" {
				if len(errs) > 0 || len(objs) != 1 {
					t.Fatalf("valid document: %v", errs)
				}
				return
			}
			if len(objs) != 0 {
				t.Fatalf("invalid document accepted")
			}
			for _, e := range errs {
				if e.Field == tc.field && strings.Contains(e.Message, tc.msg) {
					return
				}
			}
			t.Errorf("errors %v, want %s: %q", errs, tc.field, tc.msg)
		})
	}
}

// Inline keys with private members (which verification does not use)
// parse, as Istio accepts them.
func TestParseJWKSIgnoresPrivateMembers(t *testing.T) {
	set, err := filestore.ParseJWKS(`{"keys":[{"kty":"RSA","e":"AQAB","n":"xAE7eB6qugXyCAG3yhh7pkDkT65pHymX-P7KfIupjf59vsdo91bSP9C8H07pSAGQO1MV_xFj9VswgsCg4R6otmg5PV2He95lZdHtOcU5DXIg_pbhLdKXbi66GlVeK6ABZOUW3WYtnNHD-91gVuoeJT_DwtGGcp4ignkgXfkiEm4sw-4sfb4qdt5oLbyVpmW6x9cfa7vs2WTfURiCrBoUqgBo_-4WTiULmmHSGZHOjzwa8WtrtOQGsAFjIbno85jp6MnGGGZPYZbDAa_b3y5u-YpW7ypZrvD8BgtKVjgtQgZhLAGezMt0ua3DRrWnKqTZ0BJ_EyxOGuHJrLsn00fnMQ","d":"AQ"}]}`)
	if err != nil || len(set.Keys) != 1 || !set.Keys[0].IsPublic() {
		t.Fatalf("set %v, err %v: want one public key", set, err)
	}
}
