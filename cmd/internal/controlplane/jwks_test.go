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
// RequestAuthentication's file and field.
func TestServeFetchesJWKS(t *testing.T) {
	const keys = `{"keys":[{"kty":"RSA","e":"AQAB","n":"0xObjM0UvS_oaazjpEYlAbwctEJ4L8pH3OuTb7qth7gUwqet"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/keys" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(keys))
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
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
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cp := start(t, cfg)
	waitReady(t, cp)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := get(t, "http://"+cp.HTTPAddr()+"/debug/config?kind=JWKS")
		var dc filestore.DebugConfig
		if err := json.Unmarshal([]byte(body), &dc); err != nil {
			t.Fatal(err)
		}
		var fetched, warned bool
		for _, o := range dc.Objects {
			fetched = fetched || (o.Kind == filestore.KindJWKS && o.Name == srv.URL+"/keys" && strings.Contains(string(o.Spec), "0xObjM0Uv"))
		}
		for _, w := range dc.Warnings {
			warned = warned || (w.Code == filestore.CodeJWKSFetchFailed && w.File == "jwt.yaml" && w.Field == "jwtRules[1].jwksUri")
		}
		if fetched && warned {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fetched %v, warned %v:\n%s", fetched, warned, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
