// Command client is a proxyless gRPC client of a service registered in
// Consul: it dials xds:///<service>.service.consul:<port> through vmesh,
// calls grpc.testing.TestService/UnaryCall in a loop and prints, every
// interval, which instances answered:
//
//	inventory-1  33% ######    inventory-2  33% ######    inventory-3  33% ######    (612 calls, 0 failed)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"
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
	if err := run(ctx, os.Stdout, *xdsAddr, *target, *nodeID, *namespace, *every); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, xdsAddr, target, nodeID, namespace string, every time.Duration) error {
	res, err := xds.NewXDSResolverWithConfigForTesting(bootstrap(xdsAddr, nodeID, namespace))
	if err != nil {
		return fmt.Errorf("xds resolver: %w", err)
	}
	cc, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(res))
	if err != nil {
		return fmt.Errorf("dial %s: %w", target, err)
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	fmt.Fprintf(out, "client calling xds:///%s; split per %s:\n", target, every)
	tick := time.NewTicker(every)
	defer tick.Stop()
	cur, failed := map[string]int{}, 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			fmt.Fprintln(out, render(cur, failed))
			cur, failed = map[string]int{}, 0
		default:
		}
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := client.UnaryCall(callCtx, &testpb.SimpleRequest{})
		cancel()
		if err != nil {
			failed++
			time.Sleep(20 * time.Millisecond)
			continue
		}
		cur[resp.GetServerId()]++
		time.Sleep(2 * time.Millisecond)
	}
}

// render draws one line: "  inventory-1  50% ##########  ...  (612 calls, 0 failed)".
func render(split map[string]int, failed int) string {
	total := 0
	for _, n := range split {
		total += n
	}
	if total == 0 {
		return fmt.Sprintf("  no successful calls (%d failed)", failed)
	}
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(split)) {
		pct := 100 * split[id] / total
		fmt.Fprintf(&b, "  %s %3d%% %-10s", id, pct, strings.Repeat("#", pct/5))
	}
	fmt.Fprintf(&b, "  (%d calls, %d failed)", total, failed)
	return b.String()
}

// bootstrap is the grpc-go xDS bootstrap of a proxyless client (see the
// xds README for the node metadata vmesh reads).
func bootstrap(xdsAddr, id, namespace string) []byte {
	b, _ := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{"server_uri": xdsAddr, "channel_creds": []any{map[string]any{"type": "insecure"}}, "server_features": []string{"xds_v3"}}},
		"node":        map[string]any{"id": id, "metadata": map[string]any{"GENERATOR": "grpc", "NAMESPACE": namespace}},
	})
	return b
}
