// Command client is a proxyless gRPC client of a service registered in
// Consul: it dials xds:///<service>.service.consul:<port> through vmesh,
// calls grpc.testing.TestService/UnaryCall in a loop and prints, every
// interval, which instances answered:
//
//	inventory-1  33% ######    inventory-2  33% ######    inventory-3  33% ######    (612 calls, 0 failed)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/vmesh/vmesh/examples/internal/split"
)

func main() {
	xdsAddr := flag.String("xds", "127.0.0.1:15010", "vmesh xDS address")
	target := flag.String("target", "inventory.service.consul:15321", "host:port of the service in the mesh")
	nodeID := flag.String("node", "inventory-client", "xDS node id of this client")
	namespace := flag.String("namespace", "default", "namespace of this client (the registry's namespace)")
	every := flag.Duration("every", time.Second, "print the split this often")
	duration := flag.Duration("duration", 0, "stop after this long (0: run until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	cc, err := split.Dial(*xdsAddr, *nodeID, *namespace, *target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	fmt.Printf("client calling xds:///%s; split per %s:\n", *target, *every)
	split.Print(ctx, os.Stdout, *every, func(ctx context.Context) (string, error) {
		resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		return resp.GetServerId(), err
	})
}
