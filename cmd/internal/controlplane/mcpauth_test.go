package controlplane_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/vmesh/vmesh/agents/caclient"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestMCPOnThePlaintextPort: the mesh's config is served over MCP on the
// plaintext xDS port only with mcp.plaintext (--mcp-plaintext); without
// it, an MCP stream there ends PermissionDenied, while proxies are served.
func TestMCPOnThePlaintextPort(t *testing.T) {
	for _, plaintext := range []bool{false, true} {
		cfg := controlplane.DefaultConfig()
		cfg.ConfigDir = "../../../examples/quickstart/config"
		cfg.MCP.Plaintext = plaintext
		cp := start(t, cfg)
		waitReady(t, cp)
		conn, err := grpc.NewClient(cp.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		node := &corev3.Node{Id: "sidecar~10.0.0.1~istiod.istio-system~istio-system.svc.cluster.local"}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: "networking.istio.io/v1/VirtualService"}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if !plaintext {
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("without mcp.plaintext: %v, want PermissionDenied", err)
			}
			continue
		}
		if err != nil || resp.GetTypeUrl() != "networking.istio.io/v1/VirtualService" || len(resp.GetResources()) != 1 {
			t.Errorf("with mcp.plaintext: %v %v, want the quickstart's VirtualService", resp, err)
		}
	}
}

// TestMCPOnTheSecurePort: on the secure port, a mesh certificate of the
// root namespace (istio-system) or named by mcp.identities reads the
// config over MCP; any other mesh identity is refused PermissionDenied.
func TestMCPOnTheSecurePort(t *testing.T) {
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = "../../../examples/quickstart/config"
	cfg.MCP.Identities = []string{"spiffe://cluster.local/ns/demo/sa/reader"}
	cp := start(t, cfg)
	waitReady(t, cp)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc0 := &tls.Config{RootCAs: cp.CA().TrustBundle().CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
	boot, err := grpc.NewClient(cp.SecureAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc0)))
	if err != nil {
		t.Fatal(err)
	}
	defer boot.Close()
	for _, tc := range []struct {
		ns, sa string
		want   codes.Code
	}{
		{"istio-system", "istiod", codes.OK},
		{"demo", "reader", codes.OK},
		{"demo", "greeter", codes.PermissionDenied},
	} {
		token, _, err := cp.CA().CreateToken(ca.TokenRequest{Namespace: tc.ns, ServiceAccount: tc.sa, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		pair, err := caclient.Fetch(ctx, boot, caclient.Request{Token: token, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		tc1 := tc0.Clone()
		tc1.Certificates = []tls.Certificate{pair.Certificate}
		conn, err := grpc.NewClient(cp.SecureAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc1)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		meta, _ := structpb.NewStruct(map[string]any{"GENERATOR": "api", "NAMESPACE": tc.ns, "SERVICE_ACCOUNT": tc.sa})
		node := &corev3.Node{Id: "reader." + tc.ns, Metadata: meta}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: "networking.istio.io/v1/ServiceEntry"}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if status.Code(err) != tc.want {
			t.Errorf("%s/%s: %v, want %v", tc.ns, tc.sa, err, tc.want)
			continue
		}
		if tc.want == codes.OK && len(resp.GetResources()) != 1 {
			t.Errorf("%s/%s: %d ServiceEntries, want the quickstart's one", tc.ns, tc.sa, len(resp.GetResources()))
		}
	}
}
