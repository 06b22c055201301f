package xds_test

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"github.com/vmesh/vmesh/xds/sidecar"
	networking "istio.io/api/networking/v1alpha3"
)

// TestInboundClusterConnectionPool: a VM's inbound cluster gets the
// connection pool Istio gives it, server side: its Sidecar's ingress
// listener's for the port, else the Sidecar's inboundConnectionPool, else
// the one the DestinationRule of its own service gives the service port
// (port-level settings included); with none, no limit.
func TestInboundClusterConnectionPool(t *testing.T) {
	pool := func(n int32) *networking.ConnectionPoolSettings {
		return &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: n}}
	}
	se := o(store.KindServiceEntry, "shop", &networking.ServiceEntry{
		Hosts: []string{"shop.internal"}, Resolution: networking.ServiceEntry_STATIC, Location: networking.ServiceEntry_MESH_INTERNAL,
		Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC", TargetPort: 17070}, {Name: "http", Number: 8080, Protocol: "HTTP"}},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "shop"}},
	})
	we := o(store.KindWorkloadEntry, "shop-1", &networking.WorkloadEntry{Address: "10.0.0.1", Labels: map[string]string{"app": "shop"}})
	dr := o(store.KindDestinationRule, "shop", &networking.DestinationRule{Host: "shop.internal", TrafficPolicy: &networking.TrafficPolicy{
		ConnectionPool:    pool(10),
		PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{Port: &networking.PortSelector{Number: 8080}, ConnectionPool: pool(20)}},
	}})
	withSidecar := func(sc *networking.Sidecar) *store.Object { return o(store.KindSidecar, "default", sc) }
	ingress := func(port uint32, cp *networking.ConnectionPoolSettings) *networking.IstioIngressListener {
		return &networking.IstioIngressListener{Port: &networking.SidecarPort{Number: port, Protocol: "GRPC", Name: "p"}, DefaultEndpoint: "127.0.0.1:17070", ConnectionPool: cp}
	}
	p := &xds.Proxy{ID: "vm", Kind: xds.KindSidecar, Namespace: "default", Labels: map[string]string{"app": "shop"}, WorkloadName: "shop-1", IPs: []string{"10.0.0.1"}}
	for _, c := range []struct {
		name string
		objs []*store.Object
		want map[uint32]uint32 // inbound port → max connections
	}{
		{"DestinationRule, port-level for 8080", []*store.Object{se, we, dr}, map[uint32]uint32{17070: 10, 8080: 20}},
		{"no pool anywhere", []*store.Object{se, we}, map[uint32]uint32{17070: 1<<32 - 1, 8080: 1<<32 - 1}},
		{"Sidecar inboundConnectionPool wins", []*store.Object{se, we, dr, withSidecar(&networking.Sidecar{InboundConnectionPool: pool(3)})}, map[uint32]uint32{17070: 3, 8080: 3}},
		{"ingress listener's own pool wins", []*store.Object{se, we, dr, withSidecar(&networking.Sidecar{
			InboundConnectionPool: pool(3),
			Ingress:               []*networking.IstioIngressListener{ingress(17070, pool(5)), {Port: &networking.SidecarPort{Number: 8080, Protocol: "HTTP", Name: "h"}, DefaultEndpoint: "127.0.0.1:8080"}},
		})}, map[uint32]uint32{17070: 5, 8080: 3}},
		{"ingress without pools: the DestinationRule's", []*store.Object{se, we, dr, withSidecar(&networking.Sidecar{
			Ingress: []*networking.IstioIngressListener{ingress(17070, nil)},
		})}, map[uint32]uint32{17070: 10}},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := store.NewStore()
			if err := store.Replace(testSource, c.objs); err != nil {
				t.Fatal(err)
			}
			s := model.Build(store.Snapshot())
			cds, err := xds.Clusters(s, p)
			if err != nil {
				t.Fatal(err)
			}
			got := map[uint32]uint32{}
			for _, cl := range cds {
				for port := range c.want {
					if cl.GetName() == sidecar.InboundClusterName(port) {
						got[port] = maxConnections(cl)
					}
				}
			}
			for port, want := range c.want {
				if got[port] != want {
					t.Errorf("inbound|%d|| max connections = %d, want %d", port, got[port], want)
				}
			}
		})
	}
}

func maxConnections(c *clusterv3.Cluster) uint32 {
	return c.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue()
}
