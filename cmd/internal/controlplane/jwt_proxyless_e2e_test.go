package controlplane_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// A proxyless gRPC server (grpc-go has no JWT filter) cannot check a
// request principal: an ALLOW rule that needs one matches nothing, so a
// caller the rule would otherwise admit is refused by the real grpc-go
// server (TestMTLSEndToEnd admits it without the requestPrincipals field)
// — fail closed, never a silent allow.
func TestProxylessRequestPrincipalsFailClosed(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	cfg := strings.Replace(secureConfig(port),
		`  - from: [{source: {namespaces: [secure]}}]`,
		`  - from: [{source: {namespaces: [secure], requestPrincipals: ["https://issuer.test/alice"]}}]`, 1)
	cfg += `---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: secure}
spec:
  selector: {matchLabels: {app: echo}}
  jwtRules: [{issuer: "https://issuer.test", jwks: '{"keys":[]}'}]
`
	if !strings.Contains(cfg, "requestPrincipals") {
		t.Fatal("the ALLOW rule was not rewritten")
	}
	m := startSecureMesh(t, cfg)
	echo := m.enroll("secure", "echo", map[string]string{"app": "echo"}, time.Hour)
	good := m.enroll("secure", "good", nil, time.Hour)
	echo.serve(lis)
	_, err = callUntil(t, good.dial("echo.secure.internal:7070"), codes.PermissionDenied)
	t.Logf("caller of namespace secure, ALLOW needing a request principal: %v", err)
}
