// Command demo runs the quickstart's greeter backends (v1 and v2, proxyless
// gRPC servers configured by vmesh over xDS) and a client that prints the
// live traffic split. Edit ../config/greeter.yaml while it runs and watch
// the split follow.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"
)

const target = "greeter.demo.vmesh.internal:50051"

// backends match the WorkloadEntries in ../config/workloads.yaml.
var backends = []struct{ id, version, addr string }{
	{"greeter-v1-a", "v1", "127.0.0.1:18061"},
	{"greeter-v2-a", "v2", "127.0.0.1:18062"},
}

func main() {
	xdsAddr := flag.String("xds", "127.0.0.1:15010", "vmesh xDS address")
	duration := flag.Duration("duration", 0, "stop after this long (0: run until interrupted)")
	every := flag.Duration("every", time.Second, "print the split this often")
	flag.StringVar(&backends[0].addr, "v1-addr", backends[0].addr, "address of the v1 backend (as in its WorkloadEntry)")
	flag.StringVar(&backends[1].addr, "v2-addr", backends[1].addr, "address of the v2 backend (as in its WorkloadEntry)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if _, err := run(ctx, os.Stdout, *xdsAddr, *every); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// Split counts calls per version over one interval.
type Split map[string]int

// run starts the backends and the client and prints the split every
// interval until ctx ends. It returns the splits it printed.
func run(ctx context.Context, out io.Writer, xdsAddr string, every time.Duration) ([]Split, error) {
	fmt.Fprintf(out, "starting greeter backends; waiting for vmesh at %s to make them SERVING ...\n", xdsAddr)
	versionOf := map[string]string{}
	for _, b := range backends {
		stop, err := serve(ctx, xdsAddr, b.id, b.version, b.addr)
		if err != nil {
			return nil, err
		}
		defer stop()
		versionOf[b.id] = b.version
		fmt.Fprintf(out, "  %s (%s) serving on %s\n", b.id, b.version, b.addr)
	}
	res, err := xds.NewXDSResolverWithConfigForTesting(bootstrap(xdsAddr, "demo-client", nil))
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(res))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	fmt.Fprintf(out, "client calling xds:///%s; split per %s:\n", target, every)
	var splits []Split
	tick := time.NewTicker(every)
	defer tick.Stop()
	cur, failed := Split{}, 0
	for {
		select {
		case <-ctx.Done():
			return splits, nil
		case <-tick.C:
			fmt.Fprintln(out, render(cur, failed))
			splits = append(splits, cur)
			cur, failed = Split{}, 0
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
		cur[versionOf[resp.GetServerId()]]++
		time.Sleep(2 * time.Millisecond)
	}
}

// render draws one line: "v1  80% ################    v2  20% ####".
func render(s Split, failed int) string {
	total := s["v1"] + s["v2"]
	if total == 0 {
		return fmt.Sprintf("  no successful calls yet (%d failed)", failed)
	}
	var b strings.Builder
	for _, v := range []string{"v1", "v2"} {
		pct := 100 * s[v] / total
		fmt.Fprintf(&b, "  %s %3d%% %-20s", v, pct, strings.Repeat("#", pct/5))
	}
	fmt.Fprintf(&b, "  (%d calls)", total)
	return b.String()
}

type greeter struct {
	testpb.UnimplementedTestServiceServer
	id string
}

func (g greeter) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{ServerId: g.id}, nil
}

// serve starts one xDS-enabled backend and waits until it is SERVING.
func serve(ctx context.Context, xdsAddr, id, version, addr string) (func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", id, err)
	}
	serving := make(chan struct{}, 1)
	gs, err := xds.NewGRPCServer(grpc.Creds(insecure.NewCredentials()),
		xds.BootstrapContentsForTesting(bootstrap(xdsAddr, id, map[string]string{"app": "greeter", "version": version})),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				select {
				case serving <- struct{}{}:
				default:
				}
			}
		}))
	if err != nil {
		return nil, err
	}
	testpb.RegisterTestServiceServer(gs, greeter{id: id})
	go func() { _ = gs.Serve(lis) }()
	select {
	case <-serving:
		return gs.Stop, nil
	case <-ctx.Done():
		gs.Stop()
		return nil, fmt.Errorf("backend %s never became SERVING: is vmesh running at %s?", id, xdsAddr)
	}
}

// bootstrap is the grpc-go xDS bootstrap a proxyless app needs (see the README).
func bootstrap(xdsAddr, id string, labels map[string]string) []byte {
	md := map[string]any{"GENERATOR": "grpc", "NAMESPACE": "demo"}
	if labels != nil {
		md["LABELS"] = labels
	}
	b, _ := json.Marshal(map[string]any{
		"xds_servers":                            []any{map[string]any{"server_uri": xdsAddr, "channel_creds": []any{map[string]any{"type": "insecure"}}, "server_features": []string{"xds_v3"}}},
		"node":                                   map[string]any{"id": id, "metadata": md},
		"server_listener_resource_name_template": "xds.vmesh.io/grpc/lds/inbound/%s",
	})
	return b
}
