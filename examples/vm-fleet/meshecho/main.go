// Command meshecho is the vm-fleet guide's demo application
// (docs/vm-fleet.md): a proxyless gRPC service that joins the mesh with
// nothing but the files the vmesh agent writes on its VM
// (GRPC_XDS_BOOTSTRAP=/var/lib/vmesh/agent/grpc-bootstrap.json and the
// certificates it names).
//
//	meshecho serve --version v1 [--listen 0.0.0.0:7070]
//	meshecho call [--count N] xds:///echo.fleet.mesh.internal:7070
//
// serve answers every call with its host name, its version and the SPIFFE
// ID of the caller (from the caller's client certificate), with grpc-go's
// xDS server credentials: the control plane's server listener decides
// whether the port requires mTLS (PeerAuthentication STRICT). It tells
// systemd READY=1 (Type=notify) once that listener arrived and it serves.
//
// call makes N calls with xDS client credentials and prints one line per
// answering (version, host, server identity) with its count. It fails when
// a call fails or when any call was not mutual TLS: the client must have
// seen the server's SPIFFE ID and the server the client's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds" // also registers the xds:/// resolver
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("meshecho: ")
	if len(os.Args) < 2 {
		log.Fatal("usage: meshecho serve --version V [--listen ADDR] | meshecho call [--count N] xds:///HOST:PORT")
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "call":
		err = call(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (serve, call)", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
}

// spiffeID is the first URI SAN of the peer's certificate, or "" when the
// connection is not TLS or the peer sent no certificate.
func spiffeID(p *peer.Peer) string {
	if p == nil {
		return ""
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 || len(ti.State.PeerCertificates[0].URIs) == 0 {
		return ""
	}
	return ti.State.PeerCertificates[0].URIs[0].String()
}

// echoServer answers with who it is (Hostname: "host version") and who
// called (ServerId: the caller's SPIFFE ID, "" over plaintext).
type echoServer struct {
	testpb.UnimplementedTestServiceServer
	who string
}

func (s echoServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	p, _ := peer.FromContext(ctx)
	return &testpb.SimpleResponse{Hostname: s.who, ServerId: spiffeID(p)}, nil
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	version := fs.String("version", "", "the version this instance reports (required)")
	listen := fs.String("listen", "0.0.0.0:7070", "address to serve on")
	_ = fs.Parse(args)
	if *version == "" {
		return errors.New("serve: --version is required")
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return err
	}
	var notify sync.Once
	srv, err := xds.NewGRPCServer(grpc.Creds(creds), xds.ServingModeCallback(func(addr net.Addr, a xds.ServingModeChangeArgs) {
		log.Printf("%s: serving mode %s (%v)", addr, a.Mode, a.Err)
		if a.Mode == connectivity.ServingModeServing {
			notify.Do(func() {
				if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
					log.Printf("sd_notify: %v", err)
				}
			})
		}
	}))
	if err != nil {
		return err
	}
	testpb.RegisterTestServiceServer(srv, echoServer{who: host + " " + *version})
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	log.Printf("%s %s on %s, waiting for its listener from the control plane", host, *version, lis.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; srv.GracefulStop() }()
	return srv.Serve(lis)
}

func call(args []string) error {
	fs := flag.NewFlagSet("call", flag.ExitOnError)
	count := fs.Int("count", 1, "number of calls")
	wait := fs.Duration("wait", 30*time.Second, "how long the first call may wait for the service's config and endpoints")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		return errors.New("call: want one target, xds:///HOST:PORT")
	}
	target := fs.Arg(0)
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	answers := map[string]int{}
	caller := ""
	for i := 0; i < *count; i++ {
		timeout, opts := 5*time.Second, []grpc.CallOption{}
		if i == 0 {
			// The first call waits until the config and an endpoint arrived.
			timeout, opts = *wait, append(opts, grpc.WaitForReady(true))
		}
		var p peer.Peer
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, append(opts, grpc.Peer(&p))...)
		cancel()
		if err != nil {
			return fmt.Errorf("call %d of %d to %s: %w", i+1, *count, target, err)
		}
		server := spiffeID(&p)
		if server == "" || resp.GetServerId() == "" {
			return fmt.Errorf("call %d of %d to %s was not mutual TLS: the client saw server identity %q, the server saw caller identity %q (%s)",
				i+1, *count, target, server, resp.GetServerId(), p.Addr)
		}
		caller = resp.GetServerId()
		answers[resp.GetHostname()+" "+server]++
	}
	fmt.Printf("%d calls to %s over mTLS, the servers saw the caller as %s\n", *count, target, caller)
	keys := make([]string, 0, len(answers))
	for k := range answers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var host, version, id string
		fmt.Sscan(k, &host, &version, &id)
		fmt.Printf("%5d  %-4s %-4s %s\n", answers[k], version, host, id)
	}
	return nil
}
