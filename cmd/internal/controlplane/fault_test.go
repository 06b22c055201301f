package controlplane_test

// The fault-injection suite (issue 16): the composed control plane under
// registry outages, its own restart, NACK storms, connection churn and
// oversized requests, each checked for "nothing lost, nothing leaked, still
// serving" with real grpc-go clients and backends. Select it with
// go test -run '^TestFault' ./internal/controlplane/.

import (
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	consulapi "github.com/hashicorp/consul/api"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/registries"
	"github.com/vmesh/vmesh/registries/consul"
	"github.com/vmesh/vmesh/registries/zookeeper"
	"github.com/vmesh/vmesh/store"
)

// echoPlane runs a control plane over a config folder holding the echo
// service, with backends b1 and b2 behind it and a grpc-go client calling it
// continuously.
func echoPlane(t *testing.T) (cp *controlplane.ControlPlane, stop func(), dir string, c *caller) {
	t.Helper()
	return echoPlaneLogging(t, nil)
}

// echoPlaneLogging is echoPlane logging to logger (nil: discarded).
func echoPlaneLogging(t *testing.T, logger *slog.Logger) (cp *controlplane.ControlPlane, stop func(), dir string, c *caller) {
	t.Helper()
	dir = t.TempDir()
	echoConfig(t, dir)
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cp, stop = runPlane(t, cfg, "", logger)
	waitReady(t, cp)
	b1 := xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: "b1", Namespace: "default"})
	b2 := xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: "b2", Namespace: "default"})
	echoConfig(t, dir, b1, b2)
	client := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "client", Namespace: "default"}, echoTarget)
	xdstest.CallUntil(t, client, 30*time.Second)
	c = startCaller(t, "client", client)
	c.waitServer(t, "b1", 1, "at start")
	c.waitServer(t, "b2", 1, "at start")
	return cp, stop, dir, c
}

// TestFaultControlPlaneRestart stops the control plane under two grpc-go
// clients calling continuously and starts a new one on the same xDS
// address: no call fails while it is away (the data plane keeps its last
// config), every client and backend reconnects and ACKs the new server's
// responses, and a change made after the restart reaches the clients.
func TestFaultControlPlaneRestart(t *testing.T) {
	dir := t.TempDir()
	echoConfig(t, dir)
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cp, stop := runPlane(t, cfg, "", nil)
	waitReady(t, cp)
	xdsAddr := cp.XDSAddr()
	b1 := xdstest.StartBackend(t, xdsAddr, xdstest.Node{ID: "b1", Namespace: "default"})
	b2 := xdstest.StartBackend(t, xdsAddr, xdstest.Node{ID: "b2", Namespace: "default"})
	echoConfig(t, dir, b1, b2)
	var callers []*caller
	for _, id := range []string{"client-1", "client-2"} {
		client := xdstest.Dial(t, xdsAddr, xdstest.Node{ID: id, Namespace: "default"}, echoTarget)
		xdstest.CallUntil(t, client, 30*time.Second)
		c := startCaller(t, id, client)
		c.waitServer(t, "b2", 1, "before the restart")
		callers = append(callers, c)
	}
	clientTypes := []string{"LDS", "RDS", "CDS", "EDS"}
	waitUntil(t, 10*time.Second, "every proxy in sync before the restart", func() bool {
		st := syncz(t, cp)
		return inSync(st, "client-1", clientTypes...) && inSync(st, "client-2", clientTypes...) && inSync(st, "b1", "LDS") && inSync(st, "b2", "LDS")
	})

	stop()
	for _, c := range callers {
		c.waitCalls(t, 50, "while no control plane runs")
	}
	cp, _ = runPlane(t, cfg, xdsAddr, nil)
	waitReady(t, cp)
	waitUntil(t, 30*time.Second, "every client and backend to reconnect and ACK the new server", func() bool {
		st := syncz(t, cp)
		return inSync(st, "client-1", clientTypes...) && inSync(st, "client-2", clientTypes...) && inSync(st, "b1", "LDS") && inSync(st, "b2", "LDS")
	})

	b3 := xdstest.StartBackend(t, xdsAddr, xdstest.Node{ID: "b3", Namespace: "default"})
	echoConfig(t, dir, b1, b2, b3)
	for _, c := range callers {
		c.waitServer(t, "b3", 1, "after a change made on the new server")
	}
	want := fmt.Sprintf("r%d", cp.Store().Snapshot().Revision)
	waitUntil(t, 10*time.Second, "the change ACKed", func() bool {
		st := syncz(t, cp)
		return inSync(st, "client-1", clientTypes...) && inSync(st, "client-2", clientTypes...)
	})
	for _, s := range syncz(t, cp) {
		if s.ID == "client-1" && s.Types["EDS"].Acked != want {
			t.Errorf("client-1 ACKed EDS %q, want the new server's %s", s.Types["EDS"].Acked, want)
		}
	}
	for _, c := range callers {
		c.checkNoneFailed(t)
	}
}

// TestFaultNACKStorm: a proxy that NACKs every response, thousands of
// times, while the config changes, grows neither the heap nor the
// goroutines, and the other client keeps being served, changes included;
// the same rejection repeated is logged once (counted in the metric).
func TestFaultNACKStorm(t *testing.T) {
	logs, logger := newLogRecorder()
	cp, _, dir, c := echoPlaneLogging(t, logger)
	b3 := xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: "b3", Namespace: "default"}) // served from mid-storm on
	baseHeap, baseG := liveHeap(), runtime.NumGoroutine()

	stream, closeStream := adsStream(t, cp.XDSAddr())
	// Two subscriptions with different answers (vmesh answers an inbound
	// listener name for any address), so every change gets a response.
	names := [][]string{
		{echoTarget, fmt.Sprintf(xdstest.InboundTemplate, "127.0.0.1:7001")},
		{echoTarget, fmt.Sprintf(xdstest.InboundTemplate, "127.0.0.1:7002")},
	}
	req := &discoveryv3.DiscoveryRequest{Node: node("nack-storm"), TypeUrl: resourcev3.ListenerType, ResourceNames: names[0]}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	nacks := 0
	storm := func(n int) {
		t.Helper()
		for range n {
			resp, err := recvWithin(t, stream, 10*time.Second)
			if err != nil {
				t.Fatalf("after %d NACKs: %v", nacks, err)
			}
			// Reject it, and change the subscription so that the server
			// answers again.
			nacks++
			if err := stream.Send(&discoveryv3.DiscoveryRequest{
				TypeUrl: resourcev3.ListenerType, ResourceNames: names[nacks%2],
				ResponseNonce: resp.GetNonce(),
				ErrorDetail:   &status.Status{Code: int32(codes.InvalidArgument), Message: "rejected: invalid listener"},
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	storm(1000)
	midHeap := liveHeap()
	echoConfig(t, dir, b3) // b1 and b2 leave, b3 comes
	storm(1000)
	c.waitServer(t, "b3", 20, "during the NACK storm")
	endHeap, endG := liveHeap(), runtime.NumGoroutine()
	t.Logf("%d NACKs: live heap %d → %d → %d KiB, goroutines %d → %d", nacks, baseHeap>>10, midHeap>>10, endHeap>>10, baseG, endG)
	if endHeap > midHeap+8*mib {
		t.Errorf("live heap grew %d KiB over the second 1,000 NACKs, want < 8 MiB", (endHeap-midHeap)>>10)
	}
	if endHeap > baseHeap+32*mib {
		t.Errorf("live heap grew %d KiB over 2,000 NACKs, want < 32 MiB", (endHeap-baseHeap)>>10)
	}
	if n := logs.count("proxy rejected config (NACK)"); n != 1 {
		t.Errorf("%d NACK log lines for %d identical NACKs, want 1", n, nacks)
	}
	if endG > baseG+10 { // the storm's stream and its transports
		t.Errorf("goroutines %d → %d during the storm", baseG, endG)
	}
	st := syncz(t, cp)
	if !inSync(st, "client", "LDS", "RDS", "CDS", "EDS") {
		t.Errorf("the good client is not in sync during the storm: %+v", st)
	}
	var sawNACK bool
	for _, s := range st {
		if s.ID == "nack-storm" && s.Types["LDS"] != nil && s.Types["LDS"].Nack != "" {
			sawNACK = true
		}
	}
	if !sawNACK {
		t.Errorf("the storm's NACK is not in /debug/syncz: %+v", st)
	}
	closeStream()
	waitUntil(t, 10*time.Second, "the storm's stream gone from /debug/syncz", func() bool {
		for _, s := range syncz(t, cp) {
			if s.ID == "nack-storm" {
				return false
			}
		}
		return true
	})
	settleGoroutines(t, baseG+5, "after the storm's stream closed")
	c.checkNoneFailed(t)
}

// TestFaultConnectionChurn opens and closes 2,000 xDS connections, each
// with a stream that subscribes and receives its listener: afterwards no
// goroutine and no stream is left behind, and the steady client was served
// throughout.
func TestFaultConnectionChurn(t *testing.T) {
	cp, _, _, c := echoPlane(t)
	baseStreams := len(syncz(t, cp))
	baseHeap, baseG := liveHeap(), runtime.NumGoroutine()

	const conns, workers = 2000, 8
	next := make(chan int)
	errc := make(chan error, workers)
	for range workers {
		go func() {
			for i := range next {
				stream, closeStream, err := dialADS(cp.XDSAddr())
				if err != nil {
					errc <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
				err = stream.Send(&discoveryv3.DiscoveryRequest{Node: node(fmt.Sprintf("churn-%d", i)), TypeUrl: resourcev3.ListenerType, ResourceNames: []string{echoTarget}})
				if err == nil {
					var resp *discoveryv3.DiscoveryResponse
					if resp, err = stream.Recv(); err == nil && len(resp.GetResources()) != 1 {
						err = fmt.Errorf("%d listeners", len(resp.GetResources()))
					}
				}
				closeStream()
				if err != nil {
					errc <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
			}
			errc <- nil
		}()
	}
	start := time.Now()
	for i := range conns {
		next <- i
	}
	close(next)
	for range workers {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d connections in %s", conns, time.Since(start).Round(time.Millisecond))
	n := settleGoroutines(t, baseG+5, fmt.Sprintf("after %d connections closed", conns))
	t.Logf("goroutines %d before, %d after", baseG, n)
	waitUntil(t, 10*time.Second, "no churned stream left in /debug/syncz", func() bool {
		return len(syncz(t, cp)) == baseStreams
	})
	heap := liveHeap()
	t.Logf("live heap %d KiB before, %d KiB after", baseHeap>>10, heap>>10)
	if heap > baseHeap+4*mib {
		t.Errorf("live heap grew %d KiB over %d closed connections, want < 4 MiB", (heap-baseHeap)>>10, conns)
	}
	c.waitCalls(t, 20, "after the churn")
	c.checkNoneFailed(t)
}

// TestFault100kNames sends requests naming 100,000 resources of each type,
// twice over: each is answered (with what exists) or refused with a status,
// within a bounded heap that does not grow from one round to the next, and
// the other client keeps being served.
func TestFault100kNames(t *testing.T) {
	cp, _, _, c := echoPlane(t)
	startHeap, baseG := liveHeap(), runtime.NumGoroutine()
	request := func(typ string) {
		names := make([]string, 100_000)
		for i := range names {
			names[i] = fmt.Sprintf("svc-%06d.fault.internal:80", i)
		}
		baseHeap := liveHeap()
		stream, closeStream, err := dialADS(cp.XDSAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer closeStream()
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node("names-" + typ[len(typ)-8:]), TypeUrl: typ, ResourceNames: names}); err != nil {
			t.Fatal(err)
		}
		resp, err := recvWithin(t, stream, 20*time.Second)
		heap := liveHeap()
		switch {
		case err != nil && grpcstatus.Code(err) == codes.Unknown:
			t.Errorf("%s: refused without a status: %v", typ, err)
		case err != nil:
			t.Logf("%s: refused: %v", typ, err)
		case len(resp.GetResources()) > 0:
			t.Errorf("%s: answered %d resources for 100,000 names that do not exist", typ, len(resp.GetResources()))
		}
		t.Logf("%s: live heap %d → %d KiB with the stream open", typ, baseHeap>>10, heap>>10)
		if heap > baseHeap+64*mib {
			t.Errorf("%s: live heap grew %d MiB for one 100,000-name request, want < 64 MiB", typ, (heap-baseHeap)>>20)
		}
		c.waitCalls(t, 10, "with a 100,000-name request open")
	}
	// Twice: the first round may leave the name tables at their high-water
	// mark; the second must add nothing.
	var after [2]uint64
	for round := range after {
		for _, typ := range []string{resourcev3.ListenerType, resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.RouteType} {
			request(typ)
		}
		settleGoroutines(t, baseG+5, "after the 100,000-name streams closed")
		after[round] = liveHeap()
	}
	t.Logf("live heap %d KiB at start, %d and %d KiB after each round of closed streams", startHeap>>10, after[0]>>10, after[1]>>10)
	if after[0] > startHeap+16*mib {
		t.Errorf("live heap %d KiB above the start after 4 closed 100,000-name streams, want < 16 MiB", (after[0]-startHeap)>>10)
	}
	if after[1] > after[0]+4*mib {
		t.Errorf("live heap grew %d KiB over a second round of 4 closed 100,000-name streams, want < 4 MiB", (after[1]-after[0])>>10)
	}
	c.checkNoneFailed(t)
}

// zkPlane runs a control plane whose only source is the ZooKeeper at addr
// (Dubbo providers), with backends b1, b2 and b3 started, b1 registered,
// and a grpc-go client calling the interface continuously.
func zkPlane(t *testing.T, zkAddr, writerAddr string, zc zookeeper.Config, logger *slog.Logger) (*controlplane.ControlPlane, *dubboWriter, []*xdstest.Backend, *caller) {
	t.Helper()
	w := newDubboWriter(t, writerAddr)
	cfg := controlplane.DefaultConfig()
	zc.Servers = []string{zkAddr}
	cfg.Registries = []registries.Spec{{Name: "zookeeper", Type: registries.TypeZooKeeper, ZooKeeper: &zc}}
	cp, _ := runPlane(t, cfg, "", logger)
	waitReady(t, cp)
	var bs []*xdstest.Backend
	for _, id := range []string{"b1", "b2", "b3"} {
		bs = append(bs, xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: id, Namespace: "default"}))
	}
	w.provide(t, bs[0])
	client := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "client", Namespace: "default"}, dubboTarget(bs[0].Port))
	xdstest.CallUntil(t, client, 30*time.Second)
	c := startCaller(t, "client", client)
	c.waitServer(t, "b1", 10, "at start")
	return cp, w, bs, c
}

// workloadEntries counts the WorkloadEntries in the Store.
func workloadEntries(cp *controlplane.ControlPlane) int {
	return len(cp.Store().Snapshot().List(store.KindWorkloadEntry))
}

// TestFaultZooKeeperKillRestart kills ZooKeeper under a grpc-go client
// calling a Dubbo service through vmesh: every call still succeeds and the
// endpoints stay while it is down; once it is back, a provider registered
// then is served.
func TestFaultZooKeeperKillRestart(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	cp, w, bs, c := zkPlane(t, z.Addr, z.Addr, zookeeper.Config{SessionTimeout: 2 * time.Second, RetryMax: 300 * time.Millisecond}, nil)

	eds := edsAcked(t, cp, "client")
	z.Stop()
	waitUntil(t, 20*time.Second, "the registry reported disconnected", func() bool { return !registryConnected(t, cp) })
	c.waitCalls(t, 50, "while ZooKeeper is down")
	if got := edsAcked(t, cp, "client"); got != eds {
		t.Errorf("the client's EDS went from %s to %s while ZooKeeper was down", eds, got)
	}
	if n := workloadEntries(cp); n != 1 {
		t.Errorf("%d WorkloadEntries while ZooKeeper is down, want the last known 1", n)
	}
	z.Start()
	w.provide(t, bs[1])
	c.waitServer(t, "b2", 10, "registered after ZooKeeper came back")
	waitUntil(t, 20*time.Second, "the registry reported connected", func() bool { return registryConnected(t, cp) })
	c.checkNoneFailed(t)
}

// TestFaultZooKeeperSessionExpiry cuts vmesh off from ZooKeeper until the
// server expires its session, registers a provider meanwhile, then lets it
// back: calls succeed throughout, the endpoints stay while cut off, and the
// providers registered during and after the outage are served.
func TestFaultZooKeeperSessionExpiry(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	proxy := testenv.StartProxy(t, z.Addr)
	logs, logger := newLogRecorder()
	cp, w, bs, c := zkPlane(t, proxy.Addr, z.Addr, zookeeper.Config{SessionTimeout: 800 * time.Millisecond, RetryMax: 300 * time.Millisecond}, logger)
	waitUntil(t, 20*time.Second, "ZooKeeper to hold vmesh's sessions only", func() bool { return zkSessions(z.Addr) == zookeeper.Sessions })

	eds := edsAcked(t, cp, "client")
	proxy.Cut()
	waitUntil(t, 20*time.Second, "ZooKeeper to expire vmesh's sessions", func() bool { return zkSessions(z.Addr) == 0 })
	w.provide(t, bs[1])
	c.waitCalls(t, 50, "while vmesh's session is expired")
	if got := edsAcked(t, cp, "client"); got != eds {
		t.Errorf("the client's EDS went from %s to %s while vmesh was cut off", eds, got)
	}
	if n := workloadEntries(cp); n != 1 {
		t.Errorf("%d WorkloadEntries while cut off, want the last known 1", n)
	}
	proxy.Restore()
	waitUntil(t, 20*time.Second, "the adapter to see the expiry", func() bool {
		return logs.count("zookeeper session expired; re-arming its watches") >= zookeeper.Sessions
	})
	c.waitServer(t, "b2", 10, "registered while the session was expired")
	w.provide(t, bs[2])
	c.waitServer(t, "b3", 10, "registered after the new session")
	c.checkNoneFailed(t)
}

// TestFaultConsulKill kills the Consul agent under a grpc-go client calling
// a Consul service through vmesh: every call still succeeds, the endpoints
// stay, and the registry is reported disconnected.
//
// Not covered yet: Consul restarted with a lower index (a dev agent, a
// rebuilt cluster). The adapter's watches retry with their old WaitIndex
// and block until the new index passes it or waitTime (5 min) ends, so a
// service registered after the restart is not seen meanwhile.
func TestFaultConsulKill(t *testing.T) {
	c := testenv.StartConsul(t)
	cfg := controlplane.DefaultConfig()
	cfg.Registries = []registries.Spec{{Name: "consul", Type: registries.TypeConsul, Consul: &consul.Config{Address: c.HTTPAddr, RetryMax: 300 * time.Millisecond}}}
	cp, _ := runPlane(t, cfg, "", nil)
	waitReady(t, cp)
	dumpOnFailure(t, cp)
	b1 := xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: "b1", Namespace: "default"})
	api, err := consulapi.NewClient(&consulapi.Config{Address: c.HTTPAddr})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Agent().ServiceRegister(&consulapi.AgentServiceRegistration{
		ID: b1.ID, Name: "echo", Address: "127.0.0.1", Port: b1.Port, Meta: map[string]string{"protocol": "grpc"},
	}); err != nil {
		t.Fatal(err)
	}
	client := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "client", Namespace: "default"}, fmt.Sprintf("echo.service.consul:%d", b1.Port))
	xdstest.CallUntil(t, client, 30*time.Second)
	calls := startCaller(t, "client", client)
	calls.waitServer(t, "b1", 10, "at start")

	eds := edsAcked(t, cp, "client")
	c.Stop()
	waitUntil(t, 20*time.Second, "the registry reported disconnected", func() bool { return !registryConnected(t, cp) })
	calls.waitCalls(t, 100, "while Consul is down")
	if got := edsAcked(t, cp, "client"); got != eds {
		t.Errorf("the client's EDS went from %s to %s while Consul was down", eds, got)
	}
	if n := workloadEntries(cp); n != 1 {
		t.Errorf("%d WorkloadEntries while Consul is down, want the last known 1", n)
	}
	if st := cp.Store().Snapshot().List(store.KindServiceEntry); len(st) != 1 {
		t.Errorf("%d ServiceEntries while Consul is down, want the last known 1", len(st))
	}
	calls.checkNoneFailed(t)
}
