package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/agents/internal/netnstest"
)

// meshNetns is a control plane (`vmesh serve`) in a namespace of its own,
// a VM namespace linked to it, and a bundle for the VM: what an agent
// under test needs.
type meshNetns struct {
	cp, vm    *netnstest.NS
	tmp       string
	bundleDir string
	resolv    string
	cpHTTP    func() (bool, string) // is the VM registered?
}

// startMeshNetns starts the control plane, whose secure port's certificate
// also names cpHost (the VM's resolver answers it), and writes the bundle.
func startMeshNetns(t *testing.T) *meshNetns {
	t.Helper()
	if _, err := vmeshBinary(); err != nil {
		t.Fatal(err)
	}
	m := &meshNetns{cp: netnstest.New(t, "cp"), vm: netnstest.New(t, "vm")}
	netnstest.Link(t, m.vm, vmAddr, m.cp, cpAddr)
	etcDir := filepath.Join("/etc/netns", m.vm.Name)
	m.resolv = filepath.Join(etcDir, "resolv.conf")
	writeFile(t, m.resolv, "nameserver "+cpAddr+"\noptions timeout:2 attempts:1\n")
	t.Cleanup(func() {
		os.RemoveAll(etcDir)
		os.Remove("/etc/netns") // only when empty: it may be the system's
	})
	m.tmp = t.TempDir()
	cfgDir, dataDir := filepath.Join(m.tmp, "config"), filepath.Join(m.tmp, "data")
	writeFile(t, filepath.Join(cfgDir, "mesh.yaml"), meshConfig)
	serve := startProc(t, m.cp, m.tmp, "vmesh serve", "serve", "--config-dir", cfgDir, "--data-dir", dataDir,
		"--http-addr", cpAddr+":15014", "--xds-addr", "127.0.0.1:15010", "--secure-addr", cpAddr+":15012",
		"--secure-host", cpAddr, "--secure-host", cpHost, "--registration-grace", "1s", "--log-format", "json")
	serve.waitLog(t, "vmesh serving", 2*time.Minute)
	upstreamResolver(t, m.cp)
	m.bundleDir = filepath.Join(m.tmp, "bundle")
	bundle := startProc(t, m.cp, m.tmp, "vmesh vm bundle", "vm", "bundle", "--out", m.bundleDir, "--data-dir", dataDir, "--server", cpAddr+":15014",
		"--namespace", "default", "--service-account", "vm", "--workload-group", "vms", "--discovery-address", cpAddr+":15012")
	<-bundle.done
	if bundle.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("vm bundle failed:\n%s", bundle.output())
	}
	// The workload's health service the WorkloadGroup's probe asks.
	appSrv := grpc.NewServer()
	healthpb.RegisterHealthServer(appSrv, grpchealth.NewServer())
	go func() { _ = appSrv.Serve(m.vm.Listen(t, "127.0.0.1:50051")) }()
	t.Cleanup(appSrv.Stop)
	httpCP := httpIn(m.cp)
	m.cpHTTP = func() (bool, string) {
		_, body, err := get(httpCP, "http://"+cpAddr+":15014/debug/config")
		return err == nil && strings.Contains(body, "vms-"+vmAddr), fmt.Sprint(err)
	}
	return m
}

// waitReady waits for the agent's /healthz/ready in the VM.
func (m *meshNetns) waitReady(t *testing.T, what string) {
	t.Helper()
	status := httpIn(m.vm)
	until(t, 60*time.Second, what, func() (bool, string) {
		code, body, err := get(status, "http://127.0.0.1:15020/healthz/ready")
		return err == nil && code == 200, fmt.Sprint(code, body, err)
	})
}

// TestFaultInboundFailsClosedWhileAgentDown: the VM's capture outlives the
// agent. With the agent stopped (SIGTERM) and with it killed (SIGKILL),
// and its Envoy gone (the stand-in on 15006 closed), a connection from
// another host to the workload's port is refused; it never reaches the
// workload without mTLS and policy, as it did when the agent removed its
// rules on exit. The agent starts again with the rules in place, although
// it names the control plane by a host name first (its lookups pass
// through the DNS capture to its own DNS proxy, started before it
// connects): it gets its certificate, registers, and inbound traffic
// reaches the stand-in again. After `vmesh agent cleanup` the connection
// reaches the workload directly: the VM is out of the mesh.
func TestFaultInboundFailsClosedWhileAgentDown(t *testing.T) {
	netnstest.Require(t, "nft", "iptables", "iptables-save", "iptables-restore", "go")
	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) { testFailsClosed(t, mode) })
	}
}

func testFailsClosed(t *testing.T, mode string) {
	m := startMeshNetns(t)
	// The workload listens on every address; what reaches it directly
	// bypassed the sidecar.
	direct := make(chan string, 16)
	wl := m.vm.Listen(t, "0.0.0.0:8080")
	go func() {
		for {
			c, err := wl.Accept()
			if err != nil {
				return
			}
			direct <- c.RemoteAddr().String()
			c.Close()
		}
	}()
	// envoyUp starts the stand-in for Envoy's inbound port; the func it
	// returns stops it (Envoy stops with the agent).
	envoyUp := func() (<-chan netip.AddrPort, func()) {
		l := m.vm.Listen(t, "0.0.0.0:15006")
		return envoyStandIn(t, l), func() { l.Close() }
	}
	// connect connects from the control plane's host to the workload port
	// and says where the connection went.
	connect := func(inbound <-chan netip.AddrPort) string {
		t.Helper()
		c, err := m.cp.Dial("tcp", vmAddr+":8080", 3*time.Second)
		if err != nil {
			return "failed: " + err.Error()
		}
		c.Close()
		select {
		case <-inbound:
			return "sidecar"
		case from := <-direct:
			return "workload (from " + from + ")"
		case <-time.After(5 * time.Second):
			return "nowhere"
		}
	}
	mustFail := func(when string) {
		t.Helper()
		if got := connect(nil); !strings.HasPrefix(got, "failed: ") || !strings.Contains(got, "refused") {
			t.Fatalf("%s: a connection to the workload port went to %s; want it refused", when, got)
		}
		select {
		case from := <-direct:
			t.Fatalf("%s: the workload accepted a connection from %s", when, from)
		default:
		}
	}

	args := []string{"agent", "--bundle", m.bundleDir, "--out", filepath.Join(m.tmp, "out"), "--sockets", filepath.Join(m.tmp, "run"),
		"--workload-name", "vm1", "--ip", vmAddr, "--no-envoy", "--capture", "on", "--capture-mode", mode, "--resolv-conf", m.resolv,
		"--log-format", "json",
		// The control plane by name first, then by address: both are
		// excluded from capture.
		"--discovery-address", cpHost + ":15012", "--discovery-address", cpAddr + ":15012"}
	inbound, envoyDown := envoyUp()
	agentProc := startProc(t, m.vm, m.tmp, "vmesh agent", args...)
	m.waitReady(t, "agent ready")
	until(t, 10*time.Second, "registered", m.cpHTTP)
	if got := connect(inbound); got != "sidecar" {
		t.Fatalf("with the agent running, a connection to the workload port went to %s; want the sidecar's 15006", got)
	}

	// A clean stop, Envoy gone with it.
	agentProc.stop(syscall.SIGTERM)
	envoyDown()
	if rules := m.vm.Ruleset(t); !strings.Contains(rules, ownRules[mode]) {
		t.Fatalf("after SIGTERM the capture should stay:\n%s", rules)
	}
	mustFail("agent stopped (SIGTERM)")

	// A restart with the rules in place: the agent reaches the control
	// plane by name, registers, and traffic flows through the sidecar.
	inbound, envoyDown = envoyUp()
	agentProc = startProc(t, m.vm, m.tmp, "vmesh agent (restarted)", args...)
	m.waitReady(t, "agent ready after a restart with the rules in place")
	until(t, 10*time.Second, "registered after the restart", m.cpHTTP)
	if got := connect(inbound); got != "sidecar" {
		t.Fatalf("after the restart, a connection to the workload port went to %s; want the sidecar's 15006", got)
	}
	if rules := m.vm.Output(t, "iptables", "-w", "-t", "nat", "-S"); strings.Count(rules, "-A OUTPUT -j VMESH_OUTPUT") > 1 || strings.Count(rules, "-N VMESH_OUTPUT") > 1 {
		t.Errorf("the restart duplicated rules:\n%s", rules)
	}

	// A crash.
	agentProc.stop(syscall.SIGKILL)
	envoyDown()
	mustFail("agent killed (SIGKILL)")

	// Out of the mesh.
	cleanup := startProc(t, m.vm, m.tmp, "vmesh agent cleanup", "agent", "cleanup")
	<-cleanup.done
	if cleanup.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("vmesh agent cleanup failed:\n%s", cleanup.output())
	}
	assertNoRules(t, m.vm)
	if got := connect(nil); !strings.HasPrefix(got, "workload") {
		t.Fatalf("after vmesh agent cleanup, a connection to the workload port went to %s; want the workload", got)
	}
}

// envoyStandInEnv names the directory where the Envoy stand-in (this test
// binary, started by an agent under test as its Envoy) writes its proof.
const envoyStandInEnv = "VMESH_TEST_ENVOY_STANDIN"

// envoyStandInMain is the Envoy stand-in: it reads the bootstrap given
// with -c as Envoy does, connects to the ADS cluster's Unix socket named
// in it, asks for clusters with the bootstrap's node and, once answered,
// writes "ok uid=U gid=G" to dir/proof (or "error: ..." when a step
// fails); then it waits for SIGTERM.
func envoyStandInMain(dir string, args []string) int {
	proof := func(s string) {
		_ = os.WriteFile(filepath.Join(dir, "proof"), []byte(s), 0o600)
	}
	err := envoyStandInRun(args)
	if err != nil {
		proof("error: " + err.Error())
		return 1
	}
	proof(fmt.Sprintf("ok uid=%d gid=%d", os.Getuid(), os.Getgid()))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return 0
}

func envoyStandInRun(args []string) error {
	path := ""
	for i, a := range args {
		if a == "-c" && i+1 < len(args) {
			path = args[i+1]
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read bootstrap: %w", err)
	}
	var b struct {
		Node struct {
			ID       string         `json:"id"`
			Cluster  string         `json:"cluster"`
			Metadata map[string]any `json:"metadata"`
		} `json:"node"`
		DynamicResources struct {
			AdsConfig struct {
				GrpcServices []struct {
					EnvoyGrpc struct {
						ClusterName string `json:"clusterName"`
					} `json:"envoyGrpc"`
				} `json:"grpcServices"`
			} `json:"adsConfig"`
		} `json:"dynamicResources"`
		StaticResources struct {
			Clusters []struct {
				Name           string `json:"name"`
				LoadAssignment struct {
					Endpoints []struct {
						LbEndpoints []struct {
							Endpoint struct {
								Address struct {
									Pipe struct {
										Path string `json:"path"`
									} `json:"pipe"`
								} `json:"address"`
							} `json:"endpoint"`
						} `json:"lbEndpoints"`
					} `json:"endpoints"`
				} `json:"loadAssignment"`
			} `json:"clusters"`
		} `json:"staticResources"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if len(b.DynamicResources.AdsConfig.GrpcServices) == 0 {
		return fmt.Errorf("bootstrap has no ADS config: %s", raw)
	}
	ads, socket := b.DynamicResources.AdsConfig.GrpcServices[0].EnvoyGrpc.ClusterName, ""
	for _, c := range b.StaticResources.Clusters {
		if c.Name == ads && len(c.LoadAssignment.Endpoints) > 0 && len(c.LoadAssignment.Endpoints[0].LbEndpoints) > 0 {
			socket = c.LoadAssignment.Endpoints[0].LbEndpoints[0].Endpoint.Address.Pipe.Path
		}
	}
	if socket == "" {
		return fmt.Errorf("bootstrap: no socket for ADS cluster %q", ads)
	}
	md, err := structpb.NewStruct(b.Node.Metadata)
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("ADS via %s: %w", socket, err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: b.Node.ID, Cluster: b.Node.Cluster, Metadata: md}, TypeUrl: resourcev3.ClusterType}); err != nil {
		return fmt.Errorf("ADS via %s: %w", socket, err)
	}
	if _, err := stream.Recv(); err != nil && err != io.EOF {
		return fmt.Errorf("ADS via %s: %w", socket, err)
	}
	return nil
}

// TestEnvoyReadsFreshOutDir: `vmesh agent` with capture starts Envoy as
// UID/GID 1337; with an --out directory that does not exist yet, the
// directory the agent creates must let Envoy read its bootstrap (it was
// 0700 root's, and Envoy failed with "permission denied"). The stand-in
// for Envoy, running as 1337, reads the bootstrap, connects to the xDS
// socket it names and gets an answer from the control plane through the
// agent. With an --out directory Envoy cannot enter, the agent refuses to
// start and names the directory to fix.
func TestEnvoyReadsFreshOutDir(t *testing.T) {
	netnstest.Require(t, "nft", "go")
	m := startMeshNetns(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Everything Envoy touches lives under a directory other users may
	// enter (t.TempDir's are 0700).
	base, err := os.MkdirTemp("", "vmesh-envoy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	standIn := filepath.Join(base, "envoy")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(standIn, data, 0o755); err != nil {
		t.Fatal(err)
	}
	proofDir := filepath.Join(base, "proof")
	if err := os.Mkdir(proofDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(proofDir, 1337, 1337); err != nil {
		t.Fatal(err)
	}
	env := []string{envoyStandInEnv + "=" + proofDir}
	agentArgs := func(out string) []string {
		return []string{"agent", "--bundle", m.bundleDir, "--out", out, "--sockets", filepath.Join(base, "run"),
			"--workload-name", "vm1", "--ip", vmAddr, "--envoy", standIn, "--capture", "on", "--capture-mode", "nftables",
			"--resolv-conf", m.resolv, "--log-format", "json"}
	}

	t.Run("fresh out directory", func(t *testing.T) {
		out := filepath.Join(base, "out") // does not exist yet
		agentProc := startProcEnv(t, m.vm, m.tmp, "vmesh agent", env, agentArgs(out)...)
		var got string
		until(t, 60*time.Second, "the Envoy stand-in's proof", func() (bool, string) {
			b, err := os.ReadFile(filepath.Join(proofDir, "proof"))
			got = string(b)
			return strings.HasPrefix(got, "ok") || strings.HasPrefix(got, "error"), fmt.Sprint(got, err)
		})
		if got != "ok uid=1337 gid=1337" {
			t.Fatalf("the Envoy stand-in says %q; want it to read its bootstrap and connect as 1337", got)
		}
		st, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o750 || st.Sys().(*syscall.Stat_t).Gid != 1337 {
			t.Errorf("%s: mode %v gid %d, want 0750 and Envoy's group 1337", out, st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Gid)
		}
		key, err := os.Stat(filepath.Join(out, "key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		if key.Mode().Perm()&0o007 != 0 {
			t.Errorf("key.pem is %v: readable by other users", key.Mode().Perm())
		}
		agentProc.stop(syscall.SIGTERM)
	})

	t.Run("out directory Envoy cannot enter", func(t *testing.T) {
		out := filepath.Join(base, "private", "out")
		if err := os.MkdirAll(out, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Dir(out), 0o700); err != nil {
			t.Fatal(err)
		}
		agentProc := startProcEnv(t, m.vm, m.tmp, "vmesh agent (private out)", env, agentArgs(out)...)
		select {
		case <-agentProc.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("the agent did not stop:\n%s", agentProc.output())
		}
		if code := agentProc.cmd.ProcessState.ExitCode(); code == 0 {
			t.Fatalf("the agent exited 0:\n%s", agentProc.output())
		}
		if out := agentProc.output(); !strings.Contains(out, "Envoy runs as uid 1337 gid 1337") || !strings.Contains(out, "cannot enter "+filepath.Join(base, "private")) {
			t.Fatalf("the agent's error does not say which directory Envoy cannot enter:\n%s", out)
		}
	})
	m.vm.Output(t, "nft", "delete", "table", "inet", "vmesh")
}
