package security

import (
	"fmt"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/translate"
	"google.golang.org/protobuf/types/known/emptypb"
	security "istio.io/api/security/v1beta1"
)

// JWTFilterName is Envoy's JWT authentication filter; the RBAC metadata
// matchers of requestPrincipals and request.auth.* read its dynamic
// metadata under this name.
const JWTFilterName = "envoy.filters.http.jwt_authn"

// JWTPayloadKey is the dynamic-metadata key under which jwt_authn stores a
// verified token's payload (Istio's "payload").
const JWTPayloadKey = "payload"

// FailClosedJWKS is the key set given to a provider whose jwksUri could not
// be fetched: one RSA public key whose private key was discarded when it was
// made, so no token verifies and every request carrying one of the
// provider's tokens is rejected (fail closed). It is Istio's
// PublicOnlyJwks, so a comparison with Istio's output sees the same value.
const FailClosedJWKS = `{
  "keys": [
    {
      "kty": "RSA",
      "e": "AQAB",
      "n": "0xObjM0UvS_oaazjpEYlAbwctEJ4L8pH3OuTb7qth7gUwqet-EzQB4dgFdvSdMgrLnSncQGRjpEYz3F3viIbH-3EN3TxSlPNviHxeOdyiBVfumN8dMxbLvVJUpfNOnvmMxJcl-8NNjAwcOjk4otSALaYgYYyOPyvKtgVdrQr-FoubWX4yrjxW-MJ2-7OBeepUUNOsVwGV23YX03sVkkyvY3otRflkBcY3_HKpBxJl9wk2GyOShN4_PNUF9-vwfnvOXMbCDX-w4PTef4geeb_GiT40YCKHTKMSPVanGRn5GExIWmki-mmqh94-mPTJyBR74ShspL3BxPZitDL574T1w"
    }
  ]
}`

// JWKSLookup returns what the control plane fetched from a jwksUri
// (model.View.JWKS).
type JWKSLookup func(uri string) (model.JWKS, bool)

// JWTFilter returns the jwt_authn filter that enforces the
// RequestAuthentications of a workload (model.View.RequestAuthentications),
// as Istio's authn builder makes it: one provider "origins-<i>" per JWT
// rule, rules sorted by issuer; each with its issuer, audiences, token
// locations (fromHeaders, fromParams, fromCookies), forwardOriginalToken,
// outputPayloadToHeader and outputClaimToHeaders, the payload in metadata
// ("payload", read by RBAC) with scope and permission (and the rule's
// spaceDelimitedClaims) split into lists, and the key set inline: the
// rule's jwks, else the one the control plane fetched from its jwksUri (or
// found by OpenID discovery from its issuer), else FailClosedJWKS.
// The requirement lets a request without a token through (authorization
// decides) and rejects a token no provider verifies: for one provider
// {provider OR allow_missing}; for several, any single provider, OR every
// {provider OR allow_missing} (a token, when present, must verify). CORS
// preflights bypass it. A rule with presence REQUIRED (istio.io/api 1.32)
// must also verify, so a request without its token is rejected: vmesh
// enforces the field, which Istio 1.31's builder does not read. nil when
// no rule applies.
func JWTFilter(ras []*model.RequestAuthentication, jwks JWKSLookup) *hcmv3.HttpFilter {
	var rules []*security.JWTRule
	for _, ra := range ras {
		rules = append(rules, ra.Rules...)
	}
	if len(rules) == 0 {
		return nil
	}
	slices.SortStableFunc(rules, func(a, b *security.JWTRule) int { return strings.Compare(a.GetIssuer(), b.GetIssuer()) })
	providers := map[string]*jwtv3.JwtProvider{}
	var each, anyOne, required []*jwtv3.JwtRequirement
	for i, r := range rules {
		name := fmt.Sprintf("origins-%d", i)
		providers[name] = jwtProvider(r, jwks)
		byName := &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_ProviderName{ProviderName: name}}
		each = append(each, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAny{RequiresAny: &jwtv3.JwtRequirementOrList{
			Requirements: []*jwtv3.JwtRequirement{
				byName,
				{RequiresType: &jwtv3.JwtRequirement_AllowMissing{AllowMissing: &emptypb.Empty{}}},
			},
		}}})
		anyOne = append(anyOne, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_ProviderName{ProviderName: name}})
		if r.GetPresence() == security.JWTRule_REQUIRED {
			required = append(required, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_ProviderName{ProviderName: name}})
		}
	}
	requires := each[0]
	if len(each) > 1 {
		requires = &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAny{RequiresAny: &jwtv3.JwtRequirementOrList{
			Requirements: append(anyOne, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAll{RequiresAll: &jwtv3.JwtRequirementAndList{Requirements: each}}}),
		}}}
	}
	if len(required) > 0 {
		requires = &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAll{RequiresAll: &jwtv3.JwtRequirementAndList{
			Requirements: append(required, requires),
		}}}
	}
	cfg := &jwtv3.JwtAuthentication{
		Providers: providers,
		Rules: []*jwtv3.RequirementRule{{
			Match:           &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			RequirementType: &jwtv3.RequirementRule_Requires{Requires: requires},
		}},
		BypassCorsPreflight: true,
	}
	return &hcmv3.HttpFilter{Name: JWTFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: translate.MustAny(cfg)}}
}

func jwtProvider(r *security.JWTRule, jwks JWKSLookup) *jwtv3.JwtProvider {
	p := &jwtv3.JwtProvider{
		Issuer:               r.GetIssuer(),
		Audiences:            r.GetAudiences(),
		Forward:              r.GetForwardOriginalToken(),
		ForwardPayloadHeader: r.GetOutputPayloadToHeader(),
		PayloadInMetadata:    JWTPayloadKey,
		NormalizePayloadInMetadata: &jwtv3.JwtProvider_NormalizePayload{
			SpaceDelimitedClaims: spaceDelimitedClaims(r.GetSpaceDelimitedClaims()),
		},
		FromParams:  r.GetFromParams(),
		FromCookies: r.GetFromCookies(),
	}
	for _, h := range r.GetOutputClaimToHeaders() {
		p.ClaimToHeaders = append(p.ClaimToHeaders, &jwtv3.JwtClaimToHeader{HeaderName: h.GetHeader(), ClaimName: h.GetClaim()})
	}
	for _, h := range r.GetFromHeaders() {
		p.FromHeaders = append(p.FromHeaders, &jwtv3.JwtHeader{Name: h.GetName(), ValuePrefix: h.GetPrefix()})
	}
	keys := r.GetJwks()
	if keys == "" {
		keys = FailClosedJWKS
		if j, ok := jwks(model.JWKSKey(r)); ok && j.Keys != "" {
			keys = j.Keys
		}
	}
	p.JwksSourceSpecifier = &jwtv3.JwtProvider_LocalJwks{LocalJwks: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: keys}}}
	return p
}

// spaceDelimitedClaims is Istio's list: scope and permission always, plus
// the rule's own, sorted and without duplicates when it names any.
func spaceDelimitedClaims(own []string) []string {
	if own == nil {
		return []string{"permission", "scope"}
	}
	out := append(slices.Clone(own), "permission", "scope")
	slices.Sort(out)
	return slices.Compact(out)
}
