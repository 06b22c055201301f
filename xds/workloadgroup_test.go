package xds_test

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/agents/xdsproxy"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

func workloadGroup(ns, name string, probe *networking.ReadinessProbe) *store.Object {
	return &store.Object{
		Key:  store.Key{Kind: store.KindWorkloadGroup, Namespace: ns, Name: name},
		Spec: &networking.WorkloadGroup{Template: &networking.WorkloadEntry{ServiceAccount: "reviews"}, Probe: probe},
	}
}

func tcpProbe(port uint32) *networking.ReadinessProbe {
	return &networking.ReadinessProbe{PeriodSeconds: 1, HealthCheckMethod: &networking.ReadinessProbe_TcpSocket{
		TcpSocket: &networking.TCPHealthCheckConfig{Port: port}}}
}

// TestWorkloadGroupServedToAgent: an agent's stream (GENERATOR=grpc) that
// asks for its WorkloadGroup by name gets the group of its namespace, with
// its probe; a change of the probe is pushed, and a group of another
// namespace with the same name is not the one served.
func TestWorkloadGroupServedToAgent(t *testing.T) {
	if xdsproxy.WorkloadGroupType != xds.WorkloadGroupType {
		t.Fatalf("the agent asks for %s, the server serves %s", xdsproxy.WorkloadGroupType, xds.WorkloadGroupType)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := store.NewStore()
	objs := []*store.Object{workloadGroup("default", "reviews-vms", tcpProbe(9080)), workloadGroup("other", "reviews-vms", tcpProbe(1))}
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
	names := []string{"reviews-vms"}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: xds.WorkloadGroupType, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	next := func() (*networking.WorkloadGroup, *discoveryv3.DiscoveryResponse) {
		t.Helper()
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetTypeUrl() != xds.WorkloadGroupType || len(r.GetResources()) != 1 {
			t.Fatalf("response %s with %d resources, want one %s", r.GetTypeUrl(), len(r.GetResources()), xds.WorkloadGroupType)
		}
		wg := &networking.WorkloadGroup{}
		if err := r.GetResources()[0].UnmarshalTo(wg); err != nil {
			t.Fatal(err)
		}
		return wg, r
	}
	wg, r := next()
	if got := wg.GetProbe().GetTcpSocket().GetPort(); got != 9080 {
		t.Fatalf("served probe port %d, want 9080 (the default namespace's group)", got)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: xds.WorkloadGroupType, ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	objs[0] = workloadGroup("default", "reviews-vms", tcpProbe(9090))
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	wg, _ = next()
	if got := wg.GetProbe().GetTcpSocket().GetPort(); got != 9090 {
		t.Fatalf("after the change the probe port is %d, want 9090", got)
	}
}
