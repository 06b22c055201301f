package filestore_test

import (
	"strings"
	"testing"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
)

// extensionProviders for CUSTOM policies: Istio's checks of the ext_authz
// providers, and a valid one reaches the model's mesh settings.
func TestMeshConfigExtAuthzProviders(t *testing.T) {
	good := "extensionProviders:\n- name: authz\n  envoyExtAuthzHttp: {service: authz.shop.internal, port: 8000, pathPrefix: /check, statusOnError: \"503\"}\n"
	mc, errs := filestore.DecodeMeshConfig("mesh.yaml", []byte(good))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if p := model.MeshFromConfig(mc).ExtensionProvider("authz"); p.GetEnvoyExtAuthzHttp().GetPort() != 8000 {
		t.Errorf("provider %v not in the mesh settings", p)
	}
	for _, tc := range []struct{ yaml, field string }{
		{"extensionProviders:\n- name: a\n  envoyExtAuthzHttp: {service: x, port: 0}\n", "extensionProviders[0].envoyExtAuthzHttp.port"},
		{"extensionProviders:\n- name: a\n  envoyExtAuthzGrpc: {port: 9000}\n", "extensionProviders[0].envoyExtAuthzGrpc.service"},
		{"extensionProviders:\n- name: a\n  envoyExtAuthzHttp: {service: x, port: 80, pathPrefix: check}\n", "extensionProviders[0].envoyExtAuthzHttp.pathPrefix"},
		{"extensionProviders:\n- name: a\n  envoyExtAuthzGrpc: {service: x, port: 80, statusOnError: \"999\"}\n", "extensionProviders[0].envoyExtAuthzGrpc.statusOnError"},
	} {
		_, errs := filestore.DecodeMeshConfig("mesh.yaml", []byte(tc.yaml))
		found := false
		for _, e := range errs {
			found = found || strings.Contains(e.Field, tc.field)
		}
		if !found {
			t.Errorf("%q: errors %v, want one at %s", tc.yaml, errs, tc.field)
		}
	}
}
