package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/sharedstate"
)

// serveProcess is a `vmesh serve` child process of the repository's build.
type serveProcess struct {
	httpAddr, xdsAddr, secureAddr string
	cmd                           *exec.Cmd
	exited                        chan struct{}
}

// startServeProcess builds cmd/vmesh into bin (once per test) and runs
// `vmesh serve` with args on ports the kernel picks.
func startServeProcess(t *testing.T, bin string, args ...string) *serveProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--http-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0", "--secure-addr", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--log-format", "json"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProcess{cmd: cmd, exited: make(chan struct{})}
	serving := make(chan struct{})
	var mu sync.Mutex
	var logged strings.Builder
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			mu.Lock()
			logged.WriteString(sc.Text() + "\n")
			mu.Unlock()
			var e struct{ Msg, HTTP, XDS, Secure string }
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "vmesh serving" {
				p.httpAddr, p.xdsAddr, p.secureAddr = e.HTTP, e.XDS, e.Secure
				close(serving)
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	select {
	case <-serving:
	case <-p.exited:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("vmesh serve exited:\n%s", logged.String())
	case <-time.After(2 * time.Minute):
		t.Fatal("vmesh serve did not serve within 2 minutes")
	}
	return p
}

// TestReplicaKilledWithSIGKILL: replica A is a `vmesh serve` process
// sharing state through a real ZooKeeper, or a real Consul dev agent, with
// B and C (in process). A VM registers through A; `kill -9` of A: clients
// on B and C never lose the VM for longer than the grace period (its agent
// registers through B), A's session expires, and `vmesh status` names A
// unreachable.
func TestReplicaKilledWithSIGKILL(t *testing.T) {
	t.Run("zookeeper", func(t *testing.T) {
		z := testenv.StartZooKeeper(t)
		testReplicaKilled(t, sharedstate.Spec{Type: sharedstate.TypeZooKeeper, TTL: 3 * time.Second, Address: z.Addr})
	})
	t.Run("consul", func(t *testing.T) {
		c := testenv.StartConsul(t)
		testReplicaKilled(t, sharedstate.Spec{Type: sharedstate.TypeConsul, TTL: 10 * time.Second, Address: c.HTTPAddr})
	})
}

func testReplicaKilled(t *testing.T, spec sharedstate.Spec) {
	bin := filepath.Join(t.TempDir(), "vmesh")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	appLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, appPort, _ := net.SplitHostPort(appLis.Addr().String())
	app := grpc.NewServer()
	testpb.RegisterTestServiceServer(app, ledgerApp{})
	go func() { _ = app.Serve(appLis) }()
	t.Cleanup(app.Stop)
	configDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(configDir, "ledger.yaml"), []byte(fmt.Sprintf(replicasMesh, appPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	cacerts := writePluginCA(t)

	a := startServeProcess(t, bin, "--config-dir", configDir, "--cacerts-dir", cacerts, "--state", spec.String(), "--replica-id", "A",
		"--registration-grace", grace.String(), "--debounce-quiet", "20ms", "--debounce-max", "200ms")
	b := startTestReplica(t, "B", configDir, cacerts, spec, spec.Address)
	c := startTestReplica(t, "C", configDir, cacerts, spec, spec.Address)

	// The agent, onboarded with the shared CA, reaches the replicas
	// through a front (one name, several addresses): A first.
	secureFront := startFront(t, a.secureAddr, b.cp.SecureAddr(), c.cp.SecureAddr())
	bundleDir := filepath.Join(t.TempDir(), "bundle")
	if _, err := b.cp.CA().WriteVMBundle(bundleDir, ca.VMBundleRequest{Namespace: "fin", ServiceAccount: "ledger", WorkloadGroup: "ledger", DiscoveryAddress: secureFront.Addr}); err != nil {
		t.Fatal(err)
	}
	probe := health.Probe{TCP: &health.TCPSocket{Port: int(mustPort(t, appPort))}, Period: 200 * time.Millisecond, Timeout: time.Second, SuccessThreshold: 1, FailureThreshold: 1}
	agentCtx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- agent.Run(agentCtx, agent.Config{
			BundleDir: bundleDir, OutDir: t.TempDir(), SocketDir: shortDir(t), IPs: []string{"127.0.0.1"},
			WorkloadName: "ledger-vm-1", DisableEnvoy: true, Probe: &probe,
			RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	}()
	t.Cleanup(func() { stopAgent(); <-agentDone })

	key := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: "ledger-127.0.0.1"}
	fromA := func(r *testReplica) bool {
		o := r.cp.Store().Snapshot().Get(key)
		return o != nil && o.Healthy != nil && *o.Healthy && strings.HasPrefix(o.Origin.Registry, "replica A: ")
	}
	waitUntil(t, 30*time.Second, "B and C serve the VM registered through A", func() bool { return fromA(b) && fromA(c) })
	clients := map[string]testpb.TestServiceClient{
		"B": xdstest.Dial(t, b.cp.XDSAddr(), xdstest.Node{ID: "teller-b", Namespace: "fin"}, "ledger.fin.internal:7070"),
		"C": xdstest.Dial(t, c.cp.XDSAddr(), xdstest.Node{ID: "teller-c", Namespace: "fin"}, "ledger.fin.internal:7070"),
	}
	for id, cl := range clients {
		if got := xdstest.CallUntil(t, cl, 10*time.Second); got != "ledger-vm" {
			t.Fatalf("client on %s reached %q", id, got)
		}
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	var watchers sync.WaitGroup
	outages := map[string]*outage{}
	for id, cl := range clients {
		o := &outage{}
		outages["client on "+id] = o
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			for watchCtx.Err() == nil {
				ctx, cancel := context.WithTimeout(watchCtx, time.Second)
				resp, err := cl.UnaryCall(ctx, &testpb.SimpleRequest{})
				cancel()
				o.observe(err == nil && resp.GetServerId() == "ledger-vm")
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}

	// kill -9.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	killed := time.Now()
	waitUntil(t, 15*time.Second, "the agent registered through B", func() bool {
		o := b.cp.Store().Snapshot().Get(key)
		return o != nil && o.Origin.Source == sharedstate.LocalSource
	})
	waitUntil(t, 2*spec.TTL+10*time.Second, "A's session expired: its record gone", func() bool {
		var st sharedstate.Status
		return getJSON(c.cp.HTTPAddr(), "/debug/replicas", &st) == nil && len(st.Replicas) == 2
	})
	t.Logf("kill -9 of A → its %s session expired after %s", spec.Type, time.Since(killed))
	waitUntil(t, 10*time.Second, "C serves B's registration", func() bool {
		o := c.cp.Store().Snapshot().Get(key)
		return o != nil && strings.HasPrefix(o.Origin.Registry, "replica B: ")
	})
	time.Sleep(300 * time.Millisecond)
	stopWatch()
	watchers.Wait()
	for name, o := range outages {
		t.Logf("%s: longest outage %s", name, o.max())
		if o.max() > grace {
			t.Errorf("%s lost the VM for %s, longer than the grace period %s", name, o.max(), grace)
		}
	}
	out, code := runVMesh(t, "status", "--server", a.httpAddr, "--server", b.cp.HTTPAddr(), "--server", c.cp.HTTPAddr())
	lines := strings.Split(out, "\n")
	if code != 1 || len(lines) < 4 || !strings.HasPrefix(lines[1], a.httpAddr) || !strings.Contains(lines[1], "unreachable") ||
		!strings.Contains(lines[2], "(B)") || !strings.Contains(lines[3], "(C)") {
		t.Fatalf("status with A killed: exit %d\n%s", code, out)
	}
}
