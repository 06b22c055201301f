// Command backend is one instance of an ordinary gRPC service: it serves
// grpc.testing.TestService (UnaryCall answers with its instance id) and the
// standard gRPC health service, and knows nothing about Consul, vmesh or
// xDS. Consul's gRPC health check polls it; the instance is registered in
// Consul from a service definition, as an operator would.
//
// SIGUSR1 makes the health service report NOT_SERVING (the instance keeps
// answering calls, as a draining or degraded one does); SIGUSR2 makes it
// SERVING again. SIGINT or SIGTERM stops it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

func main() {
	id := flag.String("id", "inventory-1", "instance id, returned as server_id")
	addr := flag.String("addr", "127.0.0.1:15321", "listen address (port 0: the kernel picks; printed as \"serving on ADDR\")")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *id, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "backend:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, id, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	addr = lis.Addr().String() // a port of 0 is the kernel's choice: print what it chose
	gs := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	testpb.RegisterTestServiceServer(gs, server{id: id})
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(lis) }()
	defer gs.Stop()
	fmt.Printf("%s serving on %s, health SERVING\n", id, addr)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sig)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-serveErr:
			return fmt.Errorf("serve: %w", err)
		case s := <-sig:
			status := healthpb.HealthCheckResponse_SERVING
			if s == syscall.SIGUSR1 {
				status = healthpb.HealthCheckResponse_NOT_SERVING
			}
			hs.SetServingStatus("", status)
			fmt.Printf("%s health %s\n", id, status)
		}
	}
}

type server struct {
	testpb.UnimplementedTestServiceServer
	id string
}

func (s server) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{ServerId: s.id}, nil
}
