package consul_test

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

	"github.com/hashicorp/consul/api"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/registries/consul"
	"github.com/vmesh/vmesh/store"
)

func run(t *testing.T, cfg consul.Config) (*store.Store, *adapter.Sink) {
	t.Helper()
	cs := store.NewStore()
	sink := adapter.NewSink(cs, adapter.Meta{Type: "consul", Name: "consul", Namespace: "default"}, cfg.Address, nil, nil)
	level := slog.LevelWarn
	if os.Getenv("VMESH_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	a, err := consul.New(cfg, sink, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
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

func client(t *testing.T, addr string) *api.Client {
	t.Helper()
	c, err := api.NewClient(&api.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func register(t *testing.T, c *api.Client, id, addr string, port int, meta map[string]string, tags ...string) {
	t.Helper()
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: id, Name: "web", Address: addr, Port: port, Tags: tags, Meta: meta,
		Check: &api.AgentServiceCheck{CheckID: "ttl-" + id, TTL: "10m", Status: api.HealthPassing},
	})
	if err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
}

func eventually(t *testing.T, cs *store.Store, what string, cond func(s *store.Snapshot) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond(cs.Snapshot()) {
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, o := range cs.Snapshot().List(store.KindWorkloadEntry) {
				fmt.Fprintf(&b, "  %s healthy=%v %v\n", o.Key, o.Healthy, o.Spec)
			}
			t.Fatalf("timed out waiting for %s; WorkloadEntries:\n%s", what, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// instances returns "address:port healthy" of the web WorkloadEntries.
func instances(s *store.Snapshot) []string {
	var out []string
	for _, o := range s.List(store.KindWorkloadEntry) {
		we := o.Spec.(*networking.WorkloadEntry)
		h := "unknown"
		if o.Healthy != nil {
			h = fmt.Sprint(*o.Healthy)
		}
		for _, p := range we.Ports {
			out = append(out, fmt.Sprintf("%s:%d %s", we.Address, p, h))
		}
	}
	slices.Sort(out)
	return out
}

func is(got []string, want ...string) bool { return slices.Equal(got, want) }

func TestInstancesHealthAndDeregistration(t *testing.T) {
	c := testenv.StartConsul(t)
	cc := client(t, c.HTTPAddr)
	register(t, cc, "web-1", "10.0.0.1", 9090, map[string]string{"protocol": "grpc", "team": "pay"}, "version=v1", "primary")
	cs, sink := run(t, consul.Config{Address: c.HTTPAddr, RetryMax: 500 * time.Millisecond})

	eventually(t, cs, "web-1", func(s *store.Snapshot) bool { return is(instances(s), "10.0.0.1:9090 true") })
	s := cs.Snapshot()
	se := s.Get(store.Key{Kind: store.KindServiceEntry, Namespace: "default", Name: "web"})
	if se == nil {
		t.Fatal("no ServiceEntry web")
	}
	spec := se.Spec.(*networking.ServiceEntry)
	if !slices.Equal(spec.Hosts, []string{"web.service.consul"}) || len(spec.Ports) != 1 ||
		spec.Ports[0].Protocol != "GRPC" || spec.Ports[0].Number != 9090 || spec.Ports[0].Name != "grpc" ||
		spec.Resolution != networking.ServiceEntry_STATIC || spec.Location != networking.ServiceEntry_MESH_INTERNAL {
		t.Errorf("ServiceEntry spec %v", spec)
	}
	if se.Annotations[adapter.AnnotationRegistry] != "consul" {
		t.Errorf("annotations %v", se.Annotations)
	}
	we := s.List(store.KindWorkloadEntry)[0]
	wspec := we.Spec.(*networking.WorkloadEntry)
	if we.Labels["version"] != "v1" || we.Labels["team"] != "pay" || we.Labels["protocol"] != "grpc" ||
		wspec.Locality != "dc1" || we.Annotations[meshlabels.HealthChecksAnnotation] != "true" ||
		we.Origin.Registry != "dc1/vmesh-test/web-1" {
		t.Errorf("WorkloadEntry labels %v locality %q annotations %v origin %v", we.Labels, wspec.Locality, we.Annotations, we.Origin)
	}
	if _, ok := we.Labels["primary"]; ok {
		t.Error("a tag without = must not become a label")
	}

	register(t, cc, "web-2", "10.0.0.2", 9091, map[string]string{"protocol": "grpc"})
	eventually(t, cs, "web-2", func(s *store.Snapshot) bool {
		return is(instances(s), "10.0.0.1:9090 true", "10.0.0.2:9091 true")
	})
	if err := cc.Agent().UpdateTTL("ttl-web-2", "down", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
	eventually(t, cs, "web-2 unhealthy", func(s *store.Snapshot) bool {
		return is(instances(s), "10.0.0.1:9090 true", "10.0.0.2:9091 false")
	})
	if err := cc.Agent().UpdateTTL("ttl-web-2", "", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	eventually(t, cs, "web-2 healthy again", func(s *store.Snapshot) bool {
		return is(instances(s), "10.0.0.1:9090 true", "10.0.0.2:9091 true")
	})
	if err := cc.Agent().ServiceDeregister("web-1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, cs, "web-1 gone", func(s *store.Snapshot) bool { return is(instances(s), "10.0.0.2:9091 true") })
	if err := cc.Agent().ServiceDeregister("web-2"); err != nil {
		t.Fatal(err)
	}
	eventually(t, cs, "service gone", func(s *store.Snapshot) bool {
		return s.Len() == 0
	})
	if st := sink.Status(); !st.Connected || st.Syncs < 5 {
		t.Errorf("status %+v", st)
	}
}

func TestUnreachableKeepsLastKnownSet(t *testing.T) {
	c := testenv.StartConsul(t)
	proxy := testenv.StartProxy(t, c.HTTPAddr)
	cc := client(t, c.HTTPAddr)
	register(t, cc, "web-1", "10.0.0.1", 8080, nil)
	cs, sink := run(t, consul.Config{Address: proxy.Addr, RetryMax: 300 * time.Millisecond})
	eventually(t, cs, "web-1", func(s *store.Snapshot) bool { return is(instances(s), "10.0.0.1:8080 true") })

	proxy.Cut()
	register(t, cc, "web-2", "10.0.0.2", 8080, nil)
	deadline := time.Now().Add(10 * time.Second)
	for sink.Status().Connected {
		if time.Now().After(deadline) {
			t.Fatal("adapter still reports connected while Consul is cut off")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := instances(cs.Snapshot()); !is(got, "10.0.0.1:8080 true") {
		t.Fatalf("while unreachable the last known set must stay, got %v", got)
	}
	if sink.Status().LastError == "" {
		t.Error("no last error recorded")
	}
	proxy.Restore()
	eventually(t, cs, "reconnect and catch up", func(s *store.Snapshot) bool {
		return is(instances(s), "10.0.0.1:8080 true", "10.0.0.2:8080 true")
	})
	// Connected is set by whichever watch reaches Consul first after the
	// cut; the catalogue's may come a moment after the health watch's data.
	deadline = time.Now().Add(10 * time.Second)
	for !sink.Status().Connected {
		if time.Now().After(deadline) {
			t.Fatal("not connected after restore")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestACLToken(t *testing.T) {
	const token = "3f8a1c52-6a0e-4c8e-9d0a-6d1f0b1e2a77"
	c := testenv.StartConsulACL(t, token)
	cc, err := api.NewClient(&api.Config{Address: c.HTTPAddr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	// The management token becomes valid shortly after the leader is elected.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _, err := cc.ACL().TokenReadSelf(nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("management token never accepted: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	register(t, cc, "web-1", "10.0.0.1", 8080, nil)
	tokenFile := t.TempDir() + "/token"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withToken, _ := run(t, consul.Config{Address: c.HTTPAddr, TokenFile: tokenFile, RetryMax: 300 * time.Millisecond})
	eventually(t, withToken, "web-1 read with the ACL token", func(s *store.Snapshot) bool {
		return is(instances(s), "10.0.0.1:8080 true")
	})
	// Without a token, default-deny ACLs hide every service: nothing is generated.
	noToken, sink := run(t, consul.Config{Address: c.HTTPAddr, RetryMax: 300 * time.Millisecond, InitialSyncTimeout: 200 * time.Millisecond})
	deadline = time.Now().Add(5 * time.Second)
	for sink.Status().Syncs == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := noToken.Snapshot().Len(); n != 0 || sink.Status().Syncs == 0 {
		t.Errorf("without a token: %d objects, %d syncs; want 0 objects after a sync", n, sink.Status().Syncs)
	}
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

// webPorts returns the port numbers of the web ServiceEntry, nil while
// there is none.
func webPorts(s *store.Snapshot) []uint32 {
	se := s.Get(store.Key{Kind: store.KindServiceEntry, Namespace: "default", Name: "web"})
	if se == nil {
		return nil
	}
	var out []uint32
	for _, p := range se.Spec.(*networking.ServiceEntry).Ports {
		out = append(out, p.Number)
	}
	return out
}

// TestServicePortSurvivesItsInstance registers instances on different
// ports and deregisters the one whose port numbers the ServiceEntry: the
// ServiceEntry keeps its port (the address clients dial), the others keep
// their own ports. Only when the service is gone and comes back is the
// number chosen afresh.
func TestServicePortSurvivesItsInstance(t *testing.T) {
	c := testenv.StartConsul(t)
	cc := client(t, c.HTTPAddr)
	p := kernelPorts(t, 3)
	grpc := map[string]string{"protocol": "grpc"}
	register(t, cc, "web-1", "127.0.0.1", p[0], grpc)
	register(t, cc, "web-2", "127.0.0.2", p[1], grpc)
	register(t, cc, "web-3", "127.0.0.3", p[2], grpc)
	cs, _ := run(t, consul.Config{Address: c.HTTPAddr, RetryMax: 500 * time.Millisecond})
	inst := func(i int) string { return fmt.Sprintf("127.0.0.%d:%d true", i+1, p[i]) }

	eventually(t, cs, "three instances", func(s *store.Snapshot) bool {
		return is(instances(s), inst(0), inst(1), inst(2))
	})
	if got := webPorts(cs.Snapshot()); !slices.Equal(got, []uint32{uint32(p[0])}) {
		t.Fatalf("first sight: ServiceEntry ports %v, want the lowest instance port %d", got, p[0])
	}

	if err := cc.Agent().ServiceDeregister("web-1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, cs, "web-1 gone", func(s *store.Snapshot) bool { return is(instances(s), inst(1), inst(2)) })
	if got := webPorts(cs.Snapshot()); !slices.Equal(got, []uint32{uint32(p[0])}) {
		t.Fatalf("after the lowest instance left: ServiceEntry ports %v, want %d kept", got, p[0])
	}
	// Another port becoming the most common does not renumber it either.
	register(t, cc, "web-4", "127.0.0.4", p[2], grpc)
	eventually(t, cs, "web-4", func(s *store.Snapshot) bool {
		return is(instances(s), inst(1), inst(2), fmt.Sprintf("127.0.0.4:%d true", p[2]))
	})
	if got := webPorts(cs.Snapshot()); !slices.Equal(got, []uint32{uint32(p[0])}) {
		t.Fatalf("with %d the most common: ServiceEntry ports %v, want %d kept", p[2], got, p[0])
	}

	for _, id := range []string{"web-2", "web-3", "web-4"} {
		if err := cc.Agent().ServiceDeregister(id); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, cs, "service gone", func(s *store.Snapshot) bool { return s.Len() == 0 })
	register(t, cc, "web-5", "127.0.0.5", p[1], grpc)
	eventually(t, cs, "service back, numbered afresh", func(s *store.Snapshot) bool {
		return slices.Equal(webPorts(s), []uint32{uint32(p[1])})
	})
}
