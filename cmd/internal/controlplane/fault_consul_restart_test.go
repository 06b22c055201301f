package controlplane_test

import (
	"fmt"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/registries"
	"github.com/vmesh/vmesh/registries/consul"
)

// TestFaultConsulKillRestart kills the Consul agent under a grpc-go client
// calling a Consul service through vmesh: every call still succeeds and the
// endpoints stay while it is down; once it is back, an instance registered
// then is served.
//
// The restarted dev agent's catalogue is in memory: it is rebuilt from the
// services the agent kept in its data directory a moment after it has a
// leader. vmesh is let back in (through a proxy) once Consul itself lists
// the service again, as a real cluster's servers, which keep their
// catalogue, would answer at once.
func TestFaultConsulKillRestart(t *testing.T) {
	c := testenv.StartConsul(t)
	proxy := testenv.StartProxy(t, c.HTTPAddr)
	cfg := controlplane.DefaultConfig()
	cfg.Registries = []registries.Spec{{Name: "consul", Type: registries.TypeConsul, Consul: &consul.Config{
		Address: proxy.Addr, RetryMax: 300 * time.Millisecond,
		// The churn that raises the index below is not generated, so no
		// state caught mid-churn can be vmesh's last known set.
		Exclude: []string{"consul", "noise"},
	}}}
	cp, _ := runPlane(t, cfg, "", nil)
	waitReady(t, cp)
	dumpOnFailure(t, cp)
	b1 := xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: "b1", Namespace: "default"})
	b2 := xdstest.StartBackend(t, cp.XDSAddr(), xdstest.Node{ID: "b2", Namespace: "default"})
	api, err := consulapi.NewClient(&consulapi.Config{Address: c.HTTPAddr})
	if err != nil {
		t.Fatal(err)
	}
	register := func(b *xdstest.Backend) {
		t.Helper()
		if err := api.Agent().ServiceRegister(&consulapi.AgentServiceRegistration{
			ID: b.ID, Name: "echo", Address: "127.0.0.1", Port: b.Port, Meta: map[string]string{"protocol": "grpc"},
		}); err != nil {
			t.Fatalf("register %s: %v", b.ID, err)
		}
	}
	register(b1)
	client := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "client", Namespace: "default"}, fmt.Sprintf("echo.service.consul:%d", b1.Port))
	xdstest.CallUntil(t, client, 30*time.Second)
	calls := startCaller(t, "client", client)
	calls.waitServer(t, "b1", 10, "at start")
	// Raise Consul's index well past what a fresh agent reaches, as a
	// long-lived catalogue has.
	for i := range 50 {
		id := fmt.Sprintf("noise-%d", i)
		if err := api.Agent().ServiceRegister(&consulapi.AgentServiceRegistration{ID: id, Name: "noise", Port: 1}); err != nil {
			t.Fatal(err)
		}
		if err := api.Agent().ServiceDeregister(id); err != nil {
			t.Fatal(err)
		}
	}
	// vmesh has read the catalogue past the churn once it serves a service
	// registered after it, and once that one is gone again it holds b1 only.
	if err := api.Agent().ServiceRegister(&consulapi.AgentServiceRegistration{ID: "marker", Name: "marker", Address: "127.0.0.1", Port: 1}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "vmesh to read the catalogue past the churn", func() bool { return workloadEntries(cp) == 2 })
	if err := api.Agent().ServiceDeregister("marker"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "vmesh to drop the marker service", func() bool { return workloadEntries(cp) == 1 })

	c.Stop()
	waitUntil(t, 20*time.Second, "the registry reported disconnected", func() bool { return !registryConnected(t, cp) })
	proxy.Cut()
	calls.waitCalls(t, 50, "while Consul is down")
	if n := workloadEntries(cp); n != 1 {
		t.Errorf("%d WorkloadEntries while Consul is down, want the last known 1", n)
	}
	c.Start()
	waitUntil(t, 30*time.Second, "the restarted agent to list b1 again", func() bool {
		entries, _, err := api.Health().Service("echo", "", false, nil)
		return err == nil && len(entries) == 1
	})
	calls.waitCalls(t, 20, "while Consul restarts")
	proxy.Restore()
	register(b2)
	calls.waitServer(t, "b2", 10, "registered after Consul came back")
	if n := workloadEntries(cp); n != 2 {
		t.Errorf("%d WorkloadEntries after the restart, want b1 and b2", n)
	}
	waitUntil(t, 20*time.Second, "the registry reported connected", func() bool { return registryConnected(t, cp) })
	// A service first registered after the restart.
	if err := api.Agent().ServiceRegister(&consulapi.AgentServiceRegistration{
		ID: "b2-new", Name: "echo-new", Address: "127.0.0.1", Port: b2.Port, Meta: map[string]string{"protocol": "grpc"},
	}); err != nil {
		t.Fatal(err)
	}
	newClient := xdstest.Dial(t, cp.XDSAddr(), xdstest.Node{ID: "client-new", Namespace: "default"}, fmt.Sprintf("echo-new.service.consul:%d", b2.Port))
	if got := xdstest.CallUntil(t, newClient, 20*time.Second); got != "b2" {
		t.Errorf("echo-new answered by %q, want b2", got)
	}
	calls.checkNoneFailed(t)
}
