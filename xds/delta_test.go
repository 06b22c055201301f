package xds_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"
)

var testSource = store.Source{Name: "test", Class: store.ClassConfig}

func seObj(name, host, app string) *store.Object {
	return &store.Object{
		Key: store.Key{Kind: store.KindServiceEntry, Namespace: "default", Name: name},
		Spec: &networking.ServiceEntry{
			Hosts: []string{host}, Resolution: networking.ServiceEntry_STATIC,
			Ports:            []*networking.ServicePort{{Name: "grpc", Number: 80, Protocol: "GRPC"}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": app}},
		},
	}
}

func weObj(name, app, addr string) *store.Object {
	return &store.Object{
		Key:  store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: name},
		Spec: &networking.WorkloadEntry{Address: addr, Labels: map[string]string{"app": app}},
	}
}

// deltaClient is a hand-written delta ADS client.
type deltaClient struct {
	t      *testing.T
	stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node   *corev3.Node
	resp   chan *discoveryv3.DeltaDiscoveryResponse
}

func newDeltaClient(t *testing.T, ctx context.Context, addr, id string) *deltaClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": "default"})
	c := &deltaClient{t: t, stream: stream, node: &corev3.Node{Id: id, Metadata: md}, resp: make(chan *discoveryv3.DeltaDiscoveryResponse, 16)}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				close(c.resp)
				return
			}
			c.resp <- r
		}
	}()
	return c
}

func (c *deltaClient) send(req *discoveryv3.DeltaDiscoveryRequest) {
	c.t.Helper()
	req.Node = c.node
	if err := c.stream.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

// next waits for a response and ACKs it.
func (c *deltaClient) next() *discoveryv3.DeltaDiscoveryResponse {
	c.t.Helper()
	select {
	case r, ok := <-c.resp:
		if !ok {
			c.t.Fatal("stream closed")
		}
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
		return r
	case <-time.After(10 * time.Second):
		c.t.Fatal("no delta response")
	}
	return nil
}

// none asserts that no response arrives for a while (a push already went
// out to every watcher by then: the test waits for the other client first).
func (c *deltaClient) none(d time.Duration) {
	c.t.Helper()
	select {
	case r := <-c.resp:
		c.t.Fatalf("unexpected response: type %s, resources %v, removed %v", r.GetTypeUrl(), names(r), r.GetRemovedResources())
	case <-time.After(d):
	}
}

func names(r *discoveryv3.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName())
	}
	slices.Sort(out)
	return out
}

func endpointAddrs(t *testing.T, r *discoveryv3.DeltaDiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, res := range r.GetResources() {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := res.GetResource().UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestDeltaEndpointChangeSendsOnlyThatResource(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := store.NewStore()
	objs := []*store.Object{seObj("a", "a.internal", "a"), seObj("b", "b.internal", "b"), weObj("a1", "a", "10.0.0.1"), weObj("b1", "b", "10.0.1.1")}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, ctx, st)
	clusterA, clusterB := xds.ClusterName(80, "", "a.internal"), xds.ClusterName(80, "", "b.internal")

	both := newDeltaClient(t, ctx, m.addr, "delta-both")
	both.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"*"}})
	if r := both.next(); len(r.GetResources()) != 2 || r.GetSystemVersionInfo() == "" {
		t.Fatalf("CDS = %v (version %q), want 2 clusters", names(r), r.GetSystemVersionInfo())
	}
	both.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{clusterA, clusterB}})
	if r := both.next(); !slices.Equal(names(r), []string{clusterA, clusterB}) {
		t.Fatalf("EDS = %v, want both clusters", names(r))
	}
	onlyB := newDeltaClient(t, ctx, m.addr, "delta-b")
	onlyB.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{clusterB}})
	if r := onlyB.next(); !slices.Equal(names(r), []string{clusterB}) {
		t.Fatalf("EDS = %v, want cluster b", names(r))
	}
	pushes := m.counter("vmesh_xds_pushes_total", "CDS")

	// An endpoint of a changes: only a's EDS resource goes out, only to the
	// proxy watching it, and no CDS.
	objs[2] = weObj("a1", "a", "10.0.0.2")
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	r := both.next()
	if r.GetTypeUrl() != resourcev3.EndpointType || !slices.Equal(names(r), []string{clusterA}) || !slices.Equal(endpointAddrs(t, r), []string{"10.0.0.2"}) {
		t.Fatalf("after endpoint change: type %s resources %v addrs %v, want EDS %s only with 10.0.0.2", r.GetTypeUrl(), names(r), endpointAddrs(t, r), clusterA)
	}
	both.none(300 * time.Millisecond)
	onlyB.none(50 * time.Millisecond)
	if got := m.counter("vmesh_xds_pushes_total", "CDS"); got != pushes {
		t.Errorf("CDS pushes went from %v to %v on an endpoint-only change", pushes, got)
	}

	// Unsubscribe from a: its changes no longer arrive.
	both.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesUnsubscribe: []string{clusterA}})
	// Pushes are leading-edge: wait until the server has taken the
	// unsubscription before changing a, or the change may overtake it.
	eventually(t, "the unsubscription of "+clusterA+" taken", func() bool { return !m.holds("delta-both", "EDS", clusterA) })
	objs[2] = weObj("a1", "a", "10.0.0.3")
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	both.none(400 * time.Millisecond)

	// Resubscribe: the current state of a arrives again.
	both.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{clusterA}})
	if r := both.next(); !slices.Equal(names(r), []string{clusterA}) || !slices.Equal(endpointAddrs(t, r), []string{"10.0.0.3"}) {
		t.Fatalf("after resubscribe: %v %v, want %s with 10.0.0.3", names(r), endpointAddrs(t, r), clusterA)
	}

	// Removing service b removes its resources from the delta client.
	if err := st.Replace(testSource, []*store.Object{objs[0], objs[2]}); err != nil {
		t.Fatal(err)
	}
	gotRemoved := map[string]bool{}
	for len(gotRemoved) < 1 {
		r := both.next()
		for _, n := range r.GetRemovedResources() {
			gotRemoved[n] = true
		}
	}
	if !gotRemoved[clusterB] {
		t.Fatalf("removed = %v, want %s", gotRemoved, clusterB)
	}
}

// A DNS service whose endpoint is a host name is a LOGICAL_DNS cluster that
// carries its endpoint in CDS: a WorkloadEntry change must update CDS even
// though only WorkloadEntries changed.
func TestEndpointChangeOfLogicalDNSClusterUpdatesCDS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := store.NewStore()
	dns := seObj("ext", "ext.internal", "ext")
	dns.Spec.(*networking.ServiceEntry).Resolution = networking.ServiceEntry_DNS
	objs := []*store.Object{dns, weObj("ext1", "ext", "one.example.com")}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, ctx, st)
	c := newDeltaClient(t, ctx, m.addr, "dns-watcher")
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"*"}})
	if r := c.next(); len(r.GetResources()) != 1 {
		t.Fatalf("CDS = %v", names(r))
	}
	objs[1] = weObj("ext1", "ext", "two.example.com")
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	r := c.next()
	if r.GetTypeUrl() != resourcev3.ClusterType || len(r.GetResources()) != 1 || !strings.Contains(string(r.GetResources()[0].GetResource().GetValue()), "two.example.com") {
		t.Fatalf("after endpoint change: %s %v, want the LOGICAL_DNS cluster with two.example.com", r.GetTypeUrl(), names(r))
	}
}
