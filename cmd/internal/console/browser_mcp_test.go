package console_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/agents/caclient"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

// mcpTypes are type URLs an istiod's configSources client asks for: five
// kinds vmesh serves, and two it serves nothing of.
var mcpTypes = []string{
	"core/v1alpha1/MeshConfig",
	"networking.istio.io/v1/DestinationRule",
	"networking.istio.io/v1alpha3/EnvoyFilter",
	"networking.istio.io/v1/ServiceEntry",
	"networking.istio.io/v1/VirtualService",
	"networking.istio.io/v1/WorkloadEntry",
	"networking.istio.io/v1/WorkloadGroup",
}

// TestConsoleShowsMCPClient: an MCP client (as istiod's configSources
// client reads vmesh's config, on the secure port with a mesh certificate
// of the root namespace) is a row of the proxies page like any proxy: kind
// mcp, the identity it was let in as, the kinds it reads and the NACK it
// sent with its message; its own page shows the same, per kind. Read in
// headless chromium from a real control plane.
func TestConsoleShowsMCPClient(t *testing.T) {
	ctx := browser(t)
	shots := artifacts(t)
	cp := startPlaneWith(t, func(cfg *controlplane.Config) { cfg.ConfigDir = "../../../examples/quickstart/config" })
	ui := "http://" + cp.HTTPAddr() + "/ui/"
	const id = "istiod-1.istio-system"
	const identity = "spiffe://cluster.local/ns/istio-system/sa/istiod"
	const nack = "DestinationRule demo/greeter: refused by istiod's validation"

	streamCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	stream := openMCPClient(t, streamCtx, cp, id)
	// ACK every response but the DestinationRules, NACKed with a reason,
	// until the test ends.
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			req := &discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(), VersionInfo: resp.GetVersionInfo()}
			if resp.GetTypeUrl() == "networking.istio.io/v1/DestinationRule" {
				req.ErrorDetail = status.New(codes.InvalidArgument, nack).Proto()
			}
			if err := stream.Send(req); err != nil {
				return
			}
		}
	}()

	do(t, ctx, 10*time.Second, "open proxies", chromedp.Navigate(ui+"proxies"))
	live(t, ctx)
	row := `tr.proxy[data-id="` + id + `"][data-role="mcp"]`
	do(t, ctx, 10*time.Second, "the MCP client's row with its NACK", chromedp.WaitVisible(chromedp.CSS(row+`[data-state="NACK"]`)))
	waitText(t, ctx, 5*time.Second, row, "mcp", "istio-system", identity, "reads 5 kinds",
		"DestinationRule, ServiceEntry, VirtualService, WorkloadEntry, WorkloadGroup", "2 other types answered empty", nack)
	if got := text(t, ctx, row+" td.identity"); got != identity {
		t.Errorf("the MCP client's identity cell shows %q, want %s", got, identity)
	}
	if got := text(t, ctx, "#connected"); got != "1" {
		t.Errorf("proxies page says %s connected, want 1 (the MCP client)", got)
	}
	screenshot(t, ctx, shots, "proxies-mcp")

	// Search finds it by its identity.
	do(t, ctx, 10*time.Second, "search for the identity", chromedp.Navigate(ui+"proxies?q=sa/istiod"))
	do(t, ctx, 10*time.Second, "found by identity", chromedp.WaitVisible(chromedp.CSS(row)))

	// Its page: identity, per-kind sync state, what it reads.
	do(t, ctx, 10*time.Second, "open the MCP client",
		chromedp.Evaluate[chromedp.Void](`document.querySelector('tr.proxy[data-role="mcp"] a').click()`),
		chromedp.WaitVisible(chromedp.CSS("#proxy-id")))
	waitText(t, ctx, 5*time.Second, "#identity", "mcp", "istio-system", identity, "let in as")
	waitText(t, ctx, 5*time.Second, "#sync", "VirtualService", "SYNCED", "DestinationRule", "NACK", nack, "networking.istio.io/v1alpha3/EnvoyFilter")
	waitText(t, ctx, 5*time.Second, "#mcp-reads", "DestinationRule, ServiceEntry, VirtualService, WorkloadEntry, WorkloadGroup")
	if body := text(t, ctx, "#data"); strings.Contains(body, "config dump") {
		t.Errorf("the MCP client's page shows a config-dump error:\n%s", body)
	}
	screenshot(t, ctx, shots, "proxy-mcp")
}

// openMCPClient enrols id as istio-system/istiod with the control plane's
// CA and opens an MCP stream on the secure port asking for mcpTypes, as
// istiod's configSources client does (node metadata GENERATOR=api).
func openMCPClient(t *testing.T, ctx context.Context, cp *controlplane.ControlPlane, id string) discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	tc := &tls.Config{RootCAs: cp.CA().TrustBundle().CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
	boot, err := grpc.NewClient(cp.SecureAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	defer boot.Close()
	token, _, err := cp.CA().CreateToken(ca.TokenRequest{Namespace: "istio-system", ServiceAccount: "istiod", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	enrolCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pair, err := caclient.Fetch(enrolCtx, boot, caclient.Request{Token: token, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tc = tc.Clone()
	tc.Certificates = []tls.Certificate{pair.Certificate}
	conn, err := grpc.NewClient(cp.SecureAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := structpb.NewStruct(map[string]any{"GENERATOR": "api", "NAMESPACE": "istio-system", "SERVICE_ACCOUNT": "istiod"})
	for i, typ := range mcpTypes {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: typ}
		if i == 0 {
			req.Node = &corev3.Node{Id: id, Metadata: meta}
		}
		if err := stream.Send(req); errors.Is(err, io.EOF) {
			_, err := stream.Recv()
			t.Fatalf("the MCP stream ended: %v", err)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	return stream
}
