package node_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/xds/node"
)

// What one side writes, the other reads back unchanged.
func TestIdentityRoundTrip(t *testing.T) {
	for _, id := range []node.Identity{
		{ID: "sidecar~10.0.0.7~ledger-1.fin~fin.svc.cluster.local", Type: "sidecar", Cluster: "ledger-1.fin", Generator: node.GeneratorGRPC, Namespace: "fin",
			Labels: map[string]string{"app": "ledger", "version": "v2"}, ServiceAccount: "ledger", WorkloadName: "ledger-1",
			IPs: []string{"10.0.0.7", "fd00::7"}, WorkloadGroup: "ledger", Network: "net-a", Locality: "eu/west-1/a"},
		{ID: "ratings-vm", Generator: node.GeneratorGRPC, Namespace: "demo", WorkloadEntry: "ratings-vm", IPs: []string{"10.2.0.5"}},
		{ID: "envoy-1", Namespace: "default", Labels: map[string]string{}},
		{ID: "regional", Namespace: "default", Locality: "us"},
		// Istio's gateways: the type and namespace from the id.
		{ID: "router~10.0.0.9~ingress-1.edge~edge.svc.cluster.local", Type: node.NodeTypeRouter, Namespace: "edge", Labels: map[string]string{"istio": "ingressgateway"}},
	} {
		n, err := id.Node()
		if err != nil {
			t.Fatal(err)
		}
		got, err := node.Parse(n)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(id, got); diff != "" {
			t.Errorf("round trip (-written +read):\n%s", diff)
		}
	}
}

// A router's id names its namespace when NAMESPACE does not; NAMESPACE wins.
func TestRouterNamespaceFromID(t *testing.T) {
	id, err := node.Parse(&corev3.Node{Id: "router~10.0.0.9~ingress-1~edge.svc.cluster.local"})
	if err != nil || id.Type != node.NodeTypeRouter || id.Namespace != "edge" {
		t.Errorf("got %+v, %v", id, err)
	}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{node.MetaNamespace: structpb.NewStringValue("other")}}
	id, err = node.Parse(&corev3.Node{Id: "router~10.0.0.9~ingress-1~edge.svc.cluster.local", Metadata: md})
	if err != nil || id.Namespace != "other" {
		t.Errorf("got %+v, %v", id, err)
	}
}

func TestParseRefuses(t *testing.T) {
	md := func(k string, v *structpb.Value) *structpb.Struct {
		return &structpb.Struct{Fields: map[string]*structpb.Value{k: v}}
	}
	for name, n := range map[string]*corev3.Node{
		"no id":              {Metadata: md(node.MetaNamespace, structpb.NewStringValue("a"))},
		"namespace a number": {Id: "x", Metadata: md(node.MetaNamespace, structpb.NewNumberValue(1))},
		"labels a string":    {Id: "x", Metadata: md(node.MetaLabels, structpb.NewStringValue("app=a"))},
	} {
		if id, err := node.Parse(n); err == nil {
			t.Errorf("%s: parsed as %+v", name, id)
		}
	}
	if id, err := node.Parse(&corev3.Node{Id: "bare"}); err != nil || id.Namespace != node.DefaultNamespace {
		t.Errorf("a bare node: %+v, %v; want namespace %s", id, err, node.DefaultNamespace)
	}
}
