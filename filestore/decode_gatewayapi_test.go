package filestore

import (
	"strings"
	"testing"

	"github.com/vmesh/vmesh/store"
)

// TestDecodeGatewayAPIKinds: every Gateway API kind decodes from YAML into
// its Store kind, validated against its CRD, defaults filled in; a problem
// names the file, the line and the field inside spec.
func TestDecodeGatewayAPIKinds(t *testing.T) {
	doc := `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: istio}
spec: {controllerName: istio.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: echo, namespace: shop}
spec:
  parentRefs: [{name: echo, kind: ServiceEntry, group: networking.istio.io}]
  rules: [{backendRefs: [{name: echo, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: db, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: tls, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  hostnames: [tls.example.com]
  rules: [{backendRefs: [{name: tls, port: 443}]}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: from-edge, namespace: shop}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: edge}]
  to: [{group: "", kind: Service}]
`
	d := DecodeFile("gw.yaml", []byte(doc), Limits{})
	if len(d.Errors) > 0 {
		t.Fatalf("errors: %v", d.Errors)
	}
	want := []store.Kind{store.KindGatewayClass, store.KindKubernetesGateway, store.KindHTTPRoute, store.KindGRPCRoute, store.KindTCPRoute, store.KindTLSRoute, store.KindReferenceGrant}
	if len(d.Objects) != len(want) {
		t.Fatalf("%d objects, want %d", len(d.Objects), len(want))
	}
	for i, o := range d.Objects {
		if o.Kind != want[i] {
			t.Errorf("object %d is a %s, want %s", i, o.Kind, want[i])
		}
	}
	route := d.Objects[2]
	if route.Origin.Line != 13 || route.FieldLine("rules[0].backendRefs[0]") != 18 {
		t.Errorf("HTTPRoute at line %d, its backendRef at %d; want 13 and 18", route.Origin.Line, route.FieldLine("rules[0].backendRefs[0]"))
	}

	bad := `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules:
  - matches:
    - path: {type: PathPrefix, value: api}
    backendRefs: [{name: web, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1alpha1
kind: HTTPRoute
metadata: {name: old}
spec: {}
`
	d = DecodeFile("bad.yaml", []byte(bad), Limits{})
	if len(d.Objects) != 0 {
		t.Fatalf("invalid documents decoded: %v", d.Objects)
	}
	got := make([]string, len(d.Errors))
	for i, e := range d.Errors {
		got[i] = e.Error()
	}
	wantErrs := []string{
		"bad.yaml:8: HTTPRoute/shop/web: rules[0].matches[0].path: value must be an absolute path and start with '/'",
		`bad.yaml:11: apiVersion: "gateway.networking.k8s.io/v1alpha1" is not served for HTTPRoute (want gateway.networking.k8s.io/v1|v1beta1)`,
	}
	if len(got) != len(wantErrs) {
		t.Fatalf("errors:\n%s", strings.Join(got, "\n"))
	}
	for i := range wantErrs {
		if !strings.HasPrefix(got[i], wantErrs[i]) {
			t.Errorf("error %d:\n got %s\nwant %s...", i, got[i], wantErrs[i])
		}
	}
}
