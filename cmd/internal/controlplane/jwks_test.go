package controlplane_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/filestore"
)

// vmesh serve fetches a RequestAuthentication's jwksUri (the fetcher is
// wired in as a Store source): the key set appears as a JWKS object in
// /debug/config?kind=JWKS, and a URI that fails is warning VM1012 with the
// RequestAuthentication's file and field. With no blocked ranges set, each
// fetched rule is warning VM1014 in /debug and vmesh_config_warnings.
func TestServeFetchesJWKS(t *testing.T) {
	dir, url := jwksConfig(t)
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cp := start(t, cfg)
	waitReady(t, cp)
	waitJWKSConfig(t, cp, "the key set fetched and the 404 warned", func(dc filestore.DebugConfig) bool {
		var fetched, warned, unrestricted bool
		for _, o := range dc.Objects {
			fetched = fetched || (o.Kind == filestore.KindJWKS && o.Name == url+"/keys" && strings.Contains(string(o.Spec), "0xObjM0Uv"))
		}
		for _, w := range dc.Warnings {
			warned = warned || (w.Code == filestore.CodeJWKSFetchFailed && w.File == "jwt.yaml" && w.Field == "jwtRules[1].jwksUri")
			unrestricted = unrestricted || (w.Code == filestore.CodeJWKSFetchUnrestricted && w.File == "jwt.yaml" && w.Field == "jwtRules[0].jwksUri")
		}
		return fetched && warned && unrestricted
	})
	if _, body := get(t, "http://"+cp.HTTPAddr()+"/metrics"); !strings.Contains(body, `vmesh_config_warnings{code="VM1014",source="jwks"} 2`) {
		t.Errorf("metrics do not count the two VM1014 warnings of the jwks source:\n%s", grepLines(body, "vmesh_config_warnings"))
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

// jwksConfig serves a key set on loopback and writes a config directory
// whose RequestAuthentication names it (jwtRules[0]) and a URI that
// answers 404 (jwtRules[1]); it returns the directory and the server's URL.
func jwksConfig(t *testing.T) (dir, url string) {
	t.Helper()
	const keys = `{"keys":[{"kty":"RSA","e":"AQAB","n":"0xObjM0UvS_oaazjpEYlAbwctEJ4L8pH3OuTb7qth7gUwqet"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/keys" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(keys))
	}))
	t.Cleanup(srv.Close)
	dir = t.TempDir()
	yaml := fmt.Sprintf(`apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: shop}
spec:
  jwtRules:
  - issuer: https://issuer.test
    jwksUri: %s/keys
  - issuer: https://broken.test
    jwksUri: %s/missing
`, srv.URL, srv.URL)
	if err := os.WriteFile(filepath.Join(dir, "jwt.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, srv.URL
}

// jwksBlockedCIDRs keeps vmesh serve from fetching key sets from the
// ranges it names: with loopback blocked, the key set on loopback is
// warning VM1012 naming the range, and nothing is fetched; a range that is
// not a CIDR is an error at start naming the field.
func TestServeBlocksJWKSCIDRs(t *testing.T) {
	dir, _ := jwksConfig(t)
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.JWKSBlockedCIDRs = []string{"127.0.0.0/8"}
	cp := start(t, cfg)
	waitReady(t, cp)
	waitJWKSConfig(t, cp, "a VM1012 warning naming the blocked range", func(dc filestore.DebugConfig) bool {
		for _, o := range dc.Objects {
			if strings.Contains(string(o.Spec), "0xObjM0Uv") {
				t.Fatalf("a key set was fetched from a blocked range: %s", o.Name)
			}
		}
		for _, w := range dc.Warnings {
			if w.Code == filestore.CodeJWKSFetchFailed && w.File == "jwt.yaml" && w.Field == "jwtRules[0].jwksUri" &&
				strings.Contains(w.Message, "in the blocked range 127.0.0.0/8") {
				return true
			}
		}
		return false
	})

	cfg.JWKSBlockedCIDRs = []string{"10.0.0.0/8", "169.254.0/16"}
	if _, err := controlplane.New(cfg, nil); err == nil || !strings.Contains(err.Error(), `jwksBlockedCIDRs[1] "169.254.0/16"`) {
		t.Fatalf("New with a bad range: %v", err)
	}
}
