package model_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
)

// TestMeshConfigFromTheSource: a MeshConfig in the config (a source's
// mesh.yaml) replaces the mesh settings BuildWith is given, except the
// root namespace and trust domain (the control plane's); a later build
// without it returns to them, also through Rebuild.
func TestMeshConfigFromTheSource(t *testing.T) {
	base := model.Mesh{RootNamespace: "mesh-root", TrustDomain: "corp.local", ConnectTimeout: 3 * time.Second}
	st := store.NewStore()
	src := store.Source{Name: "git:test"}
	mc := &meshv1alpha1.MeshConfig{
		TrustDomain: "ignored.local", RootNamespace: "ignored", ConnectTimeout: durationpb.New(2 * time.Second),
		OutboundTrafficPolicy: &meshv1alpha1.MeshConfig_OutboundTrafficPolicy{Mode: meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY},
	}
	se := &store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "default", Name: "a"},
		Spec: &networking.ServiceEntry{Hosts: []string{"a.example.com"}, Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}}}
	if err := st.Replace(src, []*store.Object{se, {Key: store.MeshConfigKey, Spec: mc}}); err != nil {
		t.Fatal(err)
	}
	s := model.BuildWith(st.Snapshot(), base)
	if !s.Mesh.RegistryOnly || s.Mesh.ConnectTimeout != 2*time.Second {
		t.Fatalf("mesh %+v, want the source's REGISTRY_ONLY and 2s connect timeout", s.Mesh)
	}
	if s.Mesh.TrustDomain != "corp.local" || s.Mesh.RootNamespace != "mesh-root" {
		t.Fatalf("mesh %+v: the trust domain and root namespace must stay the control plane's", s.Mesh)
	}
	sub := st.Subscribe()
	defer sub.Close()
	if err := st.Replace(src, []*store.Object{se}); err != nil {
		t.Fatal(err)
	}
	r := model.Rebuild(s, st.Snapshot(), sub.Take().Keys)
	if r.Mesh.RegistryOnly || r.Mesh.ConnectTimeout != 3*time.Second {
		t.Fatalf("after mesh.yaml is removed: %+v, want the given settings again", r.Mesh)
	}
	if d := model.Compare(s, r); !d.Global {
		t.Fatal("a mesh settings change is not a global diff")
	}
}

// TestSourceMeshConfigRebuildsAreNotGlobal: two full builds of the same
// config with a source MeshConfig (its messages read again each time) do
// not differ globally, so no proxy is regenerated for nothing.
func TestSourceMeshConfigRebuildsAreNotGlobal(t *testing.T) {
	mc, errs := filestore.DecodeMeshConfig("mesh.yaml", []byte(`
defaultHttpRetryPolicy: {attempts: 3}
localityLbSetting: {enabled: true}
extensionProviders:
- name: authz
  envoyExtAuthzGrpc: {service: authz.default.svc.cluster.local, port: 9000}
`))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "git:test"}, []*store.Object{{Key: store.MeshConfigKey, Spec: mc}}); err != nil {
		t.Fatal(err)
	}
	a := model.BuildWith(st.Snapshot(), model.DefaultMesh())
	mc2, _ := filestore.DecodeMeshConfig("mesh.yaml", []byte("defaultHttpRetryPolicy: {attempts: 3}\nlocalityLbSetting: {enabled: true}\nextensionProviders:\n- name: authz\n  envoyExtAuthzGrpc: {service: authz.default.svc.cluster.local, port: 9000}\n"))
	if err := st.Replace(store.Source{Name: "git:test"}, []*store.Object{{Key: store.MeshConfigKey, Spec: mc2}}); err != nil {
		t.Fatal(err)
	}
	b := model.BuildWith(st.Snapshot(), model.DefaultMesh())
	if d := model.Compare(a, b); d.Global {
		t.Fatal("the same mesh settings read twice make a global diff")
	}
	if b.Mesh.ExtensionProvider("authz") == nil {
		t.Fatal("the source's extension provider is not in the mesh settings")
	}
}
