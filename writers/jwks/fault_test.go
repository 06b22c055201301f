package jwks_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/jwks"
	"github.com/vmesh/vmesh/xds"
	"github.com/vmesh/vmesh/xds/security"
)

// marker returns a string found nowhere but where a test puts it.
func marker(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

// countingServer is a plain-HTTP server on addr ("127.0.0.1:0", "[::]:0",
// ...) answering every path with h; it counts the requests it gets.
type countingServer struct {
	URL   string
	Port  int
	calls atomic.Int64
}

func serve(t *testing.T, addr string, h http.HandlerFunc) *countingServer {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingServer{URL: "http://" + l.Addr().String(), Port: l.Addr().(*net.TCPAddr).Port}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.calls.Add(1)
		h(w, r)
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	return cs
}

// answer serves body as JSON.
func answer(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}
}

// raYAML is a RequestAuthentication for the api workload with one rule per
// URI, in the order given.
func raYAML(uris ...string) string {
	y := `apiVersion: networking.istio.io/v1
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
`
	for i, u := range uris {
		y += fmt.Sprintf("  - {issuer: \"https://issuer-%d.test\", jwksUri: %q}\n", i, u)
	}
	return y
}

// fetcherOn runs a fetcher over st with settings (its log kept in the
// returned buffer).
func fetcherOn(t *testing.T, st *store.Store, s jwks.Settings) *testenv.LogBuffer {
	t.Helper()
	logs := &testenv.LogBuffer{}
	s.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if s.Refresh == 0 {
		s.Refresh, s.RetryAfterFailure = time.Minute, time.Minute
	}
	runFetcherWith(t, st, s)
	return logs
}

// settled waits until every key the config needs has an object in the
// Store: its keys, or its error.
func settled(t *testing.T, st *store.Store, uris ...string) *store.Snapshot {
	t.Helper()
	return waitFor(t, st, "every key set fetched or refused", func(s *store.Snapshot) bool {
		for _, u := range uris {
			v, e, ok := jwksValue(s, u)
			if !ok || (v == "" && e == "") {
				return false
			}
		}
		return true
	})
}

// everything is all vmesh shows of the Store and of the config it
// generates for the api workload's sidecar: every object (spec,
// annotations), every source's warnings and errors, the sidecar's
// listeners (as /debug/config_dump renders them), and the fetcher's log.
func everything(t *testing.T, fs *store.Snapshot, logs *testenv.LogBuffer) string {
	t.Helper()
	var b strings.Builder
	for _, k := range []store.Kind{store.KindJWKS, store.KindRequestAuthentication, store.KindServiceEntry} {
		for _, o := range fs.List(k) {
			fmt.Fprintf(&b, "%+v %v %v\n", o.Key, o.Spec, o.Annotations)
		}
	}
	for _, src := range fs.Sources {
		fmt.Fprintf(&b, "%+v\n", src)
	}
	p := &xds.Proxy{ID: "api-1", Kind: xds.KindSidecar, Namespace: "shop", Labels: map[string]string{"app": "api"}, ServiceAccount: "api", IPs: []string{"10.0.0.5"}}
	lds, err := xds.Listeners(model.Build(fs), p)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lds {
		js, err := protojson.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(js)
	}
	b.WriteString(logs.String())
	return b.String()
}

// warningsOf returns the jwks source's warnings with code for field.
func warningsOf(fs *store.Snapshot, code, field string) []string {
	var out []string
	for _, src := range fs.Sources {
		if src.Source != jwks.SourceName {
			continue
		}
		for _, w := range src.Warnings {
			if w.Code == code && w.Field == field && w.File == "jwt.yaml" && w.Line > 0 && w.Object == "RequestAuthentication/shop/jwt" {
				out = append(out, w.Message)
			}
		}
	}
	return out
}

// providerKeys returns the inline key set of each JWT provider the api
// sidecar gets, by issuer.
func providerKeys(t *testing.T, fs *store.Snapshot) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range jwtConfig(t, inboundHTTPFilters(t, model.Build(fs))).GetProviders() {
		out[p.GetIssuer()] = p.GetLocalJwks().GetInlineString()
	}
	return out
}

// A key server on loopback is refused by default, for a jwksUri and for
// OpenID discovery: the fetcher never connects to it (the server counts
// no request), the rule is warning VM1012 at its file, line and field
// saying why, its provider gets the fail-closed key set, and the key
// set's unique kid is nowhere: not in the Store, its warnings, the
// generated listeners or the log. Allowing 127.0.0.1/32 fetches the same
// key set (so the path works and the marker would be seen).
func TestFaultJWKSLoopbackRefusedByDefault(t *testing.T) {
	kid := marker(t, "loopback-marker")
	s := newSigner(t, kid)
	var srv *countingServer
	srv = serve(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/openid-configuration" {
			_, _ = fmt.Fprintf(w, `{"jwks_uri": %q}`, srv.URL+"/keys")
			return
		}
		answer(s.jwks)(w, r)
	})
	keys := srv.URL + "/keys"
	yaml := raYAML(keys) + `  - {issuer: "` + srv.URL + `"}
`
	uris := []string{keys, model.IssuerKeyPrefix + srv.URL}

	st := storeWith(t, yaml)
	logs := fetcherOn(t, st, jwks.Settings{})
	fs := settled(t, st, uris...)
	if n := srv.calls.Load(); n != 0 {
		t.Errorf("the fetcher sent %d requests to a loopback server", n)
	}
	for i, field := range []string{"jwtRules[0].jwksUri", "jwtRules[1].issuer"} {
		ws := warningsOf(fs, store.CodeJWKSFetchFailed, field)
		if len(ws) != 1 || !strings.Contains(ws[0], "127.0.0.1 is a loopback address") || !strings.Contains(ws[0], "--jwks-allowed-cidr") {
			t.Errorf("rule %d: VM1012 warnings %q, want one naming the loopback address and the flag", i, ws)
		}
	}
	for iss, k := range providerKeys(t, fs) {
		if k != security.FailClosedJWKS {
			t.Errorf("provider %s: key set %q, want the fail-closed one", iss, k)
		}
	}
	if all := everything(t, fs, logs); strings.Contains(all, kid) {
		t.Fatalf("the refused key set's kid %s is read back:\n%s", kid, all)
	}

	allowed := storeWith(t, yaml)
	logs = fetcherOn(t, allowed, jwks.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	fs = waitFor(t, allowed, "the allowed key sets", func(fs *store.Snapshot) bool {
		for _, u := range uris {
			if v, _, _ := jwksValue(fs, u); v != s.jwks {
				return false
			}
		}
		return true
	})
	if !strings.Contains(everything(t, fs, logs), kid) {
		t.Fatal("the allowed key set's kid is not in the generated config: the check above proves nothing")
	}
}

// Addresses that reach the host itself whatever the blocked ranges say:
// 0.0.0.0, ::, and IPv4-mapped forms of loopback and of 0.0.0.0 are
// refused by default, with the blocked ranges an operator would set
// (loopback, link-local), and even with loopback allowed; the server
// listening on every address gets no request.
func TestFaultJWKSUnspecifiedAddressRefused(t *testing.T) {
	s := newSigner(t, marker(t, "unspecified-marker"))
	srv := serve(t, ":0", answer(s.jwks))
	uris := []string{
		fmt.Sprintf("http://0.0.0.0:%d/keys", srv.Port),
		fmt.Sprintf("http://[::]:%d/keys", srv.Port),
		fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/keys", srv.Port),
		fmt.Sprintf("http://[::ffff:0.0.0.0]:%d/keys", srv.Port),
	}
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, c := range []struct {
		name     string
		settings jwks.Settings
		uris     []string
	}{
		{"default", jwks.Settings{}, uris},
		{"blocked", jwks.Settings{BlockedCIDRs: append([]netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}, loopback...)}, uris},
		// With loopback allowed, ::ffff:127.0.0.1 is allowed: it is 127.0.0.1.
		{"allowed", jwks.Settings{AllowedCIDRs: loopback}, []string{uris[0], uris[1], uris[3]}},
	} {
		settings, uris := c.settings, c.uris
		t.Run(c.name, func(t *testing.T) {
			st := storeWith(t, raYAML(uris...))
			logs := fetcherOn(t, st, settings)
			settled(t, st, uris...)
			// The refusal's warning is published after the refusal itself:
			// wait for the warnings too (the assertions below still say
			// which one is missing when they do not come).
			fs := waitFor(t, st, "a VM1012 warning for every refused key set", func(s *store.Snapshot) bool {
				for i := range uris {
					if len(warningsOf(s, store.CodeJWKSFetchFailed, fmt.Sprintf("jwtRules[%d].jwksUri", i))) != 1 {
						return false
					}
				}
				return true
			})
			for i, u := range uris {
				if v, e, _ := jwksValue(fs, u); v != "" || !strings.Contains(e, "refused") {
					t.Errorf("%s: keys %q, error %q; want it refused", u, v, e)
				}
				if ws := warningsOf(fs, store.CodeJWKSFetchFailed, fmt.Sprintf("jwtRules[%d].jwksUri", i)); len(ws) != 1 {
					t.Errorf("%s: VM1012 warnings %q, want one", u, ws)
				}
			}
			if n := srv.calls.Load(); n != 0 {
				t.Fatalf("the server on every address got %d requests", n)
			}
			if all := everything(t, fs, logs); strings.Contains(all, s.kid) {
				t.Fatalf("the key set's kid is read back:\n%s", all)
			}
		})
	}
}

// A redirect is checked as the first request is: with only 127.0.0.1
// allowed, a key server there that redirects to 127.0.0.2 or [::1] (still
// loopback, not allowed) makes the fetch fail closed, and the target gets
// no request; a server redirecting to itself is followed at most
// jwks.MaxRedirects times; a redirect from https to http is refused.
func TestFaultJWKSRedirectToLoopbackRefused(t *testing.T) {
	s := newSigner(t, marker(t, "redirect-marker"))
	v4 := serve(t, "127.0.0.2:0", answer(s.jwks))
	v6 := serve(t, "[::1]:0", answer(s.jwks))
	var loop *countingServer
	loop = serve(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-v4":
			http.Redirect(w, r, v4.URL+"/keys", http.StatusFound)
		case "/to-v6":
			http.Redirect(w, r, v6.URL+"/keys", http.StatusMovedPermanently)
		default:
			http.Redirect(w, r, loop.URL+"/again", http.StatusTemporaryRedirect)
		}
	})
	tls := httptest.NewTLSServer(http.RedirectHandler(loop.URL+"/to-v4", http.StatusFound))
	t.Cleanup(tls.Close)
	uris := []string{loop.URL + "/to-v4", loop.URL + "/to-v6", loop.URL + "/loop", tls.URL + "/keys"}

	st := storeWith(t, raYAML(uris...))
	logs := fetcherOn(t, st, jwks.Settings{Client: tls.Client(), AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	fs := settled(t, st, uris...)
	for u, want := range map[string]string{
		uris[0]: "127.0.0.2 is a loopback address",
		uris[1]: "::1 is a loopback address",
		uris[2]: fmt.Sprintf("stopped after %d redirects", jwks.MaxRedirects),
		uris[3]: "redirect from https to http refused",
	} {
		if v, e, _ := jwksValue(fs, u); v != "" || !strings.Contains(e, want) {
			t.Errorf("%s: keys %q, error %q; want %q", u, v, e, want)
		}
	}
	if n := v4.calls.Load() + v6.calls.Load(); n != 0 {
		t.Errorf("the redirect targets got %d requests", n)
	}
	// /to-v4 and /to-v6 once each, /loop and its redirects.
	if n := loop.calls.Load(); n != 2+1+jwks.MaxRedirects {
		t.Errorf("the allowed server got %d requests, want %d", n, 2+1+jwks.MaxRedirects)
	}
	for iss, k := range providerKeys(t, fs) {
		if k != security.FailClosedJWKS {
			t.Errorf("provider %s: key set %q, want the fail-closed one", iss, k)
		}
	}
	if all := everything(t, fs, logs); strings.Contains(all, s.kid) {
		t.Fatalf("the redirect target's kid is read back:\n%s", all)
	}
}

// An allowed server that answers something other than a key set (a cloud
// credential document, a key set with extra members, a reason phrase
// carrying a secret) never gets its content read back: a body without
// "keys" and a set without a usable key are refused (VM1012, fail
// closed); a valid set keeps only its keys' public parameters, kid, alg
// and use. The secret is nowhere in the Store, the warnings, the
// generated listeners or the log.
func TestFaultJWKSSecretBodyNeverStored(t *testing.T) {
	secret := marker(t, "AKIA-marker")
	s := newSigner(t, "k1")
	var pub map[string]any
	if err := json.Unmarshal([]byte(s.jwks), &pub); err != nil {
		t.Fatal(err)
	}
	key := pub["keys"].([]any)[0].(map[string]any)
	key["x-secret"] = secret
	key["x5u"] = "https://" + secret + ".example/cert"
	withExtras, _ := json.Marshal(map[string]any{"keys": []any{key}, "SecretAccessKey": secret})
	bodies := map[string]string{
		"/creds":      `{"Code":"Success","AccessKeyId":"ASIA","SecretAccessKey":"` + secret + `","Token":"` + secret + `"}`,
		"/empty":      `{"keys":[],"SecretAccessKey":"` + secret + `"}`,
		"/not-a-key":  `{"keys":[{"kty":"` + secret + `","n":"` + secret + `"}]}`,
		"/bad-params": `{"keys":[{"kty":"RSA","e":"AQAB","n":"` + secret + `"}]}`,
		"/array":      `["` + secret + `"]`,
		"/extras":     string(withExtras),
	}
	srv := serve(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/status" {
			// A reason phrase is the server's text too.
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = buf.WriteString("HTTP/1.1 500 " + secret + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			_ = buf.Flush()
			return
		}
		answer(bodies[r.URL.Path])(w, r)
	})
	var uris []string
	for _, p := range []string{"/creds", "/empty", "/not-a-key", "/bad-params", "/array", "/status", "/extras"} {
		uris = append(uris, srv.URL+p)
	}
	st := storeWith(t, raYAML(uris...))
	logs := fetcherOn(t, st, jwks.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	fs := settled(t, st, uris...)
	for i, u := range uris[:len(uris)-1] {
		if v, e, _ := jwksValue(fs, u); v != "" || e == "" {
			t.Errorf("%s: keys %q, error %q; want it refused", u, v, e)
		}
		if ws := warningsOf(fs, store.CodeJWKSFetchFailed, fmt.Sprintf("jwtRules[%d].jwksUri", i)); len(ws) != 1 {
			t.Errorf("%s: VM1012 warnings %q, want one", u, ws)
		}
	}
	if v, e, _ := jwksValue(fs, srv.URL+"/extras"); v != s.jwks || e != "" {
		t.Errorf("the set with extra members: keys %q (error %q), want only its public key %q", v, e, s.jwks)
	}
	keys := providerKeys(t, fs)
	for i := range uris {
		want := security.FailClosedJWKS
		if i == len(uris)-1 {
			want = s.jwks
		}
		if got := keys[fmt.Sprintf("https://issuer-%d.test", i)]; got != want {
			t.Errorf("provider %d: key set %q, want %q", i, got, want)
		}
	}
	if all := everything(t, fs, logs); strings.Contains(all, secret) {
		t.Fatalf("the server's secret is read back:\n%s", all)
	}
}

// A key set carrying private key material never lets it out: a key with
// private members (RSA, EC) or a symmetric key is refused (VM1012 names
// it; the other keys serve), an unknown member of a kept key is dropped,
// and a set of private keys only is refused as a whole (fail closed). No
// "d", "k", or other private member is in the Store or the listeners.
func TestFaultJWKSPrivateKeyMaterialDropped(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPub, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	unknown := marker(t, "unknown-member")
	mustJSON := func(k jose.JSONWebKey) map[string]any {
		js, err := json.Marshal(k)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(js, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	public := mustJSON(jose.JSONWebKey{Key: &ecPub.PublicKey, KeyID: "ec-public", Algorithm: "ES384", Use: "sig"})
	public["x-note"] = unknown
	private := []any{
		mustJSON(jose.JSONWebKey{Key: rsaKey, KeyID: "rsa-private", Algorithm: "RS256"}),
		mustJSON(jose.JSONWebKey{Key: ecKey, KeyID: "ec-private", Algorithm: "ES256"}),
		map[string]any{"kty": "oct", "kid": "hmac", "k": "c2VjcmV0LWhtYWMta2V5"},
	}
	mixed, _ := json.Marshal(map[string]any{"keys": append(append([]any{}, private...), public)})
	only, _ := json.Marshal(map[string]any{"keys": private})
	for _, want := range []string{`"d":`, `"p":`, `"k":`, unknown} {
		if !strings.Contains(string(mixed), want) {
			t.Fatalf("the test's key set lacks %s", want)
		}
	}
	srv := serve(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/only" {
			answer(string(only))(w, r)
			return
		}
		answer(string(mixed))(w, r)
	})
	uris := []string{srv.URL + "/mixed", srv.URL + "/only"}
	st := storeWith(t, raYAML(uris...))
	logs := fetcherOn(t, st, jwks.Settings{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	fs := settled(t, st, uris...)

	v, e, _ := jwksValue(fs, uris[0])
	set, err := filestore.ParseJWKS(v)
	if e != "" || err != nil || len(set.Keys) != 1 || set.Keys[0].KeyID != "ec-public" || !set.Keys[0].IsPublic() {
		t.Fatalf("mixed set: stored %q (error %q, %v); want the EC public key only", v, e, err)
	}
	ws := warningsOf(fs, store.CodeJWKSFetchFailed, "jwtRules[0].jwksUri")
	if len(ws) != 1 || !strings.Contains(ws[0], "keys[0] refused") || !strings.Contains(ws[0], "keys[1] refused") || !strings.Contains(ws[0], "keys[2] refused") {
		t.Errorf("mixed set: VM1012 warnings %q, want one naming the three refused keys", ws)
	}
	if v, e, _ := jwksValue(fs, uris[1]); v != "" || !strings.Contains(e, "no public signature key") {
		t.Errorf("private-only set: keys %q, error %q; want it refused", v, e)
	}
	keys := providerKeys(t, fs)
	if keys["https://issuer-0.test"] != v || keys["https://issuer-1.test"] != security.FailClosedJWKS {
		t.Errorf("providers' key sets %q, want the public key and the fail-closed set", keys)
	}
	all := everything(t, fs, logs)
	for _, leak := range []string{`"d":`, `\"d\":`, `"p":`, `\"p\":`, `"k":`, `\"k\":`, `"qi"`, `\"qi\"`, unknown, "c2VjcmV0LWhtYWMta2V5"} {
		if strings.Contains(all, leak) {
			t.Errorf("%s is read back", leak)
		}
	}
}
