package xds_test

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"github.com/vmesh/vmesh/xds/nds"
)

func seWithAddrs(name, host string, addrs ...string) *store.Object {
	return &store.Object{
		Key: store.Key{Kind: store.KindServiceEntry, Namespace: "default", Name: name},
		Spec: &networking.ServiceEntry{
			Hosts: []string{host}, Addresses: addrs, Resolution: networking.ServiceEntry_STATIC,
			Ports:     []*networking.ServicePort{{Name: "http", Number: 9080, Protocol: "HTTP"}},
			Endpoints: []*networking.WorkloadEntry{{Address: "10.9.0.1"}},
		},
	}
}

// TestNameTableOverSotW: the agent's stream (GENERATOR=grpc) asks for the
// NDS type with no names, as Istio's agent does, and gets one NameTable:
// a ServiceEntry's addresses, the automatic VIP of one without, the short
// name and namespace of a name.ns.svc.<domain> host, no wildcard host. A
// change of a host's address is pushed.
func TestNameTableOverSotW(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := store.NewStore()
	objs := []*store.Object{
		seWithAddrs("reviews", "reviews.default.svc.cluster.local"),
		seWithAddrs("db", "db.example.com", "10.1.2.3"),
		seWithAddrs("wild", "*.wild.example.com"),
	}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, ctx, st)

	cc, err := grpc.NewClient(m.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": "default"})
	node := &corev3.Node{Id: "sidecar~10.0.0.9~vm1.default~default.svc.cluster.local", Metadata: md}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: xds.NameTableType}); err != nil {
		t.Fatal(err)
	}
	next := func() (nds.Table, *discoveryv3.DiscoveryResponse) {
		t.Helper()
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetTypeUrl() != xds.NameTableType || len(r.GetResources()) != 1 {
			t.Fatalf("response %s with %d resources, want one %s", r.GetTypeUrl(), len(r.GetResources()), xds.NameTableType)
		}
		tab, err := nds.FromAny(r.GetResources()[0])
		if err != nil {
			t.Fatal(err)
		}
		return tab, r
	}
	tab, r := next()
	rev := tab["reviews.default.svc.cluster.local"]
	if len(rev.IPs) != 1 || rev.IPs[0][:8] != "240.240." || rev.Shortname != "reviews" || rev.Namespace != "default" || rev.Registry != nds.RegistryKubernetes {
		t.Errorf("reviews = %+v, want one 240.240/16 VIP, shortname reviews, namespace default", rev)
	}
	if db := tab["db.example.com"]; len(db.IPs) != 1 || db.IPs[0] != "10.1.2.3" || db.Shortname != "" {
		t.Errorf("db = %+v, want 10.1.2.3", db)
	}
	if len(tab) != 2 {
		t.Errorf("table has %d hosts, want 2 (no wildcard): %v", len(tab), tab)
	}
	// ACK; then change db's address.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: xds.NameTableType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	objs[1] = seWithAddrs("db", "db.example.com", "10.1.2.4")
	start := time.Now()
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	tab, r = next()
	if db := tab["db.example.com"]; len(db.IPs) != 1 || db.IPs[0] != "10.1.2.4" {
		t.Fatalf("after the change db = %+v, want 10.1.2.4", db)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("address change took %v to arrive", d)
	}
	// Changes that leave every address alone (an endpoint; a port, which
	// updates the host's other resources) send no name table.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: xds.NameTableType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	objs[1] = seWithAddrs("db", "db.example.com", "10.1.2.4")
	objs[1].Spec.(*networking.ServiceEntry).Endpoints = []*networking.WorkloadEntry{{Address: "10.9.0.2"}}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	objs[1] = seWithAddrs("db", "db.example.com", "10.1.2.4")
	objs[1].Spec.(*networking.ServiceEntry).Ports = append(objs[1].Spec.(*networking.ServiceEntry).Ports, &networking.ServicePort{Name: "http-alt", Number: 9081, Protocol: "HTTP"})
	time.Sleep(100 * time.Millisecond) // two pushes
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	got := make(chan *discoveryv3.DiscoveryResponse, 1)
	go func() {
		if r, err := stream.Recv(); err == nil {
			got <- r
		}
	}()
	select {
	case r := <-got:
		t.Errorf("an endpoint change pushed %s version %s", r.GetTypeUrl(), r.GetVersionInfo())
	case <-time.After(500 * time.Millisecond):
	}
}

// TestNameTableMessageRoundTrip: Table → NameTable message → wire → Table.
func TestNameTableMessageRoundTrip(t *testing.T) {
	in := nds.Table{"a.ns.svc.cluster.local": {IPs: []string{"240.240.0.1", "2001:2::1"}, Registry: nds.RegistryKubernetes, Shortname: "a", Namespace: "ns"},
		"b.example.com": {IPs: []string{"10.0.0.1"}, Registry: nds.RegistryExternal, AltHosts: []string{"b"}}}
	a, err := anyOf(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := nds.FromAny(a)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Equal(out) {
		t.Fatalf("round trip: %v, want %v", out, in)
	}
}

func anyOf(t nds.Table) (*anypb.Any, error) { return anypb.New(t.Message()) }
