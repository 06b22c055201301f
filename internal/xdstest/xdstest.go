// Package xdstest runs grpc-go's real xDS client and xDS-enabled servers
// against a vmesh xDS address, for tests anywhere in the repository.
package xdstest

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	grpcxds "google.golang.org/grpc/xds"
)

// InboundTemplate is the server listener name template vmesh serves.
const InboundTemplate = "xds.vmesh.io/grpc/lds/inbound/%s"

// Node describes the xDS node a client or server presents.
type Node struct {
	ID        string
	Namespace string
	Labels    map[string]string
	// ServiceAccount, when set, is the node's SERVICE_ACCOUNT.
	ServiceAccount string
	// Locality, when set, is the node's locality, region/zone/subzone.
	Locality string
}

// Bootstrap returns grpc-go bootstrap JSON for a proxyless gRPC node.
func Bootstrap(xdsAddr string, n Node) []byte {
	md := map[string]any{"GENERATOR": "grpc", "NAMESPACE": n.Namespace}
	if len(n.Labels) > 0 {
		md["LABELS"] = n.Labels
	}
	if n.ServiceAccount != "" {
		md["SERVICE_ACCOUNT"] = n.ServiceAccount
	}
	node := map[string]any{"id": n.ID, "metadata": md}
	if n.Locality != "" {
		region, rest, _ := strings.Cut(n.Locality, "/")
		zone, subzone, _ := strings.Cut(rest, "/")
		node["locality"] = map[string]any{"region": region, "zone": zone, "sub_zone": subzone}
	}
	b, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      xdsAddr,
			"channel_creds":   []any{map[string]any{"type": "insecure"}},
			"server_features": []string{"xds_v3"},
		}},
		"node":                                   node,
		"server_listener_resource_name_template": InboundTemplate,
	})
	if err != nil {
		panic(err) // static shapes only
	}
	return b
}

// Backend is a real xDS-enabled gRPC server that answers with its id.
type Backend struct {
	testpb.UnimplementedTestServiceServer
	ID   string
	Port int
}

// UnaryCall answers with the backend's id.
func (b *Backend) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{ServerId: b.ID}, nil
}

// StartBackend starts xds.NewGRPCServer on a loopback port and waits until
// vmesh has made it SERVING.
func StartBackend(t testing.TB, xdsAddr string, n Node) *Backend {
	t.Helper()
	b := &Backend{ID: n.ID}
	b.Port = StartServer(t, xdsAddr, n, b)
	return b
}

// StartServer serves svc with xds.NewGRPCServer (and opts) on a loopback
// port from the kernel, waits until vmesh has made it SERVING and returns
// the port. The server stops when the test ends.
func StartServer(t testing.TB, xdsAddr string, n Node, svc testpb.TestServiceServer, opts ...grpc.ServerOption) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{})
	var once sync.Once
	gs, err := grpcxds.NewGRPCServer(append([]grpc.ServerOption{
		grpc.Creds(insecure.NewCredentials()),
		grpcxds.BootstrapContentsForTesting(Bootstrap(xdsAddr, n)),
		grpcxds.ServingModeCallback(func(_ net.Addr, args grpcxds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				once.Do(func() { close(serving) })
			}
		}),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	testpb.RegisterTestServiceServer(gs, svc)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	select {
	case <-serving:
	case <-time.After(20 * time.Second):
		t.Fatalf("server %s never became SERVING", n.ID)
	}
	return lis.Addr().(*net.TCPAddr).Port
}

// Dial returns a client for xds:///target through vmesh.
func Dial(t testing.TB, xdsAddr string, n Node, target string) testpb.TestServiceClient {
	t.Helper()
	return DialWith(t, xdsAddr, n, target)
}

// DialWith is Dial with more dial options (e.g. grpc-go's OpenTelemetry
// metrics).
func DialWith(t testing.TB, xdsAddr string, n Node, target string, opts ...grpc.DialOption) testpb.TestServiceClient {
	t.Helper()
	res, err := grpcxds.NewXDSResolverWithConfigForTesting(Bootstrap(xdsAddr, n))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///"+target, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(res)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// CallUntil calls until a call succeeds or the timeout passes, returning the
// id of the backend that answered.
func CallUntil(t testing.TB, c testpb.TestServiceClient, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
		cancel()
		if err == nil {
			return resp.GetServerId()
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no successful call within %s: %v", timeout, last)
	return ""
}

// Eventually polls cond every 20 ms until it holds, failing the test after
// 20 s: for state another goroutine or process reaches (a push delivered,
// an ACK recorded) that offers nothing to wait on.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
