package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/internal/xdstest"
)

const gatewayAPIConfig = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: web, namespace: shop}
spec:
  hosts: [web.shop.svc.cluster.local]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.5}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP, hostname: "*.example.com"}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  hostnames: [www.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}}]
    backendRefs: [{name: web, port: 8080}]
`

// TestGatewayAPIRouterProxyConfig: a Gateway API Gateway and an HTTPRoute
// bound to it, read from a config folder by vmesh serve, configure the
// router node labelled with the Gateway's name, as `vmesh proxy-config
// routes` on that node shows: the route's host, path and backend. The
// route's status (Accepted, ResolvedRefs) is in /debug/config, vmesh analyze
// and vmesh status, and follows a change of the folder.
func TestGatewayAPIRouterProxyConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte(gatewayAPIConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cp, _ := servePlane(t, "", func(c *controlplane.Config) {
		c.ConfigDir, c.DebounceQuiet, c.DebounceMax = dir, 20*time.Millisecond, 200*time.Millisecond
	})
	server := cp.HTTPAddr()

	const id = "router~10.0.0.9~edge-1.shop~shop.svc.cluster.local"
	c := newRawClient(t, cp.XDSAddr(), id, "shop")
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": "shop", "LABELS": map[string]any{gatewayapi.GatewayNameLabel: "edge"}})
	if err != nil {
		t.Fatal(err)
	}
	c.node = &corev3.Node{Id: id, Metadata: md} // an Envoy router, not a gRPC client
	c.subscribe(resourcev3.ClusterType)
	c.next(resourcev3.ClusterType, "")
	c.subscribe(resourcev3.ListenerType)
	c.next(resourcev3.ListenerType, "")
	c.subscribe(resourcev3.RouteType, "http.80")
	c.next(resourcev3.RouteType, "")

	var out string
	xdstest.Eventually(t, "the router's routes in proxy-config", func() bool {
		out, _ = runVMesh(t, "proxy-config", "routes", id, "--server", server, "-o", "yaml")
		return strings.Contains(out, "www.example.com")
	})
	for _, want := range []string{"name: http.80", "- www.example.com", "pathSeparatedPrefix: /api", "cluster: outbound|8080||web.shop.svc.cluster.local"} {
		if !strings.Contains(out, want) {
			t.Errorf("proxy-config routes -o yaml lacks %q:\n%s", want, out)
		}
	}
	table, code := runVMesh(t, "proxy-config", "routes", id, "--server", server)
	if code != 0 || !strings.Contains(table, "www.example.com") || !strings.Contains(table, "http.80") {
		t.Errorf("proxy-config routes (exit %d):\n%s", code, table)
	}

	// The route's status, which an API server would hold: /debug/config
	// and vmesh analyze show it.
	var dc filestore.DebugConfig
	if err := getJSON(server, "/debug/config", &dc); err != nil {
		t.Fatal(err)
	}
	if len(dc.RouteStatus) != 1 || dc.RouteStatus[0].Object != "HTTPRoute/shop/web" || len(dc.RouteStatus[0].Parents) != 1 {
		t.Fatalf("/debug/config routeStatus %+v", dc.RouteStatus)
	}
	const accepted = "HTTPRoute/shop/web: parent Gateway/shop/edge: Accepted=True (Accepted) ResolvedRefs=True (ResolvedRefs)"
	if got := dc.RouteStatus[0].String(); !strings.HasSuffix(got, accepted) {
		t.Errorf("/debug/config routeStatus: %s, want ...%s", got, accepted)
	}
	out, _ = runVMesh(t, "analyze", dir)
	if !strings.Contains(out, "gateway.yaml:17: "+accepted) {
		t.Errorf("vmesh analyze lacks the route's status %q:\n%s", accepted, out)
	}
	// vmesh status: a line per route and parentRef under the replica.
	out, code = runVMesh(t, "status", "--server", server)
	if code != 0 || !hasLine(out, "route ", "gateway.yaml:17: "+accepted) {
		t.Errorf("vmesh status (exit %d) lacks the route's status %q:\n%s", code, accepted, out)
	}
	// A backend nothing defines: ResolvedRefs False, BackendNotFound.
	broken := strings.Replace(gatewayAPIConfig, "backendRefs: [{name: web, port: 8080}]", "backendRefs: [{name: gone, port: 8080}]", 1)
	if err := os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	const notFound = "ResolvedRefs=False (BackendNotFound: no ServiceEntry defines gone.shop.svc.cluster.local)"
	out, _ = runVMesh(t, "analyze", dir)
	if !strings.Contains(out, notFound) {
		t.Errorf("vmesh analyze lacks BackendNotFound:\n%s", out)
	}
	// The running control plane reloads the folder: vmesh status shows
	// the new status.
	xdstest.Eventually(t, "vmesh status showing BackendNotFound", func() bool {
		out, _ = runVMesh(t, "status", "--server", server)
		return hasLine(out, "route ", notFound)
	})
}

// hasLine reports whether a line of out holds every one of parts, in order.
func hasLine(out string, parts ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := line, true
		for _, p := range parts {
			i := strings.Index(rest, p)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(p):]
		}
		if ok {
			return true
		}
	}
	return false
}
