package grpc_test

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/grpc"
)

// clientView builds a proxyless client's View (namespace default) of
// configYAML.
func clientView(t *testing.T, configYAML string) *model.View {
	t.Helper()
	objs, errs := filestore.Decode("config.yaml", []byte(configYAML))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	return model.NewView(model.Build(st.Snapshot()), model.Workload{ID: "client", Kind: model.KindGRPC, Reads: grpc.Kind{}.Reads(), Namespace: "default"})
}

// clusterOf returns the proxyless cluster named name.
func clusterOf(t *testing.T, v *model.View, name string) *clusterv3.Cluster {
	t.Helper()
	cs, err := grpc.Clusters(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.GetName() == name {
			if err := c.ValidateAll(); err != nil {
				t.Fatalf("cluster %s: %v", name, err)
			}
			return c
		}
	}
	t.Fatalf("no cluster %s", name)
	return nil
}

const echoService = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.mesh.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{name: grpc, number: 7070, protocol: GRPC}]
  endpoints: [{address: 10.0.0.1}, {address: 10.0.0.2}]
---
`

const echoCluster = "outbound|7070||echo.mesh.internal"

// TestOutlierDetectionSuccessRateExplicit: a DestinationRule's outlier
// detection reaches proxyless clients with the success-rate fields written
// out as the values grpc-go and Envoy default them to (enforcing 100,
// minimum hosts 5, request volume 100, stdev factor 1900), so grpc-node,
// which crashes on the unset fields (issue 44), reads what grpc-go reads;
// the fields Istio's settings give stay as given.
func TestOutlierDetectionSuccessRateExplicit(t *testing.T) {
	v := clientView(t, echoService+`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: default}
spec:
  host: echo.mesh.internal
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3, interval: 2s, baseEjectionTime: 20s, maxEjectionPercent: 40}
`)
	od := clusterOf(t, v, echoCluster).GetOutlierDetection()
	for _, f := range []struct {
		name      string
		got, want uint32
		set       bool
	}{
		{"enforcing_success_rate", od.GetEnforcingSuccessRate().GetValue(), 100, od.GetEnforcingSuccessRate() != nil},
		{"success_rate_minimum_hosts", od.GetSuccessRateMinimumHosts().GetValue(), 5, od.GetSuccessRateMinimumHosts() != nil},
		{"success_rate_request_volume", od.GetSuccessRateRequestVolume().GetValue(), 100, od.GetSuccessRateRequestVolume() != nil},
		{"success_rate_stdev_factor", od.GetSuccessRateStdevFactor().GetValue(), 1900, od.GetSuccessRateStdevFactor() != nil},
		{"consecutive_5xx", od.GetConsecutive_5Xx().GetValue(), 3, od.GetConsecutive_5Xx() != nil},
		{"max_ejection_percent", od.GetMaxEjectionPercent().GetValue(), 40, od.GetMaxEjectionPercent() != nil},
	} {
		if !f.set || f.got != f.want {
			t.Errorf("%s = %d (set %v), want %d set", f.name, f.got, f.set, f.want)
		}
	}
	if od.GetInterval().AsDuration().Seconds() != 2 || od.GetBaseEjectionTime().AsDuration().Seconds() != 20 {
		t.Errorf("interval %v, base ejection time %v, want 2s, 20s", od.GetInterval(), od.GetBaseEjectionTime())
	}
	// Failure-percentage ejection stays off for every client: unset
	// enforcing_failure_percentage is 0 in grpc-go and off in grpc-node.
	if od.GetEnforcingFailurePercentage() != nil {
		t.Errorf("enforcing_failure_percentage = %v, want unset", od.GetEnforcingFailurePercentage())
	}
}

// TestNoOutlierDetectionStaysUnset: without outlier detection in the
// DestinationRule the cluster carries none (grpc-go and grpc-node then run
// no outlier detection at all).
func TestNoOutlierDetectionStaysUnset(t *testing.T) {
	v := clientView(t, echoService)
	if od := clusterOf(t, v, echoCluster).GetOutlierDetection(); od != nil {
		t.Errorf("outlier detection = %v, want none", od)
	}
}

// TestLeastRequestListsRoundRobinFallback: a LEAST_REQUEST cluster keeps
// lb_policy LEAST_REQUEST and lists, in load_balancing_policy, least
// request first (what grpc-go takes, choice count 2 as for the lb_policy)
// and round robin second (what grpc-node, which has no least request,
// takes instead of rejecting the cluster).
func TestLeastRequestListsRoundRobinFallback(t *testing.T) {
	v := clientView(t, echoService+`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: default}
spec:
  host: echo.mesh.internal
  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}
`)
	c := clusterOf(t, v, echoCluster)
	if c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST {
		t.Errorf("lb_policy = %v, want LEAST_REQUEST", c.GetLbPolicy())
	}
	var got []string
	for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
		got = append(got, p.GetTypedExtensionConfig().GetTypedConfig().GetTypeUrl())
	}
	want := []string{
		"type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest",
		"type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("load_balancing_policy = %v, want %v", got, want)
	}
	lr := &leastrequestv3.LeastRequest{}
	if err := c.GetLoadBalancingPolicy().GetPolicies()[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(lr); err != nil || lr.GetChoiceCount() != nil {
		t.Errorf("least request config %v (%v), want the default choice count (unset: 2)", lr, err)
	}
	// Other policies leave load_balancing_policy unset: lb_policy says it
	// the same way to every client.
	v = clientView(t, echoService)
	if c := clusterOf(t, v, echoCluster); c.GetLoadBalancingPolicy() != nil || c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
		t.Errorf("default cluster: lb_policy %v, load_balancing_policy %v; want ROUND_ROBIN and unset", c.GetLbPolicy(), c.GetLoadBalancingPolicy())
	}
}
