// Command provider behaves like a Dubbo 3 provider of the com.acme.Greeter
// service on the Triple protocol: a plain gRPC server (Triple is
// gRPC-compatible HTTP/2; with a protobuf IDL `package com.acme; service
// Greeter` the method path is /com.acme.Greeter/SayHello) whose only
// registration is the ephemeral ZooKeeper node Dubbo itself writes:
//
//	/dubbo/com.acme.Greeter/providers/<URL-encoded tri://ip:port/com.acme.Greeter?application=..&version=..&side=provider&...>
//
// It knows nothing about vmesh or xDS: the mesh finds it in ZooKeeper.
// SIGINT or SIGTERM closes the ZooKeeper session, which deletes the node,
// as a Dubbo provider's shutdown hook does.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Interface is the Dubbo service name, and the gRPC service name of its
// Triple endpoint.
const Interface = "com.acme.Greeter"

func main() {
	zkAddr := flag.String("zk", "127.0.0.1:2181", "ZooKeeper servers, comma separated (Dubbo's registry address)")
	addr := flag.String("addr", "127.0.0.1:50051", "Triple listen address (registered with the port it got; port 0: the kernel picks)")
	app := flag.String("application", "greeter-provider", "Dubbo application name")
	version := flag.String("version", "1.0.0", "Dubbo service version")
	group := flag.String("group", "", "Dubbo service group")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, strings.Split(*zkAddr, ","), *addr, *app, *version, *group); err != nil {
		fmt.Fprintln(os.Stderr, "provider:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, servers []string, addr, app, version, group string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	addr = lis.Addr().String() // a port of 0 is the kernel's choice: register what it chose
	gs := grpc.NewServer()
	gs.RegisterService(greeterDesc(), &greeter{version: version, addr: addr})
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(lis) }()
	defer gs.Stop()

	conn, events, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietLogger{}))
	if err != nil {
		return fmt.Errorf("zookeeper %v: %w", servers, err)
	}
	defer conn.Close() // ends the session: ZooKeeper deletes the ephemeral node
	if err := waitConnected(ctx, events); err != nil {
		return err
	}
	node := ProviderPath("dubbo", ProviderURL(addr, app, version, group, os.Getpid(), time.Now()))
	if err := register(conn, node, addr); err != nil {
		return err
	}
	fmt.Printf("provider %s %s serving tri://%s, registered %s\n", app, version, addr, node)
	select {
	case <-ctx.Done():
		return nil
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	}
}

// ProviderURL is the URL a Dubbo 3 provider of Interface on the Triple
// protocol registers: Dubbo's default parameters, sorted by key as Dubbo's
// URL.toFullString writes them. No parameter is specific to vmesh.
func ProviderURL(addr, app, version, group string, pid int, now time.Time) string {
	params := map[string]string{
		"anyhost":                  "false",
		"application":              app,
		"background":               "false",
		"deprecated":               "false",
		"dubbo":                    "2.0.2",
		"dynamic":                  "true",
		"executor-management-mode": "isolation",
		"file-cache":               "true",
		"generic":                  "false",
		"interface":                Interface,
		"methods":                  "SayHello",
		"pid":                      strconv.Itoa(pid),
		"prefer.serialization":     "hessian2,fastjson2",
		"release":                  "3.2.14",
		"service-name-mapping":     "true",
		"side":                     "provider",
		"timestamp":                strconv.FormatInt(now.UnixMilli(), 10),
	}
	if version != "" {
		params["version"] = version
	}
	if group != "" {
		params["group"] = group
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var q strings.Builder
	for i, k := range keys {
		if i > 0 {
			q.WriteByte('&')
		}
		q.WriteString(k + "=" + params[k])
	}
	return "tri://" + addr + "/" + Interface + "?" + q.String()
}

// ProviderPath is the ZooKeeper node Dubbo's ZookeeperRegistry writes for a
// provider URL: /<root>/<interface>/providers/<URL.encode(url)>.
func ProviderPath(root, providerURL string) string {
	return "/" + root + "/" + Interface + "/providers/" + url.QueryEscape(providerURL)
}

// register creates the persistent parents and the ephemeral provider node,
// with the open ACL Dubbo uses. Like Curator's default, the node's data is
// the provider's IP.
func register(conn *zk.Conn, node, addr string) error {
	parts := strings.Split(strings.TrimPrefix(node, "/"), "/")
	for i := 1; i < len(parts); i++ {
		p := "/" + strings.Join(parts[:i], "/")
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	host, _, _ := net.SplitHostPort(addr)
	if _, err := conn.Create(node, []byte(host), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		return fmt.Errorf("register %s: %w", node, err)
	}
	return nil
}

// quietLogger drops the ZooKeeper client's connection-retry chatter.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

func waitConnected(ctx context.Context, events <-chan zk.Event) error {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return nil
			}
		case <-timeout:
			return errors.New("no ZooKeeper session within 30s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// greeter answers SayHello with a greeting and tells the caller which
// provider answered in the response headers provider-version and
// provider-address.
type greeter struct {
	version, addr string
}

func (g *greeter) sayHello(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs("provider-version", g.version, "provider-address", g.addr))
	return wrapperspb.String(fmt.Sprintf("hello %s, from %s:%s at %s", req.GetValue(), Interface, g.version, g.addr)), nil
}

// greeterService is the handler type greeterDesc registers.
type greeterService interface {
	sayHello(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

// greeterDesc is the gRPC service com.acme.Greeter with one unary method,
// SayHello(google.protobuf.StringValue) returns (google.protobuf.StringValue),
// written out instead of generated so the example needs no protoc.
func greeterDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: Interface,
		HandlerType: (*greeterService)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "SayHello",
			Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				return srv.(greeterService).sayHello(ctx, in)
			},
		}},
		Streams:  []grpc.StreamDesc{},
		Metadata: "com/acme/greeter.proto",
	}
}
