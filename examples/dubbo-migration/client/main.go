// Command client is a proxyless gRPC consumer of the Dubbo service
// com.acme.Greeter: it dials xds:///<host>:<port> through vmesh, where the
// host is the one vmesh generates from the providers' ZooKeeper nodes
// (com.acme.greeter.v-1-0-0 for version 1.0.0), calls SayHello in a loop
// and prints, every interval, which provider versions answered:
//
//	1.0.0  90% ##################    2.0.0  10% ##                    (512 calls, 0 failed)
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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func main() {
	xdsAddr := flag.String("xds", "127.0.0.1:15010", "vmesh xDS address")
	target := flag.String("target", "com.acme.greeter.v-1-0-0:50051", "host:port of the Dubbo service in the mesh")
	nodeID := flag.String("node", "greeter-consumer", "xDS node id of this client")
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
	fmt.Fprintf(out, "consumer calling xds:///%s (/com.acme.Greeter/SayHello); split per %s:\n", target, every)
	tick := time.NewTicker(every)
	defer tick.Stop()
	cur, failed, first := map[string]int{}, 0, true
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			fmt.Fprintln(out, render(cur, failed))
			cur, failed = map[string]int{}, 0
		default:
		}
		var header metadata.MD
		reply := new(wrapperspb.StringValue)
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		err := cc.Invoke(callCtx, "/com.acme.Greeter/SayHello", wrapperspb.String("mesh"), reply, grpc.Header(&header))
		cancel()
		if err != nil {
			failed++
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if first {
			fmt.Fprintf(out, "first reply: %q\n", reply.GetValue())
			first = false
		}
		v := "unknown"
		if h := header.Get("provider-version"); len(h) > 0 {
			v = h[0]
		}
		cur[v]++
		time.Sleep(2 * time.Millisecond)
	}
}

// render draws one line: "  1.0.0  90% ####...    2.0.0  10% ##   (512 calls, 0 failed)".
func render(split map[string]int, failed int) string {
	total := 0
	for _, n := range split {
		total += n
	}
	if total == 0 {
		return fmt.Sprintf("  no successful calls (%d failed)", failed)
	}
	var b strings.Builder
	for _, v := range slices.Sorted(maps.Keys(split)) {
		pct := 100 * split[v] / total
		fmt.Fprintf(&b, "  %s %3d%% %-20s", v, pct, strings.Repeat("#", pct/5))
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
