package sidecar_test

import (
	"net"
	"strconv"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// inboundAt is what an inbound cluster forwards to: "original" for the
// connection's own destination, else the endpoint's address (host:port or
// a pipe's path); and the source address its connections are bound to.
func inboundAt(t *testing.T, c *clusterv3.Cluster) (to, from string) {
	t.Helper()
	if c == nil {
		t.Fatal("no such cluster")
	}
	from = c.GetUpstreamBindConfig().GetSourceAddress().GetAddress()
	if c.GetType() == clusterv3.Cluster_ORIGINAL_DST {
		if c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED || c.GetLoadAssignment() != nil {
			t.Errorf("%s: ORIGINAL_DST with lb policy %s and load assignment %v", c.GetName(), c.GetLbPolicy(), c.GetLoadAssignment())
		}
		return "original", from
	}
	a := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress()
	if p := a.GetPipe().GetPath(); p != "" {
		return p, from
	}
	sa := a.GetSocketAddress()
	return net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))), from
}

// A sidecar forwards inbound traffic as Istio's does: under MeshConfig's
// inboundTrafficPolicy PASSTHROUGH (the default) to the VM address it was
// sent to, from 127.0.0.6 (::6 on an IPv6-only VM), the source the capture
// lets through, so a service listening on loopback only is not exposed;
// under LOCALHOST to 127.0.0.1 on the workload port. InboundPassthroughCluster
// (ports that are no workload port) binds 127.0.0.6 too: the capture sends
// the sidecar's other connections to its own address back to 15006.
func TestInboundClustersAsIstio(t *testing.T) {
	v := meshFieldsViewOf(t, "", productpage())
	to, from := inboundAt(t, clusterNamed(t, v, "inbound|8080||"))
	if to != "original" || from != "127.0.0.6" {
		t.Errorf("PASSTHROUGH: inbound|8080|| to %s from %q, want the original destination from 127.0.0.6", to, from)
	}
	if c := clusterNamed(t, v, "inbound|8080||"); c.GetCleanupInterval().GetSeconds() != 9223372035 {
		t.Errorf("inbound cleanup interval %v, want Istio's maximum", c.GetCleanupInterval())
	}
	if to, from := inboundAt(t, clusterNamed(t, v, sidecar.InboundPassthroughCluster)); to != "original" || from != "127.0.0.6" {
		t.Errorf("InboundPassthroughCluster to %s from %q, want the original destination from 127.0.0.6", to, from)
	}
	if c := clusterNamed(t, v, sidecar.PassthroughCluster); c.GetUpstreamBindConfig() != nil {
		t.Errorf("outbound PassthroughCluster binds %v", c.GetUpstreamBindConfig())
	}

	v = meshFieldsViewOf(t, "inboundTrafficPolicy: {mode: LOCALHOST}\n", productpage())
	if to, from := inboundAt(t, clusterNamed(t, v, "inbound|8080||")); to != "127.0.0.1:8080" || from != "" {
		t.Errorf("LOCALHOST: inbound|8080|| to %s from %q, want 127.0.0.1:8080, no bind", to, from)
	}

	six := productpage()
	six.IPs = []string{"fd00::5"}
	v = meshFieldsViewOf(t, "", six)
	if to, from := inboundAt(t, clusterNamed(t, v, sidecar.InboundPassthroughCluster)); to != "original" || from != "::6" {
		t.Errorf("IPv6-only VM: InboundPassthroughCluster to %s from %q, want ::6", to, from)
	}
	// Dual stack: 127.0.0.6, and ::6 for IPv6 destinations (Envoy binds
	// the source of the upstream's family).
	dual := productpage()
	dual.IPs = []string{"10.0.0.5", "fd00::5"}
	v = meshFieldsViewOf(t, "", dual)
	b := clusterNamed(t, v, "inbound|8080||").GetUpstreamBindConfig()
	if b.GetSourceAddress().GetAddress() != "127.0.0.6" || len(b.GetExtraSourceAddresses()) != 1 || b.GetExtraSourceAddresses()[0].GetAddress().GetAddress() != "::6" {
		t.Errorf("dual-stack VM: inbound bind %v, want 127.0.0.6 and extra ::6", b)
	}
	v = meshFieldsViewOf(t, "inboundTrafficPolicy: {mode: LOCALHOST}\n", six)
	if to, _ := inboundAt(t, clusterNamed(t, v, "inbound|8080||")); to != "[::1]:8080" {
		t.Errorf("IPv6-only VM, LOCALHOST: inbound|8080|| to %s, want ::1", to)
	}
}

// A Sidecar ingress listener's defaultEndpoint is read as Istio reads it:
// none for the original destination, 127.0.0.1 for loopback (no bind),
// 0.0.0.0 for the VM's own address (from 127.0.0.6), a unix socket as is.
func TestSidecarIngressDefaultEndpoints(t *testing.T) {
	ingress := func(port uint32, ep string) *networking.IstioIngressListener {
		return &networking.IstioIngressListener{Port: &networking.SidecarPort{Number: port, Protocol: "HTTP", Name: "p" + strconv.Itoa(int(port))}, DefaultEndpoint: ep}
	}
	spec := &networking.Sidecar{
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "productpage"}},
		Ingress: []*networking.IstioIngressListener{
			ingress(9001, ""), ingress(9002, "127.0.0.1:8002"), ingress(9003, "0.0.0.0:8003"), ingress(9004, "unix:///run/app.sock"),
		},
	}
	snap := loadEdited(t, featuresDir, without(store.KindSidecar), object(store.KindSidecar, "shop", "productpage", spec))
	v := model.NewView(snap, productpage())
	want := map[string][2]string{
		"inbound|9001||": {"original", "127.0.0.6"},
		"inbound|9002||": {"127.0.0.1:8002", ""},
		"inbound|9003||": {"10.0.0.5:8003", "127.0.0.6"},
		"inbound|9004||": {"/run/app.sock", ""},
	}
	for name, w := range want {
		if to, from := inboundAt(t, clusterNamed(t, v, name)); to != w[0] || from != w[1] {
			t.Errorf("%s to %s from %q, want %s from %q", name, to, from, w[0], w[1])
		}
	}
}

// meshFieldsViewOf is w's View of meshFieldsYAML with w's own service (a
// ServiceEntry of productpage, port 9080 to workload port 8080, one
// endpoint at w's first IP) under a MeshConfig.
func meshFieldsViewOf(t *testing.T, meshYAML string, w model.Workload) *model.View {
	t.Helper()
	return meshView(t, meshYAML, meshFieldsYAML+`---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: productpage, namespace: shop}
spec:
  hosts: [productpage.shop.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP, targetPort: 8080}]
  resolution: STATIC
  endpoints: [{address: `+w.IPs[0]+`}]
`, w)
}
