// Command demo runs the quickstart's greeter backends (v1 and v2, proxyless
// gRPC servers configured by vmesh over xDS) and a client that prints the
// live traffic split. Edit ../config/greeter.yaml while it runs and watch
// the split follow.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"

	"github.com/vmesh/vmesh/examples/internal/split"
)

const target = "greeter.demo.vmesh.internal:50051"

// backend is one greeter server: its WorkloadEntry name, version and
// listen address.
type backend struct{ id, version, addr string }

// defaultBackends match the WorkloadEntries in ../config/workloads.yaml.
func defaultBackends() []backend {
	return []backend{
		{"greeter-v1-a", "v1", "127.0.0.1:18061"},
		{"greeter-v2-a", "v2", "127.0.0.1:18062"},
	}
}

func main() {
	backends := defaultBackends()
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
	listeners, err := listen(backends)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	if _, err := run(ctx, os.Stdout, *xdsAddr, *every, backends, listeners); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// listen opens each backend's listener.
func listen(backends []backend) ([]net.Listener, error) {
	var listeners []net.Listener
	for _, b := range backends {
		lis, err := net.Listen("tcp", b.addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return nil, fmt.Errorf("backend %s: %w", b.id, err)
		}
		listeners = append(listeners, lis)
	}
	return listeners, nil
}

// run serves the backends on their listeners, starts the client and prints
// the split every interval until ctx ends. It returns the splits it printed.
func run(ctx context.Context, out io.Writer, xdsAddr string, every time.Duration, backends []backend, listeners []net.Listener) ([]map[string]int, error) {
	fmt.Fprintf(out, "starting greeter backends; waiting for vmesh at %s to make them SERVING ...\n", xdsAddr)
	versionOf := map[string]string{}
	for i, b := range backends {
		stop, err := serve(ctx, xdsAddr, b, listeners[i])
		if err != nil {
			return nil, err
		}
		defer stop()
		versionOf[b.id] = b.version
		fmt.Fprintf(out, "  %s (%s) serving on %s\n", b.id, b.version, listeners[i].Addr())
	}
	cc, err := split.Dial(xdsAddr, "demo-client", "demo", target)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	fmt.Fprintf(out, "client calling xds:///%s; split per %s:\n", target, every)
	return split.Print(ctx, out, every, func(ctx context.Context) (string, error) {
		resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		return versionOf[resp.GetServerId()], err
	}), nil
}

type greeter struct {
	testpb.UnimplementedTestServiceServer
	id string
}

func (g greeter) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{ServerId: g.id}, nil
}

// serve starts one xDS-enabled backend on lis and waits until it is SERVING.
func serve(ctx context.Context, xdsAddr string, b backend, lis net.Listener) (func(), error) {
	id := b.id
	serving := make(chan struct{}, 1)
	gs, err := xds.NewGRPCServer(grpc.Creds(insecure.NewCredentials()),
		xds.BootstrapContentsForTesting(split.Bootstrap(xdsAddr, id, "demo", map[string]string{"app": "greeter", "version": b.version})),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				select {
				case serving <- struct{}{}:
				default:
				}
			}
		}))
	if err != nil {
		lis.Close()
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
