package xds_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"google.golang.org/protobuf/types/known/structpb"
)

// sotwNext waits for a SotW response of any type, ACKs it with the given
// subscription and returns it.
func sotwNext(t *testing.T, c *sotwADS) *discoveryv3.DiscoveryResponse {
	t.Helper()
	select {
	case r, ok := <-c.resp:
		if !ok {
			t.Fatal("SotW stream closed")
		}
		c.send(&discoveryv3.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: c.names[r.GetTypeUrl()]})
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no SotW response")
	}
	return nil
}

func sotwNames(t *testing.T, r *discoveryv3.DiscoveryResponse) []string {
	var out []string
	for _, a := range r.GetResources() {
		out = append(out, resourceName(t, a))
	}
	return out
}

// TestSotWPartialEndpointsFullClusters checks the state-of-the-world
// grouping rules: an endpoint change sends only the changed assignment
// (EDS, like RDS, need not repeat unchanged resources), a cluster change
// sends every cluster (CDS, like LDS, is full state), and a resource the
// client subscribes to again is sent again although it did not change.
func TestSotWPartialEndpointsFullClusters(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := store.NewStore()
	objs := []*store.Object{seObj("a", "a.internal", "a"), seObj("b", "b.internal", "b"), weObj("a1", "a", "10.0.0.1"), weObj("b1", "b", "10.0.1.1")}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, ctx, st)
	clusterA, clusterB := xds.ClusterName(80, "", "a.internal"), xds.ClusterName(80, "", "b.internal")
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": "default"})
	c := newSotwADS(t, ctx, m.addr, &corev3.Node{Id: "sotw", Metadata: md})

	c.subscribe(resourcev3.ClusterType, nil)
	if r := sotwNext(t, c); !slices.Equal(sotwNames(t, r), []string{clusterA, clusterB}) {
		t.Fatalf("CDS = %v, want both clusters", sotwNames(t, r))
	}
	c.subscribe(resourcev3.EndpointType, []string{clusterA, clusterB})
	if r := sotwNext(t, c); !slices.Equal(sotwNames(t, r), []string{clusterA, clusterB}) {
		t.Fatalf("EDS = %v, want both assignments", sotwNames(t, r))
	}

	// An endpoint of a moves: EDS carries a's assignment only.
	objs[2] = weObj("a1", "a", "10.0.0.2")
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	r := sotwNext(t, c)
	if r.GetTypeUrl() != resourcev3.EndpointType || !slices.Equal(sotwNames(t, r), []string{clusterA}) {
		t.Fatalf("after endpoint change: %s %v, want EDS with %s only", r.GetTypeUrl(), sotwNames(t, r), clusterA)
	}
	edsVersion, edsNonce := r.GetVersionInfo(), r.GetNonce()
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := r.GetResources()[0].UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	if got := cla.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress(); got != "10.0.0.2" {
		t.Fatalf("assignment address %s, want 10.0.0.2", got)
	}

	// A new service: CDS is sent in full (a and b unchanged, c new).
	objs = append(objs, seObj("c", "c.internal", "c"))
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	clusterC := xds.ClusterName(80, "", "c.internal")
	if r := sotwNext(t, c); r.GetTypeUrl() != resourcev3.ClusterType || !slices.Equal(sotwNames(t, r), []string{clusterA, clusterB, clusterC}) {
		t.Fatalf("after a new service: %s %v, want CDS with all three clusters", r.GetTypeUrl(), sotwNames(t, r))
	}

	// Dropping b from the subscription and asking for it again gets it
	// again, unchanged (and only it: a is held).
	for _, names := range [][]string{{clusterA}, {clusterA, clusterB}} {
		c.names[resourcev3.EndpointType] = names
		c.send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names, VersionInfo: edsVersion, ResponseNonce: edsNonce})
	}
	if r := sotwNext(t, c); r.GetTypeUrl() != resourcev3.EndpointType || !slices.Equal(sotwNames(t, r), []string{clusterB}) {
		t.Fatalf("after subscribing to b again: %s %v, want EDS with %s", r.GetTypeUrl(), sotwNames(t, r), clusterB)
	}
}
