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
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/vmesh/vmesh/examples/internal/split"
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
	cc, err := split.Dial(*xdsAddr, *nodeID, *namespace, *target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	defer cc.Close()
	fmt.Printf("consumer calling xds:///%s (/com.acme.Greeter/SayHello); split per %s:\n", *target, *every)
	first := true
	split.Print(ctx, os.Stdout, *every, func(ctx context.Context) (string, error) {
		var header metadata.MD
		reply := new(wrapperspb.StringValue)
		if err := cc.Invoke(ctx, "/com.acme.Greeter/SayHello", wrapperspb.String("mesh"), reply, grpc.Header(&header)); err != nil {
			return "", err
		}
		if first {
			fmt.Printf("first reply: %q\n", reply.GetValue())
			first = false
		}
		if h := header.Get("provider-version"); len(h) > 0 {
			return h[0], nil
		}
		return "unknown", nil
	})
}
