package controlplane_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

// callerRecorder answers with the caller's SPIFFE ID.
type callerRecorder struct {
	testpb.UnimplementedTestServiceServer
}

func (callerRecorder) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	p, _ := peer.FromContext(ctx)
	caller := "plaintext"
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 && len(ti.State.PeerCertificates[0].URIs) > 0 {
		caller = ti.State.PeerCertificates[0].URIs[0].String()
	}
	return &testpb.SimpleResponse{ServerId: caller}, nil
}

// runAgent starts `vmesh agent` for one VM and returns the directory it
// writes its files to, once its certificate and bootstrap are there.
func runAgent(t *testing.T, cp *controlplane.ControlPlane, ns, sa, group string) string {
	t.Helper()
	bundleDir := filepath.Join(t.TempDir(), "bundle")
	if _, err := cp.CA().WriteVMBundle(bundleDir, ca.VMBundleRequest{Namespace: ns, ServiceAccount: sa, WorkloadGroup: group,
		DiscoveryAddress: cp.SecureAddr()}); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	a, err := agent.New(agent.Config{BundleDir: bundleDir, OutDir: out, SocketDir: shortTempDir(t), IPs: []string{"127.0.0.1"},
		WorkloadName: sa + "-vm", DisableEnvoy: true, RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-a.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("agent never ready")
	}
	return out
}

// TestProxylessAppsUseOnlyTheAgentsFiles: two VMs with agents; a server
// and a client application configured by nothing but the files their
// agents wrote talk over mTLS through vmesh, each seeing the other's SPIFFE ID.
func TestProxylessAppsUseOnlyTheAgentsFiles(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	config := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ledger, namespace: fin}
spec:
  hosts: [ledger.fin.internal]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: ledger}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: ledger, namespace: fin}
spec:
  metadata: {labels: {app: ledger}}
  template:
    ports: {grpc: %d}
    serviceAccount: ledger
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: fin}
spec:
  mtls: {mode: STRICT}
`, port)
	if err := os.WriteFile(filepath.Join(dir, "fin.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.DebounceQuiet, cfg.DebounceMax = 20*time.Millisecond, 200*time.Millisecond
	cp := start(t, cfg)
	waitReady(t, cp)

	serverFiles := runAgent(t, cp, "fin", "ledger", "ledger")
	clientFiles := runAgent(t, cp, "fin", "teller", "")
	readBootstrap := func(dir string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, agent.GRPCBootstrapFile))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// The server application: xDS credentials, the agent's bootstrap.
	serverCreds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{})
	var once sync.Once
	gs, err := grpcxds.NewGRPCServer(grpc.Creds(serverCreds), grpcxds.BootstrapContentsForTesting(readBootstrap(serverFiles)),
		grpcxds.ServingModeCallback(func(_ net.Addr, args grpcxds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				once.Do(func() { close(serving) })
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	testpb.RegisterTestServiceServer(gs, callerRecorder{})
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	select {
	case <-serving:
	case <-time.After(30 * time.Second):
		t.Fatal("server application never SERVING")
	}

	// The client application, likewise.
	res, err := grpcxds.NewXDSResolverWithConfigForTesting(readBootstrap(clientFiles))
	if err != nil {
		t.Fatal(err)
	}
	clientCreds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///ledger.fin.internal:7070", grpc.WithTransportCredentials(clientCreds), grpc.WithResolvers(res))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var p peer.Peer
		resp, err := testpb.NewTestServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Peer(&p))
		cancel()
		if err == nil {
			if resp.GetServerId() != "spiffe://cluster.local/ns/fin/sa/teller" {
				t.Fatalf("server saw caller %q", resp.GetServerId())
			}
			ti, ok := p.AuthInfo.(credentials.TLSInfo)
			if !ok || len(ti.State.PeerCertificates) == 0 || ti.State.PeerCertificates[0].URIs[0].String() != "spiffe://cluster.local/ns/fin/sa/ledger" {
				t.Fatalf("client did not see the server's SPIFFE ID: %+v", p.AuthInfo)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no successful mTLS call: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
