package grpc

import (
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/vmesh/vmesh/xds/gen"
)

// TestEndpointOnlyChangeUpdatesClusterTLS: automatic mTLS depends on the
// endpoints (their service accounts), so an endpoint-only change that flips
// it regenerates CDS, while one that does not reuses the clusters.
func TestEndpointOnlyChangeUpdatesClusterTLS(t *testing.T) {
	st := store.NewStore()
	snap := func(wes ...*networking.WorkloadEntry) *model.Snapshot {
		t.Helper()
		objs := []*store.Object{
			{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "shop", Name: "cart"}, Spec: &networking.ServiceEntry{
				Hosts: []string{"cart.shop"}, Location: networking.ServiceEntry_MESH_INTERNAL, Resolution: networking.ServiceEntry_STATIC,
				Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}},
				WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "cart"}},
			}},
			{Key: store.Key{Kind: store.KindPeerAuthentication, Namespace: "shop", Name: "default"}, Spec: &security.PeerAuthentication{
				Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT}}},
		}
		for i, we := range wes {
			we.Labels = map[string]string{"app": "cart"}
			objs = append(objs, &store.Object{Key: store.Key{Kind: store.KindWorkloadEntry, Namespace: "shop", Name: string(rune('a' + i))}, Spec: we})
		}
		if err := st.Replace(store.Source{Name: "t", Class: store.ClassConfig}, objs); err != nil {
			t.Fatal(err)
		}
		return model.Build(st.Snapshot())
	}
	p := model.Workload{ID: "c", Kind: model.KindGRPC, Reads: Kind{}.Reads(), Namespace: "shop"}
	const name = "outbound|7070||cart.shop"
	hasTLS := func(g *gen.Generation) bool {
		c := g.Get(resourcev3.ClusterType, name).Msg.(*clusterv3.Cluster)
		return c.GetTransportSocket() != nil
	}
	g, err := generate(snap(&networking.WorkloadEntry{Address: "10.0.0.1", ServiceAccount: "cart"}), p, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !hasTLS(g) {
		t.Fatal("STRICT endpoint with a service account: want automatic mTLS")
	}

	// Same identities, one more endpoint: EDS only, clusters reused.
	n, full, err := withEndpoints(g, snap(&networking.WorkloadEntry{Address: "10.0.0.1", ServiceAccount: "cart"}, &networking.WorkloadEntry{Address: "10.0.0.2", ServiceAccount: "cart"}))
	if err != nil {
		t.Fatal(err)
	}
	if full || n.Get(resourcev3.ClusterType, name) != g.Get(resourcev3.ClusterType, name) {
		t.Fatalf("an endpoint with the same identity regenerated CDS (full=%v)", full)
	}

	// A new identity changes the SANs; an endpoint without one turns mTLS off.
	n, full, err = withEndpoints(n, snap(&networking.WorkloadEntry{Address: "10.0.0.1", ServiceAccount: "cart"}, &networking.WorkloadEntry{Address: "10.0.0.2", ServiceAccount: "cart-v2"}))
	if err != nil {
		t.Fatal(err)
	}
	if !full || proto.Equal(n.Get(resourcev3.ClusterType, name).Msg, g.Get(resourcev3.ClusterType, name).Msg) {
		t.Fatalf("a new service account must change the cluster's SANs (full=%v)", full)
	}
	n, full, err = withEndpoints(n, snap(&networking.WorkloadEntry{Address: "10.0.0.1", ServiceAccount: "cart"}, &networking.WorkloadEntry{Address: "10.0.0.3"}))
	if err != nil {
		t.Fatal(err)
	}
	if !full || hasTLS(n) {
		t.Fatalf("an endpoint without a service account must turn automatic mTLS off (full=%v)", full)
	}
}
