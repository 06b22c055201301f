package consul_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/registries/consul"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// TestEndToEndProxylessGRPC registers a grpc-go xDS server in Consul and
// reaches it from a proxyless grpc-go client through vmesh: Consul → the
// consul adapter → the Store → vmesh's xDS server → grpc-go. No YAML is
// written for the service.
func TestEndToEndProxylessGRPC(t *testing.T) {
	c := testenv.StartConsul(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	store := store.NewStore()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := xds.NewServer(xds.Options{Logger: quiet, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := model.NewFeed(store, model.FeedSettings{DebounceQuiet: 20 * time.Millisecond, DebounceMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	xdsAddr := lis.Addr().String()
	sink := adapter.NewSink(store, adapter.Meta{Type: "consul", Name: "consul", Namespace: "default"}, c.HTTPAddr, nil, nil)
	a, err := consul.New(consul.Config{Address: c.HTTPAddr}, sink, quiet)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(3)
	go func() { defer wg.Done(); _ = srv.Run(ctx, feed) }()
	go func() { defer wg.Done(); _ = srv.Serve(ctx, lis) }()
	go func() { defer wg.Done(); _ = a.Run(ctx) }()

	backend := xdstest.StartBackend(t, xdsAddr, xdstest.Node{ID: "echo-1", Namespace: "default"})
	cc, err := api.NewClient(&api.Config{Address: c.HTTPAddr})
	if err != nil {
		t.Fatal(err)
	}
	if err := cc.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: "echo-1", Name: "echo", Address: "127.0.0.1", Port: backend.Port,
		Meta: map[string]string{"protocol": "grpc"}, Tags: []string{"version=v1"},
		Check: &api.AgentServiceCheck{CheckID: "echo-1-ttl", TTL: "10m", Status: api.HealthPassing},
	}); err != nil {
		t.Fatal(err)
	}

	client := xdstest.Dial(t, xdsAddr, xdstest.Node{ID: "client-1", Namespace: "default"}, fmt.Sprintf("echo.service.consul:%d", backend.Port))
	if got := xdstest.CallUntil(t, client, 30*time.Second); got != "echo-1" {
		t.Fatalf("answered by %q, want echo-1", got)
	}
}
