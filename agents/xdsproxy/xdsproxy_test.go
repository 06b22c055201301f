package xdsproxy_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/vmesh/vmesh/agents/certs"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/agents/internal/agenttest"
	"github.com/vmesh/vmesh/agents/xdsproxy"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/xds/nds"
)

// event is what the control plane saw on a stream.
type event struct {
	protocol string
	peer     string // SPIFFE ID of the mTLS client, "" without one
	node     string
	typeURL  string
	health   *health.Status // set for health reports
	names    []string       // the request's resource names (delta: subscribed)
}

// controlPlane is a small ADS server on the CA's TLS port: it answers every
// (non-ACK) request with one cluster named after the request, authenticates
// callers by their mesh certificate, and records what it saw.
type controlPlane struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	ca     *ca.CA
	events chan event
	mu     sync.Mutex
	kill   []chan struct{}
}

func (c *controlPlane) peer(ctx context.Context) (string, error) {
	id, err := c.ca.PeerIdentity(ctx)
	if err != nil {
		return "", status.Errorf(codes.Unauthenticated, "no mesh certificate: %v", err)
	}
	return id.String(), nil
}

func healthOf(typeURL string, detail interface{ GetMessage() string }, isNil bool) *health.Status {
	if typeURL != xdsproxy.HealthInfoType {
		return nil
	}
	if isNil {
		return &health.Status{Healthy: true}
	}
	return &health.Status{Healthy: false, Message: detail.GetMessage()}
}

func (c *controlPlane) killable() chan struct{} {
	k := make(chan struct{})
	c.mu.Lock()
	c.kill = append(c.kill, k)
	c.mu.Unlock()
	return k
}

// killAll ends every open stream with an error.
func (c *controlPlane) killAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.kill {
		close(k)
	}
	c.kill = nil
}

func (c *controlPlane) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	peer, err := c.peer(s.Context())
	if err != nil {
		return err
	}
	kill := c.killable()
	reqs := make(chan *discoveryv3.DiscoveryRequest)
	errc := make(chan error, 1)
	go func() {
		for {
			r, err := s.Recv()
			if err != nil {
				errc <- err
				return
			}
			reqs <- r
		}
	}()
	node, n := "", 0
	for {
		select {
		case <-kill:
			return status.Error(codes.Unavailable, "killed by the test")
		case err := <-errc:
			return err
		case r := <-reqs:
			if r.GetNode() != nil {
				node = r.GetNode().GetId()
			}
			c.events <- event{protocol: "sotw", peer: peer, node: node, typeURL: r.GetTypeUrl(), health: healthOf(r.GetTypeUrl(), r.GetErrorDetail(), r.GetErrorDetail() == nil), names: r.GetResourceNames()}
			if r.GetTypeUrl() == xdsproxy.HealthInfoType || r.GetTypeUrl() == xdsproxy.CredentialsType || r.GetResponseNonce() != "" {
				continue
			}
			n++
			res, _ := anypb.New(&clusterv3.Cluster{Name: "from-" + node})
			if r.GetTypeUrl() == nds.TypeURL {
				res, _ = anypb.New(nds.Table{"from.example.com": {IPs: []string{"10.0.0." + fmt.Sprint(n)}}}.Message())
			}
			if err := s.Send(&discoveryv3.DiscoveryResponse{TypeUrl: r.GetTypeUrl(), VersionInfo: "v1", Nonce: fmt.Sprint(n), Resources: []*anypb.Any{res}}); err != nil {
				return err
			}
		}
	}
}

func (c *controlPlane) DeltaAggregatedResources(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	peer, err := c.peer(s.Context())
	if err != nil {
		return err
	}
	node, n := "", 0
	for {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		if r.GetNode() != nil {
			node = r.GetNode().GetId()
		}
		c.events <- event{protocol: "delta", peer: peer, node: node, typeURL: r.GetTypeUrl(), health: healthOf(r.GetTypeUrl(), r.GetErrorDetail(), r.GetErrorDetail() == nil), names: r.GetResourceNamesSubscribe()}
		if r.GetTypeUrl() == xdsproxy.HealthInfoType || r.GetTypeUrl() == xdsproxy.CredentialsType || r.GetResponseNonce() != "" {
			continue
		}
		n++
		res, _ := anypb.New(&clusterv3.Cluster{Name: "from-" + node})
		if err := s.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: r.GetTypeUrl(), SystemVersionInfo: "v1", Nonce: fmt.Sprint(n),
			Resources: []*discoveryv3.Resource{{Name: "from-" + node, Version: "1", Resource: res}}}); err != nil {
			return err
		}
	}
}

type rig struct {
	cp    *controlPlane
	proxy *xdsproxy.Proxy
	sock  string
	ctx   context.Context
}

// newRig starts a CA with the test control plane on its TLS port, a
// certificate manager with a VM bundle, and the proxy on a Unix socket.
func newRig(t *testing.T) *rig { return newRigWith(t, nil) }

func newRigWith(t *testing.T, edit func(*xdsproxy.Config)) *rig {
	t.Helper()
	cp := &controlPlane{events: make(chan event, 64)}
	c := agenttest.NewCA(t, func(s *grpc.Server, c *ca.CA) {
		cp.ca = c
		discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, cp)
	})
	_, b := c.Bundle(t, "shop", "cart", "", nil)
	m, err := certs.New(certs.Config{Address: b.DiscoveryAddress, RootsPEM: b.RootCerts, Token: b.Token}, agenttest.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := xdsproxy.Config{Upstream: b.DiscoveryAddress, TLS: m.ClientTLSConfig, RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond}
	if edit != nil {
		edit(&pc)
	}
	p, err := xdsproxy.New(pc, agenttest.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "xds.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); m.Run(ctx) }()
	go func() { defer wg.Done(); p.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-m.Ready():
	case <-ctx.Done():
		t.Fatal("no certificate")
	}
	return &rig{cp: cp, proxy: p, sock: sock, ctx: ctx}
}

func (r *rig) client(t *testing.T) discoveryv3.AggregatedDiscoveryServiceClient {
	conn, err := grpc.NewClient("unix://"+r.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
}

func (r *rig) next(t *testing.T) event {
	t.Helper()
	select {
	case e := <-r.cp.events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("the control plane saw nothing")
		return event{}
	}
}

const wantPeer = "spiffe://cluster.local/ns/shop/sa/cart"

// TestSotWStreamIsProxiedWithHealth: Envoy's SotW ADS stream reaches the
// control plane over mTLS as the VM's identity, responses come back, and
// health reports ride the same stream.
func TestSotWStreamIsProxiedWithHealth(t *testing.T) {
	r := newRig(t)
	stream, err := r.client(t).StreamAggregatedResources(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-1"}, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if e := r.next(t); e.peer != wantPeer || e.node != "envoy-1" || e.typeURL != resourcev3.ClusterType {
		t.Fatalf("control plane saw %+v", e)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	cl := &clusterv3.Cluster{}
	if err := resp.GetResources()[0].UnmarshalTo(cl); err != nil || cl.GetName() != "from-envoy-1" {
		t.Fatalf("response %v (%v)", resp, err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, VersionInfo: "v1", ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if e := r.next(t); e.typeURL != resourcev3.ClusterType || e.node != "envoy-1" {
		t.Fatalf("ACK seen as %+v", e)
	}

	if err := r.proxy.Report(r.ctx, health.Status{Healthy: false, Message: "probe: connection refused"}); err != nil {
		t.Fatal(err)
	}
	if e := r.next(t); e.typeURL != xdsproxy.HealthInfoType || e.health.Healthy || e.health.Message != "probe: connection refused" || e.node != "envoy-1" {
		t.Fatalf("unhealthy report seen as %+v (%+v)", e, e.health)
	}
	if err := r.proxy.Report(r.ctx, health.Status{Healthy: true}); err != nil {
		t.Fatal(err)
	}
	if e := r.next(t); e.typeURL != xdsproxy.HealthInfoType || !e.health.Healthy {
		t.Fatalf("healthy report seen as %+v", e)
	}
}

// TestDeltaStreamIsProxiedWithHealth is the same over delta ADS; a stream
// opened after a report carries that report right after its first request.
func TestDeltaStreamIsProxiedWithHealth(t *testing.T) {
	r := newRig(t)
	if err := r.proxy.Report(r.ctx, health.Status{Healthy: false, Message: "starting"}); err != nil {
		t.Fatal(err)
	}
	stream, err := r.client(t).DeltaAggregatedResources(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "envoy-2"}, TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	if e := r.next(t); e.protocol != "delta" || e.peer != wantPeer || e.node != "envoy-2" || e.typeURL != resourcev3.ClusterType {
		t.Fatalf("control plane saw %+v", e)
	}
	if e := r.next(t); e.typeURL != xdsproxy.HealthInfoType || e.health.Healthy || e.health.Message != "starting" {
		t.Fatalf("the pending report was not sent behind the first request: %+v", e)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 1 || resp.GetResources()[0].GetName() != "from-envoy-2" {
		t.Fatalf("delta response %v", resp)
	}
	if err := r.proxy.Report(r.ctx, health.Status{Healthy: true}); err != nil {
		t.Fatal(err)
	}
	if e := r.next(t); e.protocol != "delta" || !e.health.Healthy {
		t.Fatalf("healthy report seen as %+v", e)
	}
}

// TestCredentialReports: the credentials the agent holds ride its Envoy's
// streams (SotW and delta) as CredentialsType requests: a stream opened
// after a report carries it right behind its first request, and a new
// report reaches every open stream.
func TestCredentialReports(t *testing.T) {
	r := newRig(t)
	if err := r.proxy.ReportCredentials([]string{"gw-cred"}); err != nil {
		t.Fatal(err)
	}
	sotw, err := r.client(t).StreamAggregatedResources(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sotw.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "router-1"}, TypeUrl: resourcev3.ListenerType}); err != nil {
		t.Fatal(err)
	}
	if e := r.next(t); e.typeURL != resourcev3.ListenerType {
		t.Fatalf("control plane saw %+v", e)
	}
	if e := r.next(t); e.typeURL != xdsproxy.CredentialsType || e.node != "router-1" || !slices.Equal(e.names, []string{"gw-cred"}) {
		t.Fatalf("the pending credential report was not sent behind the first request: %+v", e)
	}
	delta, err := r.client(t).DeltaAggregatedResources(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "router-2"}, TypeUrl: resourcev3.ListenerType, ResourceNamesSubscribe: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	if e := r.next(t); e.typeURL != resourcev3.ListenerType || e.node != "router-2" {
		t.Fatalf("control plane saw %+v", e)
	}
	if e := r.next(t); e.typeURL != xdsproxy.CredentialsType || e.protocol != "delta" || !slices.Equal(e.names, []string{"gw-cred"}) {
		t.Fatalf("delta credential report %+v", e)
	}
	// Responses to the first requests may be interleaved with the
	// reports: read until each stream has seen the new one.
	if err := r.proxy.ReportCredentials([]string{"gw-cred", "gw-cred-cacert"}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		e := r.next(t)
		if e.typeURL == xdsproxy.CredentialsType {
			if !slices.Equal(e.names, []string{"gw-cred", "gw-cred-cacert"}) {
				t.Fatalf("new report %+v", e)
			}
			seen[e.protocol] = true
		}
	}
}

// TestUpstreamErrorReachesEnvoy: when the control plane ends the stream,
// the data plane's stream ends with the same status, so Envoy reconnects.
func TestUpstreamErrorReachesEnvoy(t *testing.T) {
	r := newRig(t)
	stream, err := r.client(t).StreamAggregatedResources(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-3"}, TypeUrl: resourcev3.ListenerType}); err != nil {
		t.Fatal(err)
	}
	r.next(t)
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	r.cp.killAll()
	_, err = stream.Recv()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("after the control plane ended the stream: %v, want Unavailable", err)
	}
}

// TestNodeStreamReportsAndReconnects: without Envoy the agent's own stream
// carries the node and health, and after a disconnect it reconnects and
// reports the current health again.
func TestNodeStreamReportsAndReconnects(t *testing.T) {
	r := newRig(t)
	node := &corev3.Node{Id: "sidecar~10.0.0.7~vm-1.shop~shop.svc.cluster.local"}
	if err := r.proxy.Report(r.ctx, health.Status{Healthy: false, Message: "not probed yet"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan error, 1)
	go func() { done <- r.proxy.RunNodeStream(ctx, node) }()
	defer func() { cancel(); <-done }()
	if e := r.next(t); e.node != node.Id || e.peer != wantPeer || e.health == nil || e.health.Healthy {
		t.Fatalf("first node-stream request %+v", e)
	}
	if err := r.proxy.Report(r.ctx, health.Status{Healthy: true}); err != nil {
		t.Fatal(err)
	}
	if e := r.next(t); !e.health.Healthy || e.node != node.Id {
		t.Fatalf("healthy report %+v", e)
	}
	r.cp.killAll()
	if e := r.next(t); e.node != node.Id || !e.health.Healthy {
		t.Fatalf("after reconnecting %+v, want the node and the current (healthy) status", e)
	}
}

// TestNodeStreamReceivesNameTables: with a NameTable callback the node
// stream subscribes to NDS (no names, as Istio's agent), hands each table
// over, ACKs it, and counts as connected only once a table arrived; after
// a reconnect it subscribes again.
func TestNodeStreamReceivesNameTables(t *testing.T) {
	tables := make(chan nds.Table, 8)
	r := newRigWith(t, func(c *xdsproxy.Config) { c.NameTable = func(t nds.Table) { tables <- t } })
	node := &corev3.Node{Id: "sidecar~10.0.0.7~vm-1.shop~shop.svc.cluster.local"}
	if r.proxy.Connected() {
		t.Fatal("connected before any stream")
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan error, 1)
	go func() { done <- r.proxy.RunNodeStream(ctx, node) }()
	defer func() { cancel(); <-done }()
	want := func(typeURL string) {
		t.Helper()
		if e := r.next(t); e.typeURL != typeURL {
			t.Fatalf("request %+v, want %s", e, typeURL)
		}
	}
	want(xdsproxy.HealthInfoType)
	want(nds.TypeURL)
	select {
	case tab := <-tables:
		if ips := tab["from.example.com"].IPs; len(ips) != 1 {
			t.Fatalf("table %v", tab)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no name table")
	}
	want(nds.TypeURL) // the ACK
	if !r.proxy.Connected() {
		t.Error("not connected after the first table")
	}
	r.cp.killAll()
	want(xdsproxy.HealthInfoType)
	want(nds.TypeURL)
	select {
	case <-tables:
	case <-time.After(10 * time.Second):
		t.Fatal("no name table after reconnecting")
	}
}
