package controlplane_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/agents/caclient"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

// TestSecurePortCAAndXDSOverMTLS: a VM with a bootstrap token gets a
// certificate from the secure port, then uses it for xDS there; without a
// certificate xDS is refused.
func TestSecurePortCAAndXDSOverMTLS(t *testing.T) {
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = "../../../examples/quickstart"
	cp := start(t, cfg)
	waitReady(t, cp)

	token, _, err := cp.CA().CreateToken(ca.TokenRequest{Namespace: "demo", ServiceAccount: "greeter", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	roots := cp.CA().TrustBundle().CertPool()
	dial := func(cert *tls.Certificate) *grpc.ClientConn {
		tc := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		cc, err := grpc.NewClient(cp.SecureAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	var adsAs func(cc *grpc.ClientConn, namespace string) (*discoveryv3.DiscoveryResponse, error)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pair, err := caclient.Fetch(ctx, dial(nil), caclient.Request{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	if got := pair.Leaf.URIs[0].String(); got != "spiffe://cluster.local/ns/demo/sa/greeter" {
		t.Fatalf("SPIFFE ID %s", got)
	}

	ads := func(cc *grpc.ClientConn) (*discoveryv3.DiscoveryResponse, error) { return adsAs(cc, "demo") }
	adsAs = func(cc *grpc.ClientConn, namespace string) (*discoveryv3.DiscoveryResponse, error) {
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			return nil, err
		}
		md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": namespace})
		if err := stream.Send(&discoveryv3.DiscoveryRequest{
			Node:          &corev3.Node{Id: "vm-1", Metadata: md},
			TypeUrl:       resourcev3.ListenerType,
			ResourceNames: []string{"greeter.demo.vmesh.internal:50051"},
		}); err != nil {
			_, err = stream.Recv() // the stream's status
			return nil, err
		}
		return stream.Recv()
	}
	if _, err := ads(dial(nil)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("xDS without a certificate: %v, want Unauthenticated", err)
	}
	resp, err := ads(dial(&pair.Certificate))
	if err != nil {
		t.Fatalf("xDS over mTLS: %v", err)
	}
	if _, err := adsAs(dial(&pair.Certificate), "finance"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a node claiming another namespace than its certificate: %v, want PermissionDenied", err)
	}
	if len(resp.Resources) != 1 {
		t.Fatalf("listener response: %d resources: %v", len(resp.Resources), resp)
	}
}
