package zookeeper_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/registries/zookeeper"
	"github.com/vmesh/vmesh/store"
)

// dubbo is a Dubbo-like writer: a separate ZooKeeper client that registers
// providers as Dubbo does (persistent parents, ephemeral URL nodes).
type dubbo struct {
	t    *testing.T
	conn *zk.Conn
}

func newDubbo(t *testing.T, addr string) *dubbo {
	t.Helper()
	conn, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return &dubbo{t: t, conn: conn}
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func (d *dubbo) mkdirs(p string) {
	d.t.Helper()
	parts := strings.Split(strings.Trim(p, "/"), "/")
	for i := range parts {
		cur := "/" + strings.Join(parts[:i+1], "/")
		var err error
		for range 50 { // the writer may be reconnecting after a restart
			_, err = d.conn.Create(cur, nil, 0, zk.WorldACL(zk.PermAll))
			if err == nil || err == zk.ErrNodeExists {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			d.t.Fatalf("create %s: %v", cur, err)
		}
	}
}

// create writes a provider node (creating parents), retrying while the
// writer reconnects. Dubbo writes ephemeral nodes; the tests write
// persistent ones so that the writer's own session cannot remove them
// when ZooKeeper restarts: what is under test is the adapter's session.
func (d *dubbo) create(p string, data []byte) {
	d.t.Helper()
	d.mkdirs(p[:strings.LastIndex(p, "/")])
	var err error
	for range 50 {
		_, err = d.conn.Create(p, data, 0, zk.WorldACL(zk.PermAll))
		if err == nil || err == zk.ErrNodeExists {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.t.Fatalf("create %s: %v", p, err)
}

func (d *dubbo) set(p string, data []byte) {
	d.t.Helper()
	d.mkdirs(p[:strings.LastIndex(p, "/")])
	if _, err := d.conn.Create(p, data, 0, zk.WorldACL(zk.PermAll)); err == zk.ErrNodeExists {
		_, err = d.conn.Set(p, data, -1)
		if err != nil {
			d.t.Fatal(err)
		}
	} else if err != nil {
		d.t.Fatal(err)
	}
}

func (d *dubbo) delete(p string) {
	d.t.Helper()
	if err := d.conn.Delete(p, -1); err != nil {
		d.t.Fatalf("delete %s: %v", p, err)
	}
}

func providerPath(iface, rawURL string) string {
	return "/dubbo/" + iface + "/providers/" + dubboNode(rawURL)
}

// run starts an adapter for servers and returns its Store and sink.
func run(t *testing.T, cfg zookeeper.Config) (*store.Store, *adapter.Sink) {
	t.Helper()
	cs := store.NewStore()
	sink := adapter.NewSink(cs, adapter.Meta{Type: "zookeeper", Name: "zk", Namespace: "dubbo"}, strings.Join(cfg.Servers, ","), nil, nil)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
	a, err := zookeeper.New(cfg, sink, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return cs, sink
}

// eventually polls cond on the Store's snapshot for up to 20s.
func eventually(t *testing.T, cs *store.Store, what string, cond func(s *store.Snapshot) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond(cs.Snapshot()) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; store has:\n%s", what, dump(cs.Snapshot()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dump(s *store.Snapshot) string {
	var b strings.Builder
	for _, k := range []store.Kind{store.KindServiceEntry, store.KindWorkloadEntry} {
		for _, o := range s.List(k) {
			fmt.Fprintf(&b, "  %s %v\n", o.Key, o.Spec)
		}
	}
	return b.String()
}

// endpoints returns the addresses:ports of the WorkloadEntries that the
// ServiceEntry with host selects.
func endpoints(s *store.Snapshot, host string) []string {
	var sel map[string]string
	var ns string
	for _, o := range s.List(store.KindServiceEntry) {
		se := o.Spec.(*networking.ServiceEntry)
		if len(se.Hosts) == 1 && se.Hosts[0] == host {
			sel, ns = se.WorkloadSelector.GetLabels(), o.Namespace
		}
	}
	if sel == nil {
		return nil
	}
	var out []string
	for _, o := range s.List(store.KindWorkloadEntry) {
		if o.Namespace != ns {
			continue
		}
		match := true
		for k, v := range sel {
			if o.Labels[k] != v {
				match = false
			}
		}
		if match {
			we := o.Spec.(*networking.WorkloadEntry)
			for name, p := range we.Ports {
				out = append(out, fmt.Sprintf("%s:%d/%s", we.Address, p, name))
			}
		}
	}
	return sortStrings(out)
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func equal(a []string, b ...string) bool { return strings.Join(a, " ") == strings.Join(b, " ") }

const demo = "org.apache.dubbo.demo.DemoService"

func demoURL(ip string, extra string) string {
	return "dubbo://" + ip + ":20880/" + demo + "?anyhost=true&application=demo-provider&dubbo=2.0.2&interface=" + demo +
		"&methods=sayHello,sayHelloAsync&pid=1&release=3.1.0&side=provider&timestamp=1690000000000" + extra
}

func TestProvidersAppearAndDisappear(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	d := newDubbo(t, z.Addr)
	d.create(providerPath(demo, demoURL("10.0.0.1", "")), nil)
	d.mkdirs("/dubbo/" + demo + "/consumers")
	d.mkdirs("/dubbo/config/dubbo")

	cs, sink := run(t, zookeeper.Config{Servers: []string{z.Addr}})
	host := "org.apache.dubbo.demo.demoservice"
	eventually(t, cs, "first provider", func(s *store.Snapshot) bool {
		return equal(endpoints(s, host), "10.0.0.1:20880/tcp-dubbo")
	})
	s := cs.Snapshot()
	se := s.Get(store.Key{Kind: store.KindServiceEntry, Namespace: "dubbo", Name: host})
	if se == nil || se.Annotations[adapter.AnnotationRegistry] != "zookeeper" || se.Origin.Source != "registry:zk" {
		t.Fatalf("ServiceEntry %v", se)
	}
	spec := se.Spec.(*networking.ServiceEntry)
	if len(spec.Ports) != 1 || spec.Ports[0].Number != 20880 || spec.Ports[0].Name != "tcp-dubbo" || spec.Ports[0].Protocol != "TCP" {
		t.Errorf("ports %v", spec.Ports)
	}
	we := s.List(store.KindWorkloadEntry)[0]
	if we.Labels["application"] != "demo-provider" || we.Labels["side"] != "provider" || we.Labels["release"] != "3.1.0" ||
		!strings.HasPrefix(we.Origin.Registry, "dubbo://10.0.0.1:20880/") {
		t.Errorf("WorkloadEntry labels %v origin %v", we.Labels, we.Origin)
	}

	// A second provider with a weight, one with a version (another service),
	// and a malformed URL that must be skipped while the rest are kept.
	d.create(providerPath(demo, demoURL("10.0.0.2", "&weight=50")), nil)
	d.create(providerPath(demo, demoURL("10.0.0.3", "&version=2.0.0&group=gold")), nil)
	d.create("/dubbo/"+demo+"/providers/"+dubboNode("dubbo://10.0.0.9/"+demo+"?weight=x"), nil)
	eventually(t, cs, "three providers in two services", func(s *store.Snapshot) bool {
		return equal(endpoints(s, host), "10.0.0.1:20880/tcp-dubbo", "10.0.0.2:20880/tcp-dubbo") &&
			equal(endpoints(s, host+".g-gold.v-2-0-0"), "10.0.0.3:20880/tcp-dubbo") && sink.Status().Skipped == 1
	})
	for _, o := range cs.Snapshot().List(store.KindWorkloadEntry) {
		if we := o.Spec.(*networking.WorkloadEntry); we.Address == "10.0.0.2" && we.Weight != 50 {
			t.Errorf("weight = %d, want 50", we.Weight)
		}
	}

	d.delete(providerPath(demo, demoURL("10.0.0.1", "")))
	d.delete(providerPath(demo, demoURL("10.0.0.3", "&version=2.0.0&group=gold")))
	eventually(t, cs, "deregistered providers gone", func(s *store.Snapshot) bool {
		return equal(endpoints(s, host), "10.0.0.2:20880/tcp-dubbo") &&
			s.Get(store.Key{Kind: store.KindServiceEntry, Namespace: "dubbo", Name: host + ".g-gold.v-2-0-0"}) == nil
	})
	if st := sink.Status(); !st.Connected || st.ServiceEntries != 1 || st.WorkloadEntries != 1 {
		t.Errorf("status %+v", st)
	}
}

// TestWatchesSurviveSessionExpiryAndRestart cuts the adapter off from
// ZooKeeper long enough for the server to expire its session, changes the
// registry meanwhile, then restarts ZooKeeper itself: each time the last
// known set keeps serving and the watches come back.
func TestWatchesSurviveSessionExpiryAndRestart(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	proxy := testenv.StartProxy(t, z.Addr)
	d := newDubbo(t, z.Addr)
	d.create(providerPath(demo, demoURL("10.0.0.1", "")), nil)
	cs, sink := run(t, zookeeper.Config{Servers: []string{proxy.Addr}, SessionTimeout: 800 * time.Millisecond, RetryMax: 500 * time.Millisecond})
	host := "org.apache.dubbo.demo.demoservice"
	eventually(t, cs, "first provider", func(s *store.Snapshot) bool {
		return equal(endpoints(s, host), "10.0.0.1:20880/tcp-dubbo")
	})

	proxy.Cut()
	d.create(providerPath(demo, demoURL("10.0.0.2", "")), nil)
	// Past the session timeout the server expires the session.
	time.Sleep(2500 * time.Millisecond)
	if got := endpoints(cs.Snapshot(), host); !equal(got, "10.0.0.1:20880/tcp-dubbo") {
		t.Fatalf("while cut off the last known set must stay, got %v", got)
	}
	if sink.Status().Connected {
		t.Error("status still connected while cut off")
	}
	proxy.Restore()
	eventually(t, cs, "change made during the outage, after session expiry", func(s *store.Snapshot) bool {
		return equal(endpoints(s, host), "10.0.0.1:20880/tcp-dubbo", "10.0.0.2:20880/tcp-dubbo")
	})
	// The re-armed watch still fires.
	d.create(providerPath(demo, demoURL("10.0.0.3", "")), nil)
	eventually(t, cs, "change after session expiry", func(s *store.Snapshot) bool {
		return len(endpoints(s, host)) == 3
	})
	// A new interface: the root's watch, on the adapter's other session
	// (TestPathsSpreadOverSessions), re-armed too.
	const greeter = "org.apache.dubbo.demo.GreeterService"
	d.create(providerPath(greeter, "dubbo://10.0.1.1:20880/"+greeter+"?interface="+greeter+"&side=provider"), nil)
	eventually(t, cs, "new interface after session expiry", func(s *store.Snapshot) bool {
		return equal(endpoints(s, "org.apache.dubbo.demo.greeterservice"), "10.0.1.1:20880/tcp-dubbo")
	})

	z.Restart()
	d.create(providerPath(demo, demoURL("10.0.0.4", "")), nil)
	eventually(t, cs, "change after a ZooKeeper restart", func(s *store.Snapshot) bool {
		return len(endpoints(s, host)) == 4
	})
	d.delete(providerPath(demo, demoURL("10.0.0.1", "")))
	eventually(t, cs, "delete after a ZooKeeper restart", func(s *store.Snapshot) bool {
		return len(endpoints(s, host)) == 3 && sink.Status().Connected
	})
}

func TestDubbo3ApplicationLevel(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	d := newDubbo(t, z.Addr)
	inst := func(ip string, rev string) []byte {
		return []byte(`{"name":"shop","id":"` + ip + `:20880","address":"` + ip + `","port":20880,"sslPort":null,` +
			`"payload":{"@class":"org.apache.dubbo.registry.zookeeper.ZookeeperInstance","id":"` + ip + `:20880","name":"shop",` +
			`"metadata":{"dubbo.endpoints":"[{\"port\":20880,\"protocol\":\"dubbo\"},{\"port\":50051,\"protocol\":\"tri\"}]",` +
			`"dubbo.metadata.revision":"` + rev + `","dubbo.metadata.storage-type":"local","timestamp":"1690000000000"}},` +
			`"registrationTimeUTC":1690000000000,"serviceType":"DYNAMIC","uriSpec":null}`)
	}
	d.create("/services/shop/10.1.0.1:20880", inst("10.1.0.1", "r1"))
	d.set("/dubbo/mapping/com.acme.Cart", []byte("shop"))
	cs, _ := run(t, zookeeper.Config{Servers: []string{z.Addr}})

	eventually(t, cs, "application and mapped interface", func(s *store.Snapshot) bool {
		return equal(endpoints(s, "shop.dubbo"), "10.1.0.1:20880/tcp-dubbo", "10.1.0.1:50051/grpc-tri") &&
			equal(endpoints(s, "com.acme.cart"), "10.1.0.1:20880/tcp-dubbo", "10.1.0.1:50051/grpc-tri")
	})
	we := cs.Snapshot().Get(store.Key{Kind: store.KindWorkloadEntry, Namespace: "dubbo", Name: "shop.dubbo-10.1.0.1-20880"})
	if we == nil || we.Labels["application"] != "shop" || we.Labels["dubbo.metadata.revision"] != "r1" {
		t.Fatalf("application WorkloadEntry %+v", we)
	}

	// A second instance with remote metadata naming the services exactly.
	d.set("/dubbo/metadata/shop/r2", []byte(`{"app":"shop","revision":"r2","services":{"gold/com.acme.Cart:1.0.0:tri":`+
		`{"name":"com.acme.Cart","group":"gold","version":"1.0.0","protocol":"tri","port":50051,"path":"com.acme.Cart"}}}`))
	d.create("/services/shop/10.1.0.2:20880", inst("10.1.0.2", "r2"))
	eventually(t, cs, "second instance and its metadata", func(s *store.Snapshot) bool {
		return equal(endpoints(s, "shop.dubbo"), "10.1.0.1:20880/tcp-dubbo", "10.1.0.1:50051/grpc-tri", "10.1.0.2:20880/tcp-dubbo", "10.1.0.2:50051/grpc-tri") &&
			equal(endpoints(s, "com.acme.cart.g-gold.v-1-0-0"), "10.1.0.2:50051/grpc-tri")
	})

	// Registered at interface level too (register-mode=all): one
	// ServiceEntry, the interface-level one.
	d.create(providerPath("com.acme.Cart", "dubbo://10.1.0.1:20880/com.acme.Cart?application=shop&side=provider"), nil)
	eventually(t, cs, "interface level wins", func(s *store.Snapshot) bool {
		return equal(endpoints(s, "com.acme.cart"), "10.1.0.1:20880/tcp-dubbo")
	})

	d.delete("/services/shop/10.1.0.1:20880")
	d.delete("/services/shop/10.1.0.2:20880")
	eventually(t, cs, "application gone with its instances", func(s *store.Snapshot) bool {
		return endpoints(s, "shop.dubbo") == nil && endpoints(s, "com.acme.cart.g-gold.v-1-0-0") == nil
	})
}

func logLevel() slog.Level {
	if os.Getenv("VMESH_TEST_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// kernelPorts returns n distinct ports the kernel gave listeners on
// 127.0.0.1, lowest first; the listeners stay open until the test ends so
// the ports stay distinct.
func kernelPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	slices.Sort(ports)
	return ports
}

// servicePorts returns "name:number" of the ServiceEntry with host, nil
// while there is none.
func servicePorts(s *store.Snapshot, host string) []string {
	se := s.Get(store.Key{Kind: store.KindServiceEntry, Namespace: "dubbo", Name: host})
	if se == nil {
		return nil
	}
	var out []string
	for _, p := range se.Spec.(*networking.ServiceEntry).Ports {
		out = append(out, fmt.Sprintf("%s:%d", p.Name, p.Number))
	}
	return out
}

// TestServicePortSurvivesItsProvider registers providers on different
// ports and removes the one whose port numbers the ServiceEntry: the
// ServiceEntry keeps its port (the address consumers dial), the other
// providers keep their own ports. Only when the service is gone and comes
// back is the number chosen afresh.
func TestServicePortSurvivesItsProvider(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	d := newDubbo(t, z.Addr)
	p := kernelPorts(t, 3)
	provider := func(i int) string {
		return providerPath(demo, fmt.Sprintf("dubbo://127.0.0.%d:%d/%s?application=demo-provider&interface=%s&side=provider", i+1, p[i], demo, demo))
	}
	endpoint := func(i int) string { return fmt.Sprintf("127.0.0.%d:%d/tcp-dubbo", i+1, p[i]) }
	for i := range p {
		d.create(provider(i), nil)
	}
	cs, _ := run(t, zookeeper.Config{Servers: []string{z.Addr}})
	host := "org.apache.dubbo.demo.demoservice"
	first := fmt.Sprintf("tcp-dubbo:%d", p[0])

	eventually(t, cs, "three providers", func(s *store.Snapshot) bool {
		return equal(endpoints(s, host), endpoint(0), endpoint(1), endpoint(2))
	})
	if got := servicePorts(cs.Snapshot(), host); !equal(got, first) {
		t.Fatalf("first sight: ServiceEntry ports %v, want the lowest provider port %s", got, first)
	}

	d.delete(provider(0))
	eventually(t, cs, "the lowest provider gone", func(s *store.Snapshot) bool {
		return equal(endpoints(s, host), endpoint(1), endpoint(2))
	})
	if got := servicePorts(cs.Snapshot(), host); !equal(got, first) {
		t.Fatalf("after the lowest provider left: ServiceEntry ports %v, want %s kept", got, first)
	}

	d.delete(provider(1))
	d.delete(provider(2))
	eventually(t, cs, "service gone", func(s *store.Snapshot) bool { return s.Len() == 0 })
	d.create(provider(1), nil)
	eventually(t, cs, "service back, numbered afresh", func(s *store.Snapshot) bool {
		return equal(servicePorts(s, host), fmt.Sprintf("tcp-dubbo:%d", p[1])) && equal(endpoints(s, host), endpoint(1))
	})
}

// TestProviderChangeHandsOverOnlyItsService checks that after the first
// set, a provider change reaches the Store as a change of that one object
// (Store.Update), not as the complete set again: an object the adapter did
// not generate, put under the adapter's own source, survives the change
// (Store.Replace would remove it), and only the changed key is notified.
func TestProviderChangeHandsOverOnlyItsService(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	d := newDubbo(t, z.Addr)
	other := "org.apache.dubbo.demo.OtherService"
	otherURL := strings.ReplaceAll(demoURL("10.0.0.5", ""), demo, other)
	d.create(providerPath(demo, demoURL("10.0.0.1", "")), nil)
	d.create(providerPath(other, otherURL), nil)
	cs, sink := run(t, zookeeper.Config{Servers: []string{z.Addr}})
	host := "org.apache.dubbo.demo.demoservice"
	eventually(t, cs, "first set", func(s *store.Snapshot) bool {
		return equal(endpoints(s, host), "10.0.0.1:20880/tcp-dubbo") && len(s.List(store.KindWorkloadEntry)) == 2
	})
	<-sink.Synced()
	marker := sink.Meta().ServiceEntry("marker", "test", []string{"marker.example"}, nil, nil)
	if err := cs.Update(sink.Meta().Source(), []*store.Object{marker}, nil); err != nil {
		t.Fatal(err)
	}
	sub := cs.Subscribe()
	defer sub.Close()

	d.create(providerPath(demo, demoURL("10.0.0.2", "")), nil)
	eventually(t, cs, "second provider", func(s *store.Snapshot) bool {
		return equal(endpoints(s, host), "10.0.0.1:20880/tcp-dubbo", "10.0.0.2:20880/tcp-dubbo")
	})
	if cs.Snapshot().Get(marker.Key) == nil {
		t.Fatal("a provider change replaced the adapter's complete set (the marker object is gone)")
	}
	var changed []string
	for k := range sub.Take().Keys {
		changed = append(changed, k.String())
	}
	if want := "WorkloadEntry/dubbo/" + host + "-10.0.0.2-20880"; !equal(changed, want) {
		t.Errorf("changed keys %v, want [%s]", changed, want)
	}
}
