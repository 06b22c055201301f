package controlplane_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

// vmesh serve fetches a RequestAuthentication's jwksUri from an address
// jwksAllowedCIDRs allows (the fetcher is wired in as a Store source): the
// key set appears as a JWKS object in /debug/config?kind=JWKS, and a URI
// that fails is warning VM1012 with the RequestAuthentication's file and
// field. An allowed range wider than one address makes each fetched rule
// warning VM1014 in /debug and vmesh_config_warnings; the key server's own
// address alone does not.
func TestServeFetchesJWKS(t *testing.T) {
	for _, c := range []struct {
		allowed      string
		unrestricted int
	}{{"127.0.0.1/32", 0}, {"127.0.0.0/8", 2}} {
		t.Run(c.allowed, func(t *testing.T) {
			ks := newJWKSServer(t)
			dir := jwksConfig(t, ks.URL+"/keys", ks.URL+"/missing")
			cfg := controlplane.DefaultConfig()
			cfg.ConfigDir = dir
			cfg.JWKSAllowedCIDRs = []string{c.allowed}
			cp := start(t, cfg)
			waitReady(t, cp)
			waitJWKSConfig(t, cp, "the key set fetched and the 404 warned", func(dc filestore.DebugConfig) bool {
				var fetched, warned bool
				unrestricted := 0
				for _, o := range dc.Objects {
					fetched = fetched || (o.Kind == store.KindJWKS && o.Name == ks.URL+"/keys" && strings.Contains(string(o.Spec), ks.kid))
				}
				for _, w := range dc.Warnings {
					warned = warned || (w.Code == store.CodeJWKSFetchFailed && w.File == "jwt.yaml" && w.Field == "jwtRules[1].jwksUri")
					if w.Code == store.CodeJWKSFetchUnrestricted && w.File == "jwt.yaml" && strings.Contains(w.Message, c.allowed) {
						unrestricted++
					}
				}
				return fetched && warned && unrestricted == c.unrestricted
			})
			want := fmt.Sprintf(`vmesh_config_warnings{code="VM1014",source="jwks"} %d`, c.unrestricted)
			if _, body := get(t, "http://"+cp.HTTPAddr()+"/metrics"); c.unrestricted > 0 && !strings.Contains(body, want) {
				t.Errorf("metrics do not count the VM1014 warnings of the jwks source (%s):\n%s", want, grepLines(body, "vmesh_config_warnings"))
			}
		})
	}
}

// waitJWKSConfig polls /debug/config?kind=JWKS until cond holds, with a
// deadline.
func waitJWKSConfig(t *testing.T, cp *controlplane.ControlPlane, what string, cond func(filestore.DebugConfig) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := get(t, "http://"+cp.HTTPAddr()+"/debug/config?kind=JWKS")
		var dc filestore.DebugConfig
		if err := json.Unmarshal([]byte(body), &dc); err != nil {
			t.Fatal(err)
		}
		if cond(dc) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s:\n%s", what, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jwksServer is a key server on loopback: /keys is a valid key set whose
// kid is unique to the test, /creds a cloud credential document, /mixed a
// key set with a private key (its "d" is privateD) beside the public one,
// anything else 404. It counts the requests it gets.
type jwksServer struct {
	*httptest.Server
	kid, secret, privateD string
	calls                 atomic.Int64
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func newJWKSServer(t *testing.T) *jwksServer {
	t.Helper()
	ks := &jwksServer{kid: "loopback-marker-" + randomHex(t), secret: "AKIA-marker-" + randomHex(t)}
	pub, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &pub.PublicKey, KeyID: ks.kid, Algorithm: "RS256", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	privJSON, err := json.Marshal(jose.JSONWebKey{Key: priv, KeyID: "private", Algorithm: "RS256"})
	if err != nil {
		t.Fatal(err)
	}
	var pm map[string]any
	if err := json.Unmarshal(privJSON, &pm); err != nil {
		t.Fatal(err)
	}
	ks.privateD = pm["d"].(string)
	mixed := fmt.Sprintf(`{"keys":[%s,%s]}`, privJSON, strings.TrimSuffix(strings.TrimPrefix(string(keys), `{"keys":[`), `]}`))
	bodies := map[string]string{
		"/keys":  string(keys),
		"/creds": `{"Code":"Success","AccessKeyId":"ASIA-x","SecretAccessKey":"` + ks.secret + `"}`,
		"/mixed": mixed,
	}
	ks.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ks.calls.Add(1)
		b, ok := bodies[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(b))
	}))
	t.Cleanup(ks.Close)
	return ks
}

// jwksConfig writes a config directory with a ServiceEntry for the api
// workload (10.0.0.5) and a RequestAuthentication selecting it whose
// jwtRules[i] names uris[i]; it returns the directory.
func jwksConfig(t *testing.T, uris ...string) string {
	t.Helper()
	dir := t.TempDir()
	yaml := `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: shop}
spec:
  selector: {matchLabels: {app: api}}
  jwtRules:
`
	for i, u := range uris {
		yaml += fmt.Sprintf("  - {issuer: \"https://issuer-%d.test\", jwksUri: %q}\n", i, u)
	}
	yaml += `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.shop.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  endpoints: [{address: 10.0.0.5, labels: {app: api}, serviceAccount: api}]
`
	if err := os.WriteFile(filepath.Join(dir, "jwt.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// jwksBlockedCIDRs keeps vmesh serve from fetching key sets from the
// ranges it names, allowed ones included: with loopback allowed and
// blocked, the key set on loopback is warning VM1012 naming the range, and
// nothing is fetched; a range that is not a CIDR is an error at start
// naming the field.
func TestServeBlocksJWKSCIDRs(t *testing.T) {
	ks := newJWKSServer(t)
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = jwksConfig(t, ks.URL+"/keys")
	cfg.JWKSAllowedCIDRs = []string{"127.0.0.0/8"}
	cfg.JWKSBlockedCIDRs = []string{"127.0.0.0/8"}
	cp := start(t, cfg)
	waitReady(t, cp)
	waitJWKSConfig(t, cp, "a VM1012 warning naming the blocked range", func(dc filestore.DebugConfig) bool {
		for _, o := range dc.Objects {
			if strings.Contains(string(o.Spec), ks.kid) {
				t.Fatalf("a key set was fetched from a blocked range: %s", o.Name)
			}
		}
		for _, w := range dc.Warnings {
			if w.Code == store.CodeJWKSFetchFailed && w.File == "jwt.yaml" && w.Field == "jwtRules[0].jwksUri" &&
				strings.Contains(w.Message, "in the blocked range 127.0.0.0/8") {
				return true
			}
		}
		return false
	})
	if n := ks.calls.Load(); n != 0 {
		t.Errorf("the blocked key server got %d requests", n)
	}

	cfg.JWKSBlockedCIDRs = []string{"10.0.0.0/8", "169.254.0/16"}
	if _, err := controlplane.New(cfg, nil); err == nil || !strings.Contains(err.Error(), `jwksBlockedCIDRs[1] "169.254.0/16"`) {
		t.Fatalf("New with a bad blocked range: %v", err)
	}
	cfg.JWKSBlockedCIDRs = nil
	cfg.JWKSAllowedCIDRs = []string{"localhost"}
	if _, err := controlplane.New(cfg, nil); err == nil || !strings.Contains(err.Error(), `jwksAllowedCIDRs[0] "localhost"`) {
		t.Fatalf("New with a bad allowed range: %v", err)
	}
}

// sidecarLDS connects as the api workload's Envoy sidecar, asks for its
// listeners and returns them as JSON.
func sidecarLDS(t *testing.T, cp *controlplane.ControlPlane, id string) string {
	t.Helper()
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": "shop", "LABELS": map[string]any{"app": "api"}, "INSTANCE_IPS": "10.0.0.5", "SERVICE_ACCOUNT": "api"})
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := adsStream(t, cp.XDSAddr())
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: id, Metadata: md}, TypeUrl: resourcev3.ListenerType}); err != nil {
		t.Fatal(err)
	}
	resp, err := recvWithin(t, stream, 30*time.Second)
	if err != nil {
		t.Fatalf("LDS: %v", err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ListenerType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), "jwt_authn") {
		t.Fatalf("the sidecar's listeners have no JWT filter: the checks below would prove nothing:\n%s", js)
	}
	return string(js)
}

// everythingServed is what vmesh serve shows of its config: the sidecar's
// listeners, /debug/config, /debug/config_dump and /ui/proxy for it,
// /ui/ and /metrics.
func everythingServed(t *testing.T, cp *controlplane.ControlPlane, id, lds string) map[string]string {
	t.Helper()
	base := "http://" + cp.HTTPAddr()
	out := map[string]string{"LDS": lds}
	for _, path := range []string{"/debug/config", "/debug/config?kind=JWKS", "/debug/config_dump?proxy=" + url.QueryEscape(id), "/ui/proxy?id=" + url.QueryEscape(id), "/ui/", "/metrics"} {
		code, body := get(t, base+path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		out[path] = body
	}
	return out
}

// A RequestAuthentication can no longer make vmesh serve read what it
// reaches and show it: by default a key server on loopback is refused
// (VM1012, fail closed) and gets no request, and nothing it holds (a key
// set's unique kid, a credential) appears in the sidecar's listeners,
// /debug/config, /debug/config_dump, the console's proxy page or
// /metrics. With the server's address allowed, its key set is fetched
// and shown (so the pages would show a leak), while a credential document
// is refused and never shown, and a private key's "d" never leaves.
func TestFaultJWKSServeNeverReadsBack(t *testing.T) {
	ks := newJWKSServer(t)
	dir := jwksConfig(t, ks.URL+"/keys", ks.URL+"/creds", ks.URL+"/mixed")
	const id = "api-1.shop"

	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cp := start(t, cfg)
	waitReady(t, cp)
	waitJWKSConfig(t, cp, "three VM1012 warnings naming loopback", func(dc filestore.DebugConfig) bool {
		n := 0
		for _, w := range dc.Warnings {
			if w.Code == store.CodeJWKSFetchFailed && w.File == "jwt.yaml" && strings.Contains(w.Message, "127.0.0.1 is a loopback address") {
				n++
			}
		}
		return n == 3
	})
	for what, body := range everythingServed(t, cp, id, sidecarLDS(t, cp, id)) {
		for _, leak := range []string{ks.kid, ks.secret, ks.privateD} {
			if strings.Contains(body, leak) {
				t.Errorf("%s shows %s from a refused loopback key server", what, leak)
			}
		}
	}
	if n := ks.calls.Load(); n != 0 {
		t.Fatalf("the loopback key server got %d requests by default", n)
	}

	cfg.JWKSAllowedCIDRs = []string{"127.0.0.1/32"}
	cp = start(t, cfg)
	waitReady(t, cp)
	waitJWKSConfig(t, cp, "the allowed key set fetched, the credentials refused", func(dc filestore.DebugConfig) bool {
		var fetched, refused bool
		for _, o := range dc.Objects {
			fetched = fetched || (o.Name == ks.URL+"/keys" && strings.Contains(string(o.Spec), ks.kid))
		}
		for _, w := range dc.Warnings {
			refused = refused || (w.Code == store.CodeJWKSFetchFailed && w.Field == "jwtRules[1].jwksUri" && strings.Contains(w.Message, `no "keys" member`))
		}
		return fetched && refused
	})
	served := everythingServed(t, cp, id, sidecarLDS(t, cp, id))
	for _, what := range []string{"LDS", "/debug/config?kind=JWKS", "/debug/config_dump?proxy=" + url.QueryEscape(id), "/ui/proxy?id=" + url.QueryEscape(id)} {
		if !strings.Contains(served[what], ks.kid) {
			t.Errorf("%s does not show the allowed key set: the checks for leaks prove nothing", what)
		}
	}
	for what, body := range served {
		for _, leak := range []string{ks.secret, ks.privateD} {
			if strings.Contains(body, leak) {
				t.Errorf("%s shows %s from the key server", what, leak)
			}
		}
	}
}
