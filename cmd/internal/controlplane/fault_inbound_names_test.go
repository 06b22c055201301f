package controlplane_test

import (
	"fmt"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/vmesh/vmesh/internal/xdstest"
)

// TestFaultInboundListenerNames sends one LDS request naming 85,000 server
// listeners (as many as fit in gRPC's 4 MiB request limit; any address
// makes one): vmesh answers at most its bound of them, within 64 MiB, and
// keeps serving the other client.
func TestFaultInboundListenerNames(t *testing.T) {
	cp, _, _, c := echoPlane(t)
	names := make([]string, 85_000) // as many as fit in gRPC's 4 MiB request limit
	for i := range names {
		names[i] = fmt.Sprintf(xdstest.InboundTemplate, fmt.Sprintf("10.%d.%d.%d:80", i>>16, (i>>8)&255, i&255))
	}
	base := liveHeap()
	stream, closeStream := adsStream(t, cp.XDSAddr())
	start := time.Now()
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node("inbound"), TypeUrl: resourcev3.ListenerType, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := recvWithin(t, stream, 60*time.Second)
	heap := liveHeap()
	t.Logf("err=%v, %d listeners in %s, live heap %d → %d MiB with the stream open", err, len(resp.GetResources()), time.Since(start).Round(time.Millisecond), base>>20, heap>>20)
	if n := len(resp.GetResources()); err != nil || n == 0 || n > 4096 {
		t.Errorf("answered %d listeners (%v), want between 1 and the bound of 4096", n, err)
	}
	if heap > base+64<<20 {
		t.Errorf("live heap grew %d MiB for one request, want < 64 MiB", (heap-base)>>20)
	}
	c.waitCalls(t, 10, "with the request open")
	closeStream()
	c.checkNoneFailed(t)
}
