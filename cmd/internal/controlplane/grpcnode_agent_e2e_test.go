package controlplane_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/testenv"
)

// nodeEchoDesc is tools/grpc-node's vmesh.echo.Echo/Call answered in Go:
// its Request is empty and its Reply (string server_id = 1) has the wire
// form of a StringValue.
var nodeEchoDesc = grpc.ServiceDesc{
	ServiceName: "vmesh.echo.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		if err := dec(&emptypb.Empty{}); err != nil {
			return nil, err
		}
		return wrapperspb.String("echo-1"), nil
	}}},
}

// TestGRPCNodeAppUsesOnlyTheAgentsFiles: a grpc-node application
// (@grpc/grpc-js-xds, tools/grpc-node/client.js) on a VM, started with
// nothing but GRPC_XDS_BOOTSTRAP pointing at its agent's
// grpc-bootstrap.json, gets vmesh's configuration through the agent's xDS
// socket (the agent carries it over mTLS) and calls a mesh service.
func TestGRPCNodeAppUsesOnlyTheAgentsFiles(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node (Debian's nodejs) for the grpc-node tests: %v", err)
	}
	nodeDir := filepath.Join(testenv.RepoRoot(t), "tools", "grpc-node")
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "@grpc", "grpc-js-xds", "package.json")); err != nil {
		testenv.Missing(t, "grpc-node packages (npm ci in tools/grpc-node): %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := grpc.NewServer()
	svc.RegisterService(&nodeEchoDesc, struct{}{})
	go func() { _ = svc.Serve(lis) }()
	defer svc.Stop()
	dir := t.TempDir()
	config := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: fin}
spec:
  hosts: [echo.fin.internal]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-1, namespace: fin}
spec:
  address: 127.0.0.1
  ports: {grpc: %d}
  labels: {app: echo}
`, lis.Addr().(*net.TCPAddr).Port)
	if err := os.WriteFile(filepath.Join(dir, "fin.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cfg.DebounceQuiet, cfg.DebounceMax = 20*time.Millisecond, 200*time.Millisecond
	cp := start(t, cfg)
	waitReady(t, cp)
	files := runAgent(t, cp, "fin", "teller", "")

	cmd := exec.Command(node, "client.js")
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+filepath.Join(files, agent.GRPCBootstrapFile))
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
		if _, err := stdin.Write([]byte(`{"target":"xds:///echo.fin.internal:7070","n":5,"deadlineMs":3000}` + "\n")); err != nil {
			t.Fatalf("client.js: %v; stderr:\n%s", err, stderr.String())
		}
		var line string
		ok := false
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
		if got.Counts["echo-1"] == 5 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("grpc-node calls through the agent: %v; stderr:\n%s", got.Counts, stderr.String())
		}
	}
}
