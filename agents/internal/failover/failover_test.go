package failover_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/vmesh/vmesh/agents/internal/failover"
)

type server struct {
	testpb.UnimplementedTestServiceServer
	id string
}

func (s server) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{ServerId: s.id}, nil
}

func start(t *testing.T, id string) (string, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, server{id: id})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), gs.Stop
}

func deadAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// callUntil calls until the answer comes from want, within d.
func callUntil(t *testing.T, c testpb.TestServiceClient, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last string
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
		cancel()
		if err == nil && resp.GetServerId() == want {
			return
		}
		last, lastErr = resp.GetServerId(), err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no answer from %s within %s (last %q, %v)", want, d, last, lastErr)
}

// TestDialFailsOver: a dead first address is skipped; when the replica in
// use dies, the next one takes over; one address works as a plain dial.
func TestDialFailsOver(t *testing.T) {
	a, stopA := start(t, "A")
	b, _ := start(t, "B")
	cc, err := failover.Dial([]string{deadAddr(t), a, b}, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestServiceClient(cc)
	callUntil(t, c, "A", 10*time.Second)
	stopA()
	callUntil(t, c, "B", 10*time.Second)

	one, err := failover.Dial([]string{b}, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	callUntil(t, testpb.NewTestServiceClient(one), "B", 10*time.Second)

	if _, err := failover.Dial(nil); err == nil {
		t.Fatal("no address accepted")
	}
	if _, err := failover.Dial([]string{"no-port"}); err == nil {
		t.Fatal("an address without a port accepted")
	}
	if got := failover.Split(" a:1, ,b:2 "); len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" {
		t.Fatalf("Split: %q", got)
	}
}
