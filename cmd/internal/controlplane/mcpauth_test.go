package controlplane_test

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
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
