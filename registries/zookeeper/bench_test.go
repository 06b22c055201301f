package zookeeper_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/registries/zookeeper"
	"github.com/vmesh/vmesh/store"
)

// benchProviders is the providers per interface; the sizes are the
// interfaces: 10,000 and 100,000 providers.
const benchProviders = 10

var benchSizes = []struct {
	name       string
	interfaces int
}{{"10k", 1000}, {"100k", 10000}}

func benchIface(i int) string { return fmt.Sprintf("com.acme.bench.Service%04d", i) }

func benchURL(i, p int) string {
	return fmt.Sprintf("dubbo://10.%d.%d.%d:20880/%s?anyhost=true&application=bench-app-%d&dubbo=2.0.2&interface=%s&methods=a,b,c&pid=1&side=provider&timestamp=1690000000000",
		i/200, i%200, p+1, benchIface(i), i%50, benchIface(i))
}

// populate writes interfaces × providers in batches of Multi creates.
func populate(b *testing.B, conn *zk.Conn, interfaces, providers int) {
	b.Helper()
	acl := zk.WorldACL(zk.PermAll)
	if _, err := conn.Create("/dubbo", nil, 0, acl); err != nil && err != zk.ErrNodeExists {
		b.Fatal(err)
	}
	var ops []any
	flush := func() {
		if len(ops) == 0 {
			return
		}
		if _, err := conn.Multi(ops...); err != nil {
			b.Fatalf("multi of %d creates: %v", len(ops), err)
		}
		ops = ops[:0]
	}
	for i := range interfaces {
		ops = append(ops,
			&zk.CreateRequest{Path: "/dubbo/" + benchIface(i), Acl: acl},
			&zk.CreateRequest{Path: "/dubbo/" + benchIface(i) + "/providers", Acl: acl})
		for p := range providers {
			ops = append(ops, &zk.CreateRequest{Path: "/dubbo/" + benchIface(i) + "/providers/" + dubboNode(benchURL(i, p)), Acl: acl})
		}
		if len(ops) >= 200 {
			flush()
		}
	}
	flush()
}

func benchAdapter(b *testing.B, addr string) (*store.Store, *adapter.Sink, func()) {
	st := store.NewStore()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sink := adapter.NewSink(st, adapter.Meta{Type: "zookeeper", Name: "zk", Namespace: "dubbo"}, addr, nil, quiet)
	a, err := zookeeper.New(zookeeper.Config{Servers: []string{addr}, InitialSyncTimeout: time.Minute}, sink, quiet)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Run(ctx) }()
	return st, sink, func() { cancel(); wg.Wait() }
}

func waitWorkloads(b *testing.B, st *store.Store, n int) {
	deadline := time.Now().Add(5 * time.Minute)
	for len(st.Snapshot().List(store.KindWorkloadEntry)) != n {
		if time.Now().After(deadline) {
			b.Fatalf("store has %d WorkloadEntries, want %d", len(st.Snapshot().List(store.KindWorkloadEntry)), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkInitialSync measures a fresh adapter reading Dubbo interfaces ×
// 10 providers from a real ZooKeeper until the complete set (a
// ServiceEntry per interface, a WorkloadEntry per provider) is in the
// Store: 10,000 and 100,000 providers.
func BenchmarkInitialSync(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) { benchInitialSync(b, sz.interfaces) })
	}
}

func benchInitialSync(b *testing.B, benchInterfaces int) {
	z := testenv.StartZooKeeper(b)
	d := newDubboB(b, z.Addr)
	populate(b, d, benchInterfaces, benchProviders)
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		st, sink, stop := benchAdapter(b, z.Addr)
		waitWorkloads(b, st, benchInterfaces*benchProviders)
		b.StopTimer()
		<-sink.Synced() // the status is updated just after the Store
		if s := sink.Status(); s.ServiceEntries != benchInterfaces {
			b.Fatalf("status %+v", s)
		}
		stop()
		b.StartTimer()
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// BenchmarkProviderChanges measures a stream of provider registrations
// (one provider node each) against a registry of interfaces × 10
// providers (10,000 and 100,000 providers): how many changes per second
// reach the Store, how many Store updates they take, and the CPU each
// costs in the vmesh process (the ZooKeeper server's own CPU is not
// counted). A change should cost the same at both sizes.
func BenchmarkProviderChanges(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) { benchProviderChanges(b, sz.interfaces) })
	}
}

func benchProviderChanges(b *testing.B, benchInterfaces int) {
	z := testenv.StartZooKeeper(b)
	d := newDubboB(b, z.Addr)
	populate(b, d, benchInterfaces, benchProviders)
	st, sink, stop := benchAdapter(b, z.Addr)
	defer stop()
	waitWorkloads(b, st, benchInterfaces*benchProviders)
	syncs0 := sink.Status().Syncs
	acl := zk.WorldACL(zk.PermAll)
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	// Each op adds an 11th provider to one interface; ops are pipelined
	// with async creates, as many providers restarting at once would.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range b.N {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			iface := i % benchInterfaces
			p := benchProviders + i/benchInterfaces
			if _, err := d.Create("/dubbo/"+benchIface(iface)+"/providers/"+dubboNode(benchURL(iface, p)), nil, 0, acl); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	waitWorkloads(b, st, benchInterfaces*benchProviders+b.N)
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "changes/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/change")
	b.ReportMetric(float64(b.N)/float64(max(1, sink.Status().Syncs-syncs0)), "changes/store-update")
	// Remove the added providers again so the next b.N round starts equal.
	for i := range b.N {
		iface := i % benchInterfaces
		p := benchProviders + i/benchInterfaces
		_ = d.Delete("/dubbo/"+benchIface(iface)+"/providers/"+dubboNode(benchURL(iface, p)), -1)
	}
	waitWorkloads(b, st, benchInterfaces*benchProviders)
}

func newDubboB(b *testing.B, addr string) *zk.Conn {
	conn, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Close)
	deadline := time.Now().Add(30 * time.Second)
	for conn.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			b.Fatal("benchmark writer never connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return conn
}
