// Package agenttest starts the real server-side parts the agent talks to
// (vmesh's CA over TLS on a loopback port) for the agents' tests. Only tests
// import it.
package agenttest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/bundle"
)

// CA is a running CA with its gRPC server.
type CA struct {
	*ca.CA
	// Addr is the loopback host:port of the TLS server.
	Addr string
	// Server is the serving gRPC server (add services through NewCA's
	// register argument: a serving server accepts no more).
	Server *grpc.Server
}

// Logger returns a logger that discards everything unless -v is given.
func Logger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// NewCA starts a self-signed CA serving CreateCertificate over TLS on
// 127.0.0.1, the way `vmesh serve` serves port 15012. register, when not
// nil, adds further services (an xDS server) and may use the CA to
// authenticate callers; opts are extra server options.
func NewCA(t testing.TB, register func(*grpc.Server, *ca.CA), opts ...grpc.ServerOption) *CA {
	t.Helper()
	c, err := ca.New(ca.Config{DataDir: t.TempDir()}, Logger(t), nil)
	if err != nil {
		t.Fatalf("ca.New: %v", err)
	}
	tlsCfg, err := c.ServerTLSConfig([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, opts...)...)
	c.Register(s)
	if register != nil {
		register(s, c)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return &CA{CA: c, Addr: lis.Addr().String(), Server: s}
}

// Bundle writes a VM bundle for ns/sa (and group, when not empty) into a
// fresh directory and returns the directory and the bundle.
func (c *CA) Bundle(t testing.TB, ns, sa, group string, labels map[string]string) (string, *bundle.Bundle) {
	t.Helper()
	dir := t.TempDir()
	b, err := c.WriteVMBundle(dir, ca.VMBundleRequest{
		Namespace: ns, ServiceAccount: sa, WorkloadGroup: group, Labels: labels,
		DiscoveryAddress: c.Addr, TokenTTL: time.Hour,
	})
	if err != nil {
		t.Fatalf("WriteVMBundle: %v", err)
	}
	return dir, b
}

// Context returns a context cancelled at the end of the test or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
