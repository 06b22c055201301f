package xds_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	proxyprotocolv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/proxy_protocol/v3"

	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// TestSidecarWarmupAndRetryBudget: a DestinationRule's loadBalancer warmup
// becomes Envoy's slow start on ROUND_ROBIN and LEAST_REQUEST clusters
// (Istio's defaults: aggression 1, minimum 10 %), and its retryBudget the
// circuit breakers' retry budget (20 %, at least 3, unless set). A
// port-level entry for the port has no retryBudget, so that port's
// cluster has none (Istio's merge).
func TestSidecarWarmupAndRetryBudget(t *testing.T) {
	objs := []*store.Object{
		o(store.KindServiceEntry, "shop", &networking.ServiceEntry{
			Hosts: []string{"shop.internal"}, Resolution: networking.ServiceEntry_STATIC, Location: networking.ServiceEntry_MESH_INTERNAL,
			Ports:     []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}, {Name: "http", Number: 8080, Protocol: "HTTP"}, {Name: "admin", Number: 9090, Protocol: "HTTP"}},
			Endpoints: []*networking.WorkloadEntry{{Address: "10.0.0.1"}},
		}),
		o(store.KindDestinationRule, "shop", &networking.DestinationRule{Host: "shop.internal", TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer: &networking.LoadBalancerSettings{
				LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN},
				Warmup:   &networking.WarmupConfiguration{Duration: durationpb.New(30e9), MinimumPercent: wrapperspb.Double(25)},
			},
			RetryBudget: &networking.TrafficPolicy_RetryBudget{Percent: wrapperspb.Double(15)},
			PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{
				{Port: &networking.PortSelector{Number: 8080}, LoadBalancer: &networking.LoadBalancerSettings{Warmup: &networking.WarmupConfiguration{Duration: durationpb.New(10e9)}}},
				{Port: &networking.PortSelector{Number: 9090}, LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_RANDOM}}},
			},
		}}),
	}
	byName := sidecarClusters(t, objs)
	rr := byName["outbound|7070||shop.internal"]
	ss := rr.GetRoundRobinLbConfig().GetSlowStartConfig()
	if rr.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN || ss.GetSlowStartWindow().AsDuration() != 30e9 || ss.GetMinWeightPercent().GetValue() != 25 || ss.GetAggression().GetDefaultValue() != 1 {
		t.Errorf("7070: lb %v slow start %v; want ROUND_ROBIN, 30 s from 25 %%, aggression 1", rr.GetLbPolicy(), ss)
	}
	if b := rr.GetCircuitBreakers().GetThresholds()[0].GetRetryBudget(); b.GetBudgetPercent().GetValue() != 15 || b.GetMinRetryConcurrency().GetValue() != 3 {
		t.Errorf("7070: retry budget %v; want 15 %%, at least 3", b)
	}
	lr := byName["outbound|8080||shop.internal"]
	ss = lr.GetLeastRequestLbConfig().GetSlowStartConfig()
	if lr.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST || ss.GetSlowStartWindow().AsDuration() != 10e9 || ss.GetMinWeightPercent().GetValue() != 10 {
		t.Errorf("8080: lb %v slow start %v; want LEAST_REQUEST (the port entry's default), 10 s from 10 %%", lr.GetLbPolicy(), ss)
	}
	if b := lr.GetCircuitBreakers().GetThresholds()[0].GetRetryBudget(); b != nil {
		t.Errorf("8080: retry budget %v; a port-level entry has none", b)
	}
	if random := byName["outbound|9090||shop.internal"]; random.GetLbPolicy() != clusterv3.Cluster_RANDOM || random.GetLbConfig() != nil {
		t.Errorf("9090: lb %v config %v; want RANDOM without slow start", random.GetLbPolicy(), random.GetLbConfig())
	}
}

// TestSidecarConnectionPoolHTTPOptions: the connection pool fields Istio
// maps into a cluster's HTTP protocol options: tcp maxConnectionDuration
// and idleTimeout (when http sets none), http2KeepAlive and
// maxConcurrentStreams on an HTTP/2 port, and useClientProtocol (the
// client's HTTP version upstream).
func TestSidecarConnectionPoolHTTPOptions(t *testing.T) {
	objs := []*store.Object{
		o(store.KindServiceEntry, "shop", &networking.ServiceEntry{
			Hosts: []string{"shop.internal"}, Resolution: networking.ServiceEntry_STATIC, Location: networking.ServiceEntry_MESH_INTERNAL,
			Ports:     []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}, {Name: "http", Number: 8080, Protocol: "HTTP"}},
			Endpoints: []*networking.WorkloadEntry{{Address: "10.0.0.1"}},
		}),
		o(store.KindDestinationRule, "shop", &networking.DestinationRule{Host: "shop.internal", TrafficPolicy: &networking.TrafficPolicy{
			ConnectionPool: &networking.ConnectionPoolSettings{
				Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnectionDuration: durationpb.New(600e9), IdleTimeout: durationpb.New(60e9)},
				Http: &networking.ConnectionPoolSettings_HTTPSettings{MaxConcurrentStreams: 50,
					Http2KeepAlive: &networking.ConnectionPoolSettings_HTTPSettings_ConnectionKeepalive{Interval: durationpb.New(20e9), Timeout: durationpb.New(5e9)}},
			},
			PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{Port: &networking.PortSelector{Number: 8080},
				ConnectionPool: &networking.ConnectionPoolSettings{Http: &networking.ConnectionPoolSettings_HTTPSettings{UseClientProtocol: true}}}},
		}}),
	}
	byName := sidecarClusters(t, objs)
	opts := func(name string) *httpv3.HttpProtocolOptions {
		t.Helper()
		c, ok := byName[name]
		if !ok {
			t.Fatalf("no cluster %s", name)
		}
		o := &httpv3.HttpProtocolOptions{}
		if a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; a == nil || a.UnmarshalTo(o) != nil {
			t.Fatalf("%s: no HTTP protocol options", name)
		}
		return o
	}
	grpc := opts("outbound|7070||shop.internal")
	common, h2 := grpc.GetCommonHttpProtocolOptions(), grpc.GetExplicitHttpConfig().GetHttp2ProtocolOptions()
	if common.GetMaxConnectionDuration().AsDuration() != 600e9 || common.GetIdleTimeout().AsDuration() != 60e9 {
		t.Errorf("7070 common options %v; want 600 s lifetime, 60 s idle (tcp's)", common)
	}
	if h2.GetMaxConcurrentStreams().GetValue() != 50 || h2.GetConnectionKeepalive().GetInterval().AsDuration() != 20e9 || h2.GetConnectionKeepalive().GetTimeout().AsDuration() != 5e9 {
		t.Errorf("7070 HTTP/2 options %v; want 50 streams, keepalive every 20 s with 5 s timeout", h2)
	}
	if http := opts("outbound|8080||shop.internal"); http.GetUseDownstreamProtocolConfig() == nil || http.GetExplicitHttpConfig() != nil {
		t.Errorf("8080 options %v; want the client's protocol upstream", http)
	}
}

// TestSidecarProxyProtocol: a DestinationRule's proxyProtocol wraps every
// transport socket of the cluster in Envoy's upstream PROXY protocol
// socket, as Istio does: automatic mTLS's per-endpoint sockets and a
// plaintext cluster's raw buffer alike; a subset's replaces the rule's,
// and a port-level entry for the port has none.
func TestSidecarProxyProtocol(t *testing.T) {
	objs := []*store.Object{
		o(store.KindServiceEntry, "shop", &networking.ServiceEntry{
			Hosts: []string{"shop.internal"}, Resolution: networking.ServiceEntry_STATIC, Location: networking.ServiceEntry_MESH_INTERNAL,
			Ports:     []*networking.ServicePort{{Name: "tcp", Number: 5000, Protocol: "TCP"}, {Name: "tcp-b", Number: 6000, Protocol: "TCP"}},
			Endpoints: []*networking.WorkloadEntry{{Address: "10.0.0.1", Labels: map[string]string{"version": "v2"}}},
		}),
		o(store.KindServiceEntry, "ext", &networking.ServiceEntry{
			Hosts: []string{"ext.example.com"}, Resolution: networking.ServiceEntry_STATIC, Location: networking.ServiceEntry_MESH_EXTERNAL,
			Ports:     []*networking.ServicePort{{Name: "tcp", Number: 5000, Protocol: "TCP"}},
			Endpoints: []*networking.WorkloadEntry{{Address: "192.0.2.1"}},
		}),
		o(store.KindDestinationRule, "shop", &networking.DestinationRule{Host: "shop.internal",
			TrafficPolicy: &networking.TrafficPolicy{
				ProxyProtocol:     &networking.TrafficPolicy_ProxyProtocol{Version: networking.TrafficPolicy_ProxyProtocol_V2},
				PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{Port: &networking.PortSelector{Number: 6000}, LoadBalancer: &networking.LoadBalancerSettings{}}},
			},
			Subsets: []*networking.Subset{{Name: "v2", Labels: map[string]string{"version": "v2"},
				TrafficPolicy: &networking.TrafficPolicy{ProxyProtocol: &networking.TrafficPolicy_ProxyProtocol{Version: networking.TrafficPolicy_ProxyProtocol_V1}}}},
		}),
		o(store.KindDestinationRule, "ext", &networking.DestinationRule{Host: "ext.example.com",
			TrafficPolicy: &networking.TrafficPolicy{ProxyProtocol: &networking.TrafficPolicy_ProxyProtocol{}}}),
	}
	byName := sidecarClusters(t, objs)
	// version of the PROXY socket ts is, and the name of the socket inside; -1: not a PROXY socket.
	proxied := func(ts *corev3.TransportSocket) (int, string) {
		pp := &proxyprotocolv3.ProxyProtocolUpstreamTransport{}
		if ts.GetName() != "envoy.transport_sockets.upstream_proxy_protocol" || ts.GetTypedConfig().UnmarshalTo(pp) != nil {
			return -1, ""
		}
		return int(pp.GetConfig().GetVersion()), pp.GetTransportSocket().GetName()
	}
	mesh := byName["outbound|5000||shop.internal"]
	if len(mesh.GetTransportSocketMatches()) != 2 {
		t.Fatalf("5000: %d transport socket matches, want automatic mTLS's 2", len(mesh.GetTransportSocketMatches()))
	}
	for _, m := range mesh.GetTransportSocketMatches() {
		if v, inner := proxied(m.GetTransportSocket()); v != int(corev3.ProxyProtocolConfig_V2) || inner == "" {
			t.Errorf("5000 match %s: PROXY version %d around %q; want V2 around the match's socket", m.GetName(), v, inner)
		}
	}
	if v, _ := proxied(byName["outbound|5000|v2|shop.internal"].GetTransportSocketMatches()[0].GetTransportSocket()); v != int(corev3.ProxyProtocolConfig_V1) {
		t.Errorf("subset v2: PROXY version %d, want the subset's V1", v)
	}
	if c := byName["outbound|6000||shop.internal"]; c.GetTransportSocket() != nil || func() bool {
		for _, m := range c.GetTransportSocketMatches() {
			if v, _ := proxied(m.GetTransportSocket()); v >= 0 {
				return true
			}
		}
		return false
	}() {
		t.Errorf("6000 (a port-level entry): wrapped in PROXY; a port-level entry has no proxyProtocol")
	}
	if v, inner := proxied(byName["outbound|5000||ext.example.com"].GetTransportSocket()); v != int(corev3.ProxyProtocolConfig_V1) || inner != "envoy.transport_sockets.raw_buffer" {
		t.Errorf("external plaintext cluster: PROXY version %d around %q; want V1 around raw_buffer", v, inner)
	}
}

// sidecarClusters returns, by name, the clusters an Envoy sidecar on a VM
// in namespace default gets from objs.
func sidecarClusters(t *testing.T, objs []*store.Object) map[string]*clusterv3.Cluster {
	t.Helper()
	store := store.NewStore()
	if err := store.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	cds, err := xds.Clusters(model.Build(store.Snapshot()), &xds.Proxy{ID: "vm", Kind: xds.KindSidecar, Namespace: "default", IPs: []string{"10.1.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*clusterv3.Cluster{}
	for _, c := range cds {
		byName[c.GetName()] = c
	}
	return byName
}
