package jwks_test

//lint:file-ignore SA1019 Principal.metadata is what Istio's authz builder generates for JWT claims (Envoy accepts it; sourced_metadata is its successor)

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/jwks"
	"github.com/vmesh/vmesh/xds"
	"github.com/vmesh/vmesh/xds/security"
	"github.com/vmesh/vmesh/xds/sidecar"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// signer is a test issuer: an RSA key, its public JWKS, and tokens it signs.
type signer struct {
	key  *rsa.PrivateKey
	kid  string
	jwks string
}

func newSigner(t *testing.T, kid string) *signer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: kid, Algorithm: string(jose.RS256), Use: "sig"}}}
	js, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return &signer{key: key, kid: kid, jwks: string(js)}
}

func (s *signer) token(t *testing.T, iss, sub string, aud ...string) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: s.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", s.kid))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(sig).Claims(jwt.Claims{Issuer: iss, Subject: sub, Audience: aud, IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// verify checks a token as Envoy's jwt_authn provider p would: signature
// against the provider's inline JWKS, issuer and (any of the) audiences.
func verify(p *jwtv3.JwtProvider, token string) (*jwt.Claims, error) {
	set, err := filestore.ParseJWKS(p.GetLocalJwks().GetInlineString())
	if err != nil {
		return nil, fmt.Errorf("provider's JWKS: %w", err)
	}
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil, err
	}
	var c jwt.Claims
	if err := parsed.Claims(*set, &c); err != nil {
		return nil, err
	}
	if err := c.Validate(jwt.Expected{Issuer: p.GetIssuer(), AnyAudience: p.GetAudiences(), Time: time.Now()}); err != nil {
		return nil, err
	}
	return &c, nil
}

// keyServer is a real HTTPS JWKS server whose key set can change.
type keyServer struct {
	*httptest.Server
	mu    sync.Mutex
	keys  string
	calls atomic.Int64
}

func newKeyServer(t *testing.T, keys string) *keyServer {
	ks := &keyServer{keys: keys}
	ks.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ks.calls.Add(1)
		switch r.URL.Path {
		case "/keys":
			ks.mu.Lock()
			defer ks.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(ks.keys))
		case "/.well-known/openid-configuration":
			_, _ = fmt.Fprintf(w, `{"issuer": %q, "jwks_uri": %q}`, ks.URL, ks.URL+"/keys")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ks.Close)
	return ks
}

func (ks *keyServer) set(keys string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.keys = keys
}

const issuer = "https://issuer.test"

func configYAML(keysURL string) string {
	return `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.shop.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  endpoints: [{address: 10.0.0.5, labels: {app: api}, serviceAccount: api}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: shop}
spec:
  selector: {matchLabels: {app: api}}
  jwtRules:
  - issuer: ` + issuer + `
    audiences: [api.shop.internal]
    jwksUri: ` + keysURL + `/keys
    fromHeaders: [{name: x-jwt, prefix: "Bearer "}]
    fromParams: [token]
    outputPayloadToHeader: x-jwt-payload
    forwardOriginalToken: true
  - issuer: https://broken.test
    jwksUri: ` + keysURL + `/missing
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: alice, namespace: shop}
spec:
  selector: {matchLabels: {app: api}}
  rules:
  - from: [{source: {requestPrincipals: ["` + issuer + `/alice"]}}]
`
}

func storeWith(t *testing.T, yaml string) *store.Store {
	t.Helper()
	d := filestore.DecodeFile("jwt.yaml", []byte(yaml), filestore.Limits{})
	if len(d.Errors) > 0 {
		t.Fatalf("decode: %v", d.Errors)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, d.Objects); err != nil {
		t.Fatal(err)
	}
	return st
}

// testServers is where httptest's servers listen: 127.0.0.1 only, so
// that the tests' key servers are allowed and no other loopback address
// is.
var testServers = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// runFetcher runs a fetcher that may fetch from the test servers.
func runFetcher(t *testing.T, st *store.Store, client *http.Client, refresh time.Duration) {
	t.Helper()
	runFetcherWith(t, st, jwks.Settings{Client: client, Refresh: refresh, RetryAfterFailure: refresh, Timeout: 10 * time.Second, AllowedCIDRs: testServers})
}

func runFetcherWith(t *testing.T, st *store.Store, settings jwks.Settings) {
	t.Helper()
	f, err := jwks.New(st, settings)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// waitFor polls the Store until cond holds, with a deadline.
func waitFor(t *testing.T, st *store.Store, what string, cond func(*store.Snapshot) bool) *store.Snapshot {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := st.Snapshot()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func jwksValue(s *store.Snapshot, key string) (string, string, bool) {
	o := s.Get(store.Key{Kind: store.KindJWKS, Name: key})
	if o == nil {
		return "", "", false
	}
	return o.Spec.(*wrapperspb.StringValue).GetValue(), o.Annotations[store.JWKSErrorAnnotation], true
}

// inboundHTTPFilters returns the HTTP filters of the sidecar's inbound
// chain for port 8080, after checking every resource served to the proxy
// with ValidateAll (Any fields unpacked).
func inboundHTTPFilters(t *testing.T, s *model.Snapshot) []*hcmv3.HttpFilter {
	t.Helper()
	p := &xds.Proxy{ID: "api-1", Kind: xds.KindSidecar, Namespace: "shop", Labels: map[string]string{"app": "api"}, ServiceAccount: "api", IPs: []string{"10.0.0.5"}}
	lds, err := xds.Listeners(s, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lds {
		if err := sidecar.Validate(l); err != nil {
			t.Fatalf("listener %s fails ValidateAll: %v", l.GetName(), err)
		}
	}
	for _, l := range lds {
		if l.GetName() != sidecar.VirtualInboundListener {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			if fc.GetFilterChainMatch().GetDestinationPort().GetValue() != 8080 {
				continue
			}
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().UnmarshalTo(hcm) == nil {
					return hcm.GetHttpFilters()
				}
			}
		}
	}
	t.Fatalf("no HTTP chain for port 8080 in %v", names(lds))
	return nil
}

func names(ls []*listenerv3.Listener) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.GetName())
	}
	return out
}

func unpack(t *testing.T, fs []*hcmv3.HttpFilter, name string, into proto.Message) {
	t.Helper()
	for _, f := range fs {
		if f.GetName() == name {
			if err := f.GetTypedConfig().UnmarshalTo(into); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return
		}
	}
	t.Fatalf("no filter %s in %v", name, fs)
}

func jwtConfig(t *testing.T, fs []*hcmv3.HttpFilter) *jwtv3.JwtAuthentication {
	t.Helper()
	cfg := &jwtv3.JwtAuthentication{}
	unpack(t, fs, security.JWTFilterName, cfg)
	return cfg
}

// A JWT signed by a test issuer and the jwt_authn config vmesh serves
// agree: the config passes ValidateAll; the issuer, audience and token
// locations are the policy's; the JWKS is the one the control plane
// fetched over real HTTPS (a server whose certificate only the fetcher's
// client trusts) and inlined; the token verifies against it and a token of
// another key does not. A jwksUri that answers 404 gets the fail-closed key
// set and a VM1012 warning; the ALLOW rule's request principal is a
// metadata matcher on the payload jwt_authn stores. A key rotation at the
// server reaches the served config by refresh.
func TestServedJWTConfigVerifiesIssuerTokens(t *testing.T) {
	good, other := newSigner(t, "k1"), newSigner(t, "k2")
	ks := newKeyServer(t, good.jwks)
	st := storeWith(t, configYAML(ks.URL))
	runFetcher(t, st, ks.Client(), 200*time.Millisecond)

	keysURI, missingURI := ks.URL+"/keys", ks.URL+"/missing"
	fs := waitFor(t, st, "both key sets fetched", func(s *store.Snapshot) bool {
		_, _, ok1 := jwksValue(s, keysURI)
		_, _, ok2 := jwksValue(s, missingURI)
		return ok1 && ok2
	})
	if v, errMsg, _ := jwksValue(fs, keysURI); v != good.jwks || errMsg != "" {
		t.Fatalf("fetched %q (error %q), want the server's key set", v, errMsg)
	}
	if v, errMsg, _ := jwksValue(fs, missingURI); v != "" || !strings.Contains(errMsg, "404") {
		t.Fatalf("missing key set: value %q, error %q; want no keys and the 404", v, errMsg)
	}
	var warned bool
	for _, src := range fs.Sources {
		for _, w := range src.Warnings {
			if src.Source == jwks.SourceName && w.Code == store.CodeJWKSFetchFailed && w.Object == "RequestAuthentication/shop/jwt" && w.Field == "jwtRules[1].jwksUri" && w.File == "jwt.yaml" {
				warned = true
			}
		}
	}
	if !warned {
		t.Errorf("no VM1012 warning for the failed fetch in %+v", fs.Sources)
	}

	hf := inboundHTTPFilters(t, model.Build(fs))
	if hf[0].GetName() != security.JWTFilterName || hf[len(hf)-1].GetName() != "envoy.filters.http.router" {
		t.Fatalf("filters %v: want jwt_authn first, router last", hf)
	}
	cfg := jwtConfig(t, hf)
	byIssuer := map[string]*jwtv3.JwtProvider{}
	for _, p := range cfg.GetProviders() {
		byIssuer[p.GetIssuer()] = p
	}
	p := byIssuer[issuer]
	if p == nil || !slices.Equal(p.GetAudiences(), []string{"api.shop.internal"}) || p.GetPayloadInMetadata() != security.JWTPayloadKey ||
		p.GetFromHeaders()[0].GetName() != "x-jwt" || p.GetFromHeaders()[0].GetValuePrefix() != "Bearer " || !slices.Equal(p.GetFromParams(), []string{"token"}) ||
		p.GetForwardPayloadHeader() != "x-jwt-payload" || !p.GetForward() {
		t.Fatalf("provider for %s: %v", issuer, p)
	}
	if got := p.GetLocalJwks().GetInlineString(); got != good.jwks {
		t.Fatalf("inline JWKS %q, want the fetched %q", got, good.jwks)
	}
	tok := good.token(t, issuer, "alice", "api.shop.internal")
	c, err := verify(p, tok)
	if err != nil {
		t.Fatalf("the issuer's token does not verify against the served config: %v", err)
	}
	if _, err := verify(p, other.token(t, issuer, "alice", "api.shop.internal")); err == nil {
		t.Error("a token signed by another key verifies against the served JWKS")
	}
	if _, err := verify(p, good.token(t, issuer, "alice", "someone-else")); err == nil {
		t.Error("a token for another audience passes the served provider's audiences")
	}
	broken := byIssuer["https://broken.test"]
	if broken.GetLocalJwks().GetInlineString() != security.FailClosedJWKS {
		t.Fatalf("failed fetch: inline JWKS %q, want the fail-closed key set", broken.GetLocalJwks().GetInlineString())
	}
	for _, s := range []*signer{good, other} {
		if _, err := verify(broken, s.token(t, "https://broken.test", "alice")); err == nil {
			t.Error("a token verifies against the fail-closed key set")
		}
	}
	// Missing tokens pass to RBAC; a token must verify with some provider.
	req := cfg.GetRules()[0].GetRequires().GetRequiresAny().GetRequirements()
	if len(req) != 3 || req[2].GetRequiresAll() == nil {
		t.Errorf("requirement %v: want any provider, or all of {provider or allow_missing}", cfg.GetRules()[0].GetRequires())
	}

	// The ALLOW rule admits the token's principal <iss>/<sub> from the
	// payload jwt_authn stores.
	allow := &rbacv3.RBAC{}
	unpack(t, hf, security.AllowFilterName, allow)
	pol := allow.GetRules().GetPolicies()["ns[shop]-policy[alice]-rule[0]"]
	ids := pol.GetPrincipals()[0].GetAndIds().GetIds()
	if len(ids) != 2 {
		t.Fatalf("principal %v: want iss AND sub metadata matchers", pol.GetPrincipals())
	}
	claims := map[string]string{"iss": c.Issuer, "sub": c.Subject}
	for _, id := range ids {
		m := id.GetMetadata()
		path := m.GetPath()
		if m.GetFilter() != security.JWTFilterName || len(path) != 2 || path[0].GetKey() != security.JWTPayloadKey {
			t.Fatalf("matcher %v does not read jwt_authn's payload", m)
		}
		if want := claims[path[1].GetKey()]; m.GetValue().GetStringMatch().GetExact() != want {
			t.Errorf("claim %s matched against %q, the token has %q", path[1].GetKey(), m.GetValue().GetStringMatch().GetExact(), want)
		}
	}

	// Key rotation: the refreshed key set reaches the served config.
	rotated := newSigner(t, "k3")
	ks.set(rotated.jwks)
	fs = waitFor(t, st, "the rotated key set", func(s *store.Snapshot) bool {
		v, _, _ := jwksValue(s, keysURI)
		return v == rotated.jwks
	})
	hf = inboundHTTPFilters(t, model.Build(fs))
	for _, p := range jwtConfig(t, hf).GetProviders() {
		if p.GetIssuer() == issuer {
			if _, err := verify(p, rotated.token(t, issuer, "alice", "api.shop.internal")); err != nil {
				t.Errorf("a token of the rotated key does not verify: %v", err)
			}
			if _, err := verify(p, tok); err == nil {
				t.Error("a token of the retired key still verifies")
			}
		}
	}
}

// The fetcher trusts only what its client trusts: against the same HTTPS
// server, a client without the server's CA fails the fetch, and the key
// set is the fail-closed one (no keys, the error kept).
func TestUntrustedKeyServerFailsClosed(t *testing.T) {
	s := newSigner(t, "k1")
	ks := newKeyServer(t, s.jwks)
	st := storeWith(t, configYAML(ks.URL))
	runFetcher(t, st, &http.Client{}, time.Minute)
	fs := waitFor(t, st, "a failed fetch", func(s *store.Snapshot) bool {
		_, e, _ := jwksValue(s, ks.URL+"/keys")
		return e != ""
	})
	_, e, _ := jwksValue(fs, ks.URL+"/keys")
	if !strings.Contains(e, "certificate") {
		t.Errorf("error %q, want a certificate error", e)
	}
	hf := inboundHTTPFilters(t, model.Build(fs))
	for _, p := range jwtConfig(t, hf).GetProviders() {
		if p.GetLocalJwks().GetInlineString() != security.FailClosedJWKS {
			t.Errorf("provider %s: JWKS %q, want the fail-closed key set", p.GetIssuer(), p.GetLocalJwks().GetInlineString())
		}
		if _, err := verify(p, s.token(t, issuer, "alice", "api.shop.internal")); err == nil {
			t.Errorf("provider %s: a token verifies against the fail-closed key set", p.GetIssuer())
		}
	}
}

// BlockedCIDRs keep the fetcher off the ranges they name, even allowed
// ones: the key server on loopback (allowed) is refused when 127.0.0.0/8
// is blocked (the fetch fails, the error names the address and the range,
// the key set is the fail-closed one) and reached when only another range
// is.
func TestBlockedCIDRsFailClosed(t *testing.T) {
	signer := newSigner(t, "k1")
	ks := newKeyServer(t, signer.jwks)
	blocked := storeWith(t, configYAML(ks.URL))
	runFetcherWith(t, blocked, jwks.Settings{Client: ks.Client(), Refresh: time.Minute, RetryAfterFailure: time.Minute, AllowedCIDRs: testServers,
		BlockedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8")}})
	fs := waitFor(t, blocked, "a refused fetch", func(s *store.Snapshot) bool {
		_, e, _ := jwksValue(s, ks.URL+"/keys")
		return e != ""
	})
	if _, e, _ := jwksValue(fs, ks.URL+"/keys"); !strings.Contains(e, "127.0.0.1 is in the blocked range 127.0.0.0/8") {
		t.Errorf("error %q, want the blocked address and range", e)
	}
	for _, p := range jwtConfig(t, inboundHTTPFilters(t, model.Build(fs))).GetProviders() {
		if p.GetLocalJwks().GetInlineString() != security.FailClosedJWKS {
			t.Errorf("provider %s: JWKS %q, want the fail-closed key set", p.GetIssuer(), p.GetLocalJwks().GetInlineString())
		}
	}

	allowed := storeWith(t, configYAML(ks.URL))
	runFetcherWith(t, allowed, jwks.Settings{Client: ks.Client(), Refresh: time.Minute, RetryAfterFailure: time.Minute, AllowedCIDRs: testServers,
		BlockedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	waitFor(t, allowed, "the key set fetched past a range it is not in", func(s *store.Snapshot) bool {
		v, e, _ := jwksValue(s, ks.URL+"/keys")
		return e == "" && v == signer.jwks
	})
}

// unrestricted returns the VM1014 warnings of the jwks source, as
// "file:line field".
func unrestricted(fs *store.Snapshot) []string {
	var out []string
	for _, src := range fs.Sources {
		for _, w := range src.Warnings {
			if src.Source == jwks.SourceName && w.Code == store.CodeJWKSFetchUnrestricted {
				out = append(out, fmt.Sprintf("%s:%d %s %s", w.File, w.Line, w.Object, w.Field))
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestUnrestrictedFetchesWarn checks VM1014, Istio's IST0175 in vmesh's
// terms: while an allowed range wider than one address is set (here
// 127.0.0.0/8), each rule whose key set the control plane fetches is a
// warning at its file, line and field naming the range; with only the key
// server's own address allowed none is.
func TestUnrestrictedFetchesWarn(t *testing.T) {
	signer := newSigner(t, "k1")
	ks := newKeyServer(t, signer.jwks)
	open := storeWith(t, configYAML(ks.URL))
	runFetcherWith(t, open, jwks.Settings{Client: ks.Client(), Refresh: time.Minute, RetryAfterFailure: time.Minute,
		AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.1.2.3/32")}})
	fs := waitFor(t, open, "both rules warned", func(s *store.Snapshot) bool { return len(unrestricted(s)) == 2 })
	want := []string{"jwt.yaml:11 RequestAuthentication/shop/jwt jwtRules[0].jwksUri", "jwt.yaml:11 RequestAuthentication/shop/jwt jwtRules[1].jwksUri"}
	if got := unrestricted(fs); !slices.Equal(got, want) {
		t.Errorf("VM1014 warnings %q, want %q", got, want)
	}
	for _, src := range fs.Sources {
		for _, w := range src.Warnings {
			if w.Code == store.CodeJWKSFetchUnrestricted && (!strings.Contains(w.Message, "127.0.0.0/8") || strings.Contains(w.Message, "10.1.2.3")) {
				t.Errorf("VM1014 %q: want the broad range named, not the single address", w.Message)
			}
		}
	}

	guarded := storeWith(t, configYAML(ks.URL))
	runFetcher(t, guarded, ks.Client(), time.Minute)
	fs = waitFor(t, guarded, "the key set fetched", func(s *store.Snapshot) bool {
		v, e, _ := jwksValue(s, ks.URL+"/keys")
		return e == "" && v == signer.jwks
	})
	if got := unrestricted(fs); len(got) > 0 {
		t.Errorf("VM1014 warnings %q with only the key server's address allowed", got)
	}
}

// A rule without jwksUri finds its keys by OpenID discovery from the
// issuer, as Istio does; a RequestAuthentication removed from the Store
// takes its key set with it.
func TestOpenIDDiscoveryAndRemoval(t *testing.T) {
	s := newSigner(t, "k1")
	ks := newKeyServer(t, s.jwks)
	st := storeWith(t, `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: oidc, namespace: shop}
spec:
  jwtRules: [{issuer: "`+ks.URL+`"}]
`)
	runFetcher(t, st, ks.Client(), time.Minute)
	key := model.IssuerKeyPrefix + ks.URL
	waitFor(t, st, "the discovered key set", func(fs *store.Snapshot) bool {
		v, _, _ := jwksValue(fs, key)
		return v == s.jwks
	})
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, st, "the key set removed", func(fs *store.Snapshot) bool {
		_, _, ok := jwksValue(fs, key)
		return !ok
	})
}

// Synced waits for the config sources (After), then for the first fetch:
// when it closes, the key set is in the Store, so a server that starts
// xDS after it never serves the fail-closed set of an untried fetch.
func TestSyncedAfterFirstFetch(t *testing.T) {
	s := newSigner(t, "k1")
	ks := newKeyServer(t, s.jwks)
	st := storeWith(t, configYAML(ks.URL))
	sourcesReady := make(chan struct{})
	f, err := jwks.New(st, jwks.Settings{Client: ks.Client(), After: []<-chan struct{}{sourcesReady}, AllowedCIDRs: testServers})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-f.Synced():
		t.Fatal("synced before the config sources were ready")
	case <-time.After(50 * time.Millisecond):
	}
	if ks.calls.Load() != 0 {
		t.Fatal("fetched before the config sources were ready")
	}
	close(sourcesReady)
	select {
	case <-f.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("never synced")
	}
	if v, _, ok := jwksValue(st.Snapshot(), ks.URL+"/keys"); !ok || v != s.jwks {
		t.Errorf("at Synced the key set is %q (%v), want the fetched one", v, ok)
	}
}
