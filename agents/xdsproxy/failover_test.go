package xdsproxy_test

import (
	"net"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/vmesh/vmesh/agents/xdsproxy"
)

// TestStreamFailsOverToTheNextReplica: with the first control-plane
// address dead, a proxied stream reaches the next one over mTLS (each
// replica verified against its own host), and responses come back.
func TestStreamFailsOverToTheNextReplica(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	r := newRigWith(t, func(c *xdsproxy.Config) {
		c.Upstreams = []string{c.Upstream}
		c.Upstream = dead
	})
	stream, err := r.client(t).StreamAggregatedResources(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-1"}, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if e := r.next(t); e.peer != wantPeer || e.node != "envoy-1" {
		t.Fatalf("control plane saw %+v", e)
	}
	if resp, err := stream.Recv(); err != nil || len(resp.GetResources()) != 1 {
		t.Fatalf("response %v, %v", resp, err)
	}
}

// TestUpstreamsAreValidated: a failover address without a port is refused.
func TestUpstreamsAreValidated(t *testing.T) {
	_, err := xdsproxy.New(xdsproxy.Config{Upstream: "127.0.0.1:15012", Upstreams: []string{"cp-2"}, TLS: nil}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `"cp-2" is not host:port`) {
		t.Fatalf("a failover address without a port: %v", err)
	}
}
