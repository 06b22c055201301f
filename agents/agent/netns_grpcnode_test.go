package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/vmesh/vmesh/agents/internal/netnstest"
	"github.com/vmesh/vmesh/internal/testenv"
)

// TestGRPCNodeAppOnANetnsVM: on a VM (its own network namespace, joined to
// the control plane's by a veth), `vmesh agent` from a bundle with
// topology labels, and a grpc-node application (tools/grpc-node
// client.js) started with nothing but GRPC_XDS_BOOTSTRAP pointing at the
// agent's grpc-bootstrap.json: it gets vmesh's configuration through the
// agent's xDS socket and calls a mesh service on the other host; the
// bootstrap carries the VM's locality.
func TestGRPCNodeAppOnANetnsVM(t *testing.T) {
	netnstest.Require(t, "go", "node")
	nodeDir := filepath.Join(testenv.RepoRoot(t), "tools", "grpc-node")
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "@grpc", "grpc-js-xds", "package.json")); err != nil {
		testenv.Missing(t, "grpc-node packages (npm ci in tools/grpc-node): %v", err)
	}
	if _, err := vmeshBinary(); err != nil {
		t.Fatal(err)
	}
	cp, vm := netnstest.New(t, "cp"), netnstest.New(t, "vm")
	netnstest.Link(t, vm, vmAddr, cp, cpAddr)

	// The mesh service, on the control plane's host.
	svc := grpc.NewServer()
	svc.RegisterService(&echoDesc, struct{}{})
	go func() { _ = svc.Serve(cp.Listen(t, cpAddr+":7070")) }()
	t.Cleanup(svc.Stop)

	tmp := t.TempDir()
	cfgDir, dataDir := filepath.Join(tmp, "config"), filepath.Join(tmp, "data")
	writeFile(t, filepath.Join(cfgDir, "echo.yaml"), fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.default.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-1, namespace: default}
spec:
  address: %s
  ports: {grpc: 7070}
  labels: {app: echo}
`, cpAddr))
	serve := startProc(t, cp, tmp, "vmesh serve", "serve", "--config-dir", cfgDir, "--data-dir", dataDir,
		"--http-addr", cpAddr+":15014", "--xds-addr", "127.0.0.1:15010", "--secure-addr", cpAddr+":15012", "--secure-host", cpAddr,
		"--debounce-quiet", "20ms", "--debounce-max", "200ms", "--log-format", "json")
	serve.waitLog(t, "vmesh serving", 2*time.Minute)
	bundleDir := filepath.Join(tmp, "bundle")
	bundle := startProc(t, cp, tmp, "vmesh vm bundle", "vm", "bundle", "--out", bundleDir, "--data-dir", dataDir, "--server", cpAddr+":15014",
		"--namespace", "default", "--service-account", "vm", "--discovery-address", cpAddr+":15012",
		"--labels", "app=nodeapp,topology.kubernetes.io/region=eu-west,topology.kubernetes.io/zone=eu-west-1")
	<-bundle.done
	if bundle.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("vm bundle failed:\n%s", bundle.output())
	}
	startProc(t, vm, tmp, "vmesh agent", "agent", "--bundle", bundleDir, "--out", "out", "--sockets", filepath.Join(tmp, "run"),
		"--workload-name", "vm1", "--ip", vmAddr, "--no-envoy", "--dns-addr", "", "--log-format", "json")
	status := httpIn(vm)
	until(t, 30*time.Second, "agent ready", func() (bool, string) {
		code, body, err := get(status, "http://127.0.0.1:15020/healthz/ready")
		return err == nil && code == 200, fmt.Sprint(code, body, err)
	})
	bootstrapFile := filepath.Join(tmp, "out", "grpc-bootstrap.json")
	js, err := os.ReadFile(bootstrapFile)
	if err != nil {
		t.Fatal(err)
	}
	var b struct {
		Node struct {
			Locality map[string]string `json:"locality"`
		} `json:"node"`
	}
	if err := json.Unmarshal(js, &b); err != nil || b.Node.Locality["region"] != "eu-west" || b.Node.Locality["zone"] != "eu-west-1" {
		t.Fatalf("node.locality %v (%v), want the bundle's eu-west/eu-west-1:\n%s", b.Node.Locality, err, js)
	}

	// The application, in the VM: one command on stdin, one answer.
	until(t, 30*time.Second, "grpc-node calls echo through the agent", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := vm.Command(ctx, "node", "client.js")
		cmd.Dir = nodeDir
		cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+bootstrapFile)
		cmd.Stdin = strings.NewReader(`{"target":"xds:///echo.default.svc.cluster.local:7070","n":5,"deadlineMs":5000}` + "\n")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var got struct {
			Counts map[string]int `json:"counts"`
		}
		if err != nil || json.Unmarshal(out, &got) != nil {
			return false, fmt.Sprintf("%s %v; stderr: %s", out, err, stderr.String())
		}
		return got.Counts["cart-1"] == 5, string(out)
	})
}
