package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/vmesh/vmesh/internal/testenv"
)

// echoDesc is tools/grpc-node's vmesh.echo.Echo/Call answered in Go: its
// Request is empty and its Reply (string server_id = 1) has the wire form
// of a StringValue.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "vmesh.echo.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		if err := dec(&emptypb.Empty{}); err != nil {
			return nil, err
		}
		return wrapperspb.String("cart-1"), nil
	}}},
}

// TestGRPCNodeAppThroughTheAgentsXDSSocket: a grpc-node application
// (@grpc/grpc-js-xds, tools/grpc-node/client.js) started with nothing but
// GRPC_XDS_BOOTSTRAP pointing at the agent's grpc-bootstrap.json gets its
// configuration through the agent's xDS socket (grpc-node reads no "tls"
// channel credentials and requires node.locality) and calls the service.
func TestGRPCNodeAppThroughTheAgentsXDSSocket(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node (Debian's nodejs) for the grpc-node tests: %v", err)
	}
	dir := filepath.Join(testenv.RepoRoot(t), "tools", "grpc-node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@grpc", "grpc-js-xds", "package.json")); err != nil {
		testenv.Missing(t, "grpc-node packages (npm ci in tools/grpc-node): %v", err)
	}
	cp := startStandIn(t)

	svc := grpc.NewServer()
	svc.RegisterService(&echoDesc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go svc.Serve(lis)
	defer svc.Stop()
	cp.set(t, apiListener(t, "cart.shop:8080", "cart"), plainCluster("cart"), endpoints("cart", uint32(lis.Addr().(*net.TCPAddr).Port)))

	cmd := exec.Command(node, "client.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+cp.agent.GRPCBootstrap())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	defer func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()

	// Until the first xDS answers arrive a call may fail: ask again, up to
	// a deadline.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := stdin.Write([]byte(`{"target":"xds:///cart.shop:8080","n":5,"deadlineMs":3000}` + "\n")); err != nil {
			t.Fatalf("client.js: %v; stderr:\n%s", err, stderr.String())
		}
		var line string
		var ok bool
		select {
		case line, ok = <-lines:
		case <-time.After(20 * time.Second):
		}
		if !ok {
			t.Fatalf("client.js answered nothing; stderr:\n%s", stderr.String())
		}
		var got struct {
			Counts map[string]int `json:"counts"`
		}
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("client.js said %q: %v", line, err)
		}
		if got.Counts["cart-1"] == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grpc-node calls through the agent's xDS socket: %v; stderr:\n%s", got.Counts, stderr.String())
		}
	}
	if got := cp.locality(t); got != "eu-west/eu-west-1/rack-7" {
		t.Fatalf("the control plane saw node locality %q, want eu-west/eu-west-1/rack-7", got)
	}
}

// plainCluster is an EDS cluster without TLS.
func plainCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
			ResourceApiVersion: corev3.ApiVersion_V3, ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		}},
		LbPolicy: clusterv3.Cluster_ROUND_ROBIN,
	}
}
