package sidecar_test

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/sidecar"
)

const meshFieldsYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews.shop.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  location: MESH_INTERNAL
  endpoints:
  - {address: 10.1.0.1, serviceAccount: reviews, locality: us-east/zone-a, labels: {security.istio.io/tlsMode: istio}}
  - {address: 10.1.0.2, serviceAccount: reviews, locality: us-east/zone-b, labels: {security.istio.io/tlsMode: istio}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews.shop.svc.cluster.local
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3, interval: 10s, baseEjectionTime: 30s}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ledger, namespace: fin}
spec:
  hosts: [ledger.fin.svc.cluster.local]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.2.0.1}]
`

// meshFieldsView builds productpage's (shop, us-east/zone-a) View of
// meshFieldsYAML under a MeshConfig.
func meshFieldsView(t *testing.T, meshYAML string) *model.View {
	t.Helper()
	w := productpage()
	w.Locality = "us-east/zone-a"
	return meshView(t, meshYAML, meshFieldsYAML, w)
}

// meshView builds w's View of the config configYAML under a MeshConfig.
func meshView(t *testing.T, meshYAML, configYAML string, w model.Workload) *model.View {
	t.Helper()
	mc, errs := filestore.DecodeMeshConfig("mesh.yaml", []byte(meshYAML))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	objs, derrs := filestore.Decode("config.yaml", []byte(configYAML))
	if len(derrs) > 0 {
		t.Fatal(derrs)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	return model.NewView(model.BuildWith(st.Snapshot(), model.MeshFromConfig(mc)), w)
}

func clusterNamed(t *testing.T, v *model.View, name string) *clusterv3.Cluster {
	t.Helper()
	cs, err := sidecar.Clusters(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}

// TestMeshAutoMTLSAndExportTo: under Istio's defaults a mesh-internal
// service gets automatic mTLS and a ServiceEntry of another namespace is
// visible; enableAutoMtls: false leaves the cluster plaintext, and
// defaultServiceExportTo: ["."] hides the other namespace's service.
func TestMeshAutoMTLSAndExportTo(t *testing.T) {
	const reviews, ledger = "outbound|9080||reviews.shop.svc.cluster.local", "outbound|7070||ledger.fin.svc.cluster.local"
	v := meshFieldsView(t, "{}")
	if c := clusterNamed(t, v, reviews); c == nil || len(c.GetTransportSocketMatches()) == 0 {
		t.Fatalf("default mesh: reviews cluster %v, want automatic mTLS matches", c)
	}
	if clusterNamed(t, v, ledger) == nil {
		t.Fatal("default mesh: the fin namespace's service is not visible")
	}
	v = meshFieldsView(t, "enableAutoMtls: false\ndefaultServiceExportTo: [\".\"]\n")
	if c := clusterNamed(t, v, reviews); c == nil || len(c.GetTransportSocketMatches()) > 0 || c.GetTransportSocket() != nil {
		t.Fatalf("enableAutoMtls false: reviews cluster %v, want plaintext", c)
	}
	if clusterNamed(t, v, ledger) != nil {
		t.Fatal(`defaultServiceExportTo ["."]: the fin namespace's service is visible from shop`)
	}
}

// TestMeshLocalityLB: with outlier detection, Istio's default
// localityLbSetting (enabled) puts the proxy's own zone first and the other
// zone at priority 1; the mesh's localityLbSetting {enabled: false} turns
// that off for clusters whose DestinationRule sets none.
func TestMeshLocalityLB(t *testing.T) {
	priorities := func(v *model.View) map[string]uint32 {
		t.Helper()
		eps, err := sidecar.Endpoints(v)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint32{}
		for _, cla := range eps {
			if cla.GetClusterName() != "outbound|9080||reviews.shop.svc.cluster.local" {
				continue
			}
			for _, l := range cla.GetEndpoints() {
				out[l.GetLocality().GetZone()] = l.GetPriority()
			}
		}
		return out
	}
	if p := priorities(meshFieldsView(t, "{}")); p["zone-a"] != 0 || p["zone-b"] != 1 {
		t.Fatalf("default mesh: priorities %v, want zone-a 0, zone-b 1", p)
	}
	if p := priorities(meshFieldsView(t, "localityLbSetting: {enabled: false}\n")); p["zone-a"] != 0 || p["zone-b"] != 0 {
		t.Fatalf("locality LB disabled: priorities %v, want all 0", p)
	}
}
