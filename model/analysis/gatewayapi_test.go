package analysis_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

// TestAnalyzeGatewayAPIRoutes: vmesh analyze converts the Gateway API
// routes as the control plane does and reports what is not applied
// (VM1021) at the route's lines; the generated VirtualService is analysed
// with the rest, its findings at the route's document.
func TestAnalyzeGatewayAPIRoutes(t *testing.T) {
	doc := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: shop}
spec:
  hosts: [echo.shop.internal]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: echo, namespace: shop}
spec:
  parentRefs:
  - {group: networking.istio.io, kind: ServiceEntry, name: echo}
  - {name: edge}
  rules:
  - backendRefs: [{group: networking.istio.io, kind: Hostname, name: echo-v9.shop.internal, port: 80}]
`
	objs, errs := filestore.Decode("routes.yaml", []byte(doc))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := wheres(analyze(t, objs, true))
	want := []where{
		{15, "parentRefs[1]", store.CodeGatewayAPINotApplied},
		{17, "rules[0].backendRefs[0]", store.CodeGatewayAPINotApplied},
		{17, "http[0].route[0].destination.host", store.CodeReferencedResourceNotFound},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(where{})); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}
