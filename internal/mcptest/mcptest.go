// Package mcptest is a scripted ADS server for the tests of vmesh's MCP
// client: a real gRPC server (SotW and delta) on a loopback port whose
// responses the test sends one by one (recorded ones, such as Istio's
// under filestore/mcpsource/testdata, or made up), and whose clients'
// requests (ACKs and NACKs) the test reads. It can drop its clients and
// come back on the same address.
package mcptest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

// Server is a scripted ADS server.
type Server struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	// Addr is the server's HOST:PORT.
	Addr string

	mu    sync.Mutex
	opts  []grpc.ServerOption
	gs    *grpc.Server
	sotw  chan *discovery.DiscoveryResponse
	delta chan *discovery.DeltaDiscoveryResponse
	// SotWRequests and DeltaRequests receive every request of the
	// clients, in order.
	SotWRequests  chan *discovery.DiscoveryRequest
	DeltaRequests chan *discovery.DeltaDiscoveryRequest
	streams       chan struct{} // a token per stream opened
}

// Start serves on a loopback port until the test ends; opts are the
// gRPC server's (credentials.NewTLS for a TLS server).
func Start(t testing.TB, opts ...grpc.ServerOption) *Server {
	t.Helper()
	s := &Server{
		opts:          opts,
		SotWRequests:  make(chan *discovery.DiscoveryRequest, 1000),
		DeltaRequests: make(chan *discovery.DeltaDiscoveryRequest, 1000),
		sotw:          make(chan *discovery.DiscoveryResponse),
		delta:         make(chan *discovery.DeltaDiscoveryResponse),
		streams:       make(chan struct{}, 1000),
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = lis.Addr().String()
	s.serve(lis)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) serve(lis net.Listener) {
	gs := grpc.NewServer(s.opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, s)
	s.mu.Lock()
	s.gs = gs
	s.mu.Unlock()
	go func() { _ = gs.Serve(lis) }()
}

// Stop drops every client and stops listening: a server that went away.
func (s *Server) Stop() {
	s.mu.Lock()
	gs := s.gs
	s.gs = nil
	s.mu.Unlock()
	if gs != nil {
		gs.Stop()
	}
}

// Restart listens again on the same address after Stop.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	var lis net.Listener
	var err error
	for range 100 { // the port was ours a moment ago
		if lis, err = net.Listen("tcp", s.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.serve(lis)
}

// WaitStream waits until a client opened a stream (after Start or
// Restart), failing the test after 20 s.
func (s *Server) WaitStream(t testing.TB) {
	t.Helper()
	select {
	case <-s.streams:
	case <-time.After(20 * time.Second):
		t.Fatal("no client opened a stream within 20s")
	}
}

// SendSotW sends a response on the open SotW stream, waiting for one.
func (s *Server) SendSotW(t testing.TB, r *discovery.DiscoveryResponse) {
	t.Helper()
	select {
	case s.sotw <- r:
	case <-time.After(20 * time.Second):
		t.Fatal("no SotW stream took the response within 20s")
	}
}

// SendDelta sends a response on the open delta stream, waiting for one.
func (s *Server) SendDelta(t testing.TB, r *discovery.DeltaDiscoveryResponse) {
	t.Helper()
	select {
	case s.delta <- r:
	case <-time.After(20 * time.Second):
		t.Fatal("no delta stream took the response within 20s")
	}
}

// NextSotW returns the next SotW request, failing the test after 20 s.
func (s *Server) NextSotW(t testing.TB) *discovery.DiscoveryRequest {
	t.Helper()
	select {
	case r := <-s.SotWRequests:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no SotW request within 20s")
		return nil
	}
}

// NextDelta returns the next delta request, failing the test after 20 s.
func (s *Server) NextDelta(t testing.TB) *discovery.DeltaDiscoveryRequest {
	t.Helper()
	select {
	case r := <-s.DeltaRequests:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no delta request within 20s")
		return nil
	}
}

// StreamAggregatedResources serves one SotW stream.
func (s *Server) StreamAggregatedResources(stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	s.streams <- struct{}{}
	return run(stream.Context(), stream.Recv, s.SotWRequests, s.sotw, stream.Send)
}

// DeltaAggregatedResources serves one delta stream.
func (s *Server) DeltaAggregatedResources(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	s.streams <- struct{}{}
	return run(stream.Context(), stream.Recv, s.DeltaRequests, s.delta, stream.Send)
}

func run[Req, Resp any](ctx context.Context, recv func() (Req, error), reqs chan<- Req, out <-chan Resp, send func(Resp) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		for {
			r, err := recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case r := <-out:
			if err := send(r); err != nil {
				return err
			}
		case err := <-errc:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
