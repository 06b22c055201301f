package xds_test

//lint:file-ignore SA1019 the deprecated minimumRingSize is one of the cases covered

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmesh/vmesh/xds/sidecar"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

var update = flag.Bool("update", false, "rewrite golden files")

func o(kind store.Kind, name string, spec proto.Message) *store.Object {
	return &store.Object{Key: store.Key{Kind: kind, Namespace: "default", Name: name}, Spec: spec}
}

// richSnapshot exercises every feature the gRPC generator maps.
func richSnapshot(t testing.TB) *model.Snapshot {
	t.Helper()
	st := store.NewStore()
	objs := []*store.Object{
		o(store.KindServiceEntry, "shop", &networking.ServiceEntry{
			Hosts: []string{"shop.internal"}, Resolution: networking.ServiceEntry_STATIC, Location: networking.ServiceEntry_MESH_INTERNAL,
			Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}, {Name: "admin", Number: 9090, Protocol: "GRPC", TargetPort: 19090}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "shop"}},
		}),
		o(store.KindWorkloadEntry, "shop-1", &networking.WorkloadEntry{Address: "10.0.0.1", Labels: map[string]string{"app": "shop", "version": "v1"}, Locality: "eu/west/a", Weight: 2, Ports: map[string]uint32{"grpc": 17070}, ServiceAccount: "shop"}),
		o(store.KindWorkloadEntry, "shop-2", &networking.WorkloadEntry{Address: "10.0.0.2", Labels: map[string]string{"app": "shop", "version": "v2"}, Locality: "eu/west/b", ServiceAccount: "shop"}),
		o(store.KindWorkloadEntry, "shop-3", &networking.WorkloadEntry{Address: "10.0.0.3", Labels: map[string]string{"app": "shop", "version": "v1"}, Locality: "eu/west/a", ServiceAccount: "shop-v1b"}),
		// Security: STRICT namespace, the shop admin port PERMISSIVE; shop
		// endpoints all have service accounts, so automatic mTLS applies to
		// port 7070 and not to 9090 (target 19090).
		o(store.KindPeerAuthentication, "default", &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT}}),
		o(store.KindPeerAuthentication, "shop-admin", &security.PeerAuthentication{
			Selector:      &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "shop"}},
			PortLevelMtls: map[uint32]*security.PeerAuthentication_MutualTLS{19090: {Mode: security.PeerAuthentication_MutualTLS_PERMISSIVE}},
		}),
		o(store.KindAuthorizationPolicy, "deny-blocked", &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_DENY, Rules: []*security.Rule{{
			From: []*security.Rule_From{{Source: &security.Source{Principals: []string{"cluster.local/ns/default/sa/blocked"}}}},
			To:   []*security.Rule_To{{Operation: &security.Operation{Paths: []string{"/shop.Admin/*"}}}},
		}}}),
		o(store.KindAuthorizationPolicy, "allow-tenants", &security.AuthorizationPolicy{Rules: []*security.Rule{
			{
				From: []*security.Rule_From{{Source: &security.Source{Namespaces: []string{"default", "front*"}}}, {Source: &security.Source{IpBlocks: []string{"10.1.0.0/16"}}}},
				To:   []*security.Rule_To{{Operation: &security.Operation{Ports: []string{"17070"}, Methods: []string{"POST"}, NotPaths: []string{"*/Delete"}}}},
				When: []*security.Condition{{Key: "request.headers[X-Tenant]", Values: []string{"a", "b*"}}},
			},
			{From: []*security.Rule_From{{Source: &security.Source{RequestPrincipals: []string{"*"}}}}}, // dropped: needs JWT
		}}),
		o(store.KindDestinationRule, "api", &networking.DestinationRule{
			Host:          "api.example.com",
			TrafficPolicy: &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, CredentialName: "api-ca", Sni: "api.example.com"}},
		}),
		o(store.KindServiceEntry, "api", &networking.ServiceEntry{
			Hosts: []string{"api.example.com"}, Resolution: networking.ServiceEntry_DNS,
			Ports: []*networking.ServicePort{{Name: "grpc", Number: 443, Protocol: "GRPC"}},
		}),
		o(store.KindServiceEntry, "passthrough", &networking.ServiceEntry{
			Hosts: []string{"passthrough.example.com"}, Resolution: networking.ServiceEntry_NONE,
			Ports: []*networking.ServicePort{{Name: "tcp", Number: 5432, Protocol: "TCP"}},
		}),
		o(store.KindVirtualService, "shop", &networking.VirtualService{
			Hosts: []string{"shop.internal"},
			Http: []*networking.HTTPRoute{
				{
					Name: "canary",
					Match: []*networking.HTTPMatchRequest{
						{Name: "hdr", Headers: map[string]*networking.StringMatch{"X-Canary": {MatchType: &networking.StringMatch_Exact{Exact: "true"}}}},
						{Name: "path", Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/shop.Cart/.*"}}, Method: &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: "POST"}}},
					},
					Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "shop.internal", Subset: "v2"}}},
				},
				{
					Match:   []*networking.HTTPMatchRequest{{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/shop.Admin/"}}, Port: 9090, Authority: &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "shop"}}}},
					Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "shop.internal", Port: &networking.PortSelector{Number: 9090}}}},
					Timeout: durationpb.New(3e9),
				},
				{
					Route: []*networking.HTTPRouteDestination{
						{Destination: &networking.Destination{Host: "shop.internal", Subset: "v1"}, Weight: 80},
						{Destination: &networking.Destination{Host: "shop.internal", Subset: "v2"}, Weight: 20},
						{Destination: &networking.Destination{Host: "missing.internal"}, Weight: 0},
					},
					Retries: &networking.HTTPRetry{Attempts: 3, RetryOn: "unavailable,cancelled", PerTryTimeout: durationpb.New(1e9)},
					Fault: &networking.HTTPFaultInjection{
						Delay: &networking.HTTPFaultInjection_Delay{HttpDelayType: &networking.HTTPFaultInjection_Delay_FixedDelay{FixedDelay: durationpb.New(5e6)}, Percentage: &networking.Percent{Value: 0.5}},
						Abort: &networking.HTTPFaultInjection_Abort{ErrorType: &networking.HTTPFaultInjection_Abort_GrpcStatus{GrpcStatus: "UNAVAILABLE"}, Percentage: &networking.Percent{Value: 1}},
					},
					Mirror: &networking.Destination{Host: "shop.internal", Subset: "v2"},
				},
			},
		}),
		// Routers: shop-gw selects app=shop, v1-gw version=v1; shop-edge
		// binds to shop-gw only (never a mesh client's).
		o(store.KindGateway, "shop-gw", &networking.Gateway{Selector: map[string]string{"app": "shop"}, Servers: []*networking.Server{
			{Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"}},
		}}),
		o(store.KindGateway, "v1-gw", &networking.Gateway{Selector: map[string]string{"version": "v1"}, Servers: []*networking.Server{
			{Port: &networking.Port{Number: 8080, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*/v1.example.com"}},
		}}),
		o(store.KindVirtualService, "shop-edge", &networking.VirtualService{
			Hosts: []string{"shop.example.com", "v1.example.com"}, Gateways: []string{"shop-gw", "default/v1-gw"},
			Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "shop.internal", Port: &networking.PortSelector{Number: 7070}}}}}},
		}),
		o(store.KindDestinationRule, "shop", &networking.DestinationRule{
			Host: "shop.internal",
			TrafficPolicy: &networking.TrafficPolicy{
				LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
					HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "X-User"}, MinimumRingSize: 2048,
				}}},
				ConnectionPool:   &networking.ConnectionPoolSettings{Http: &networking.ConnectionPoolSettings_HTTPSettings{Http2MaxRequests: 100}},
				OutlierDetection: &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(5), Interval: durationpb.New(1e10), BaseEjectionTime: durationpb.New(3e10), MaxEjectionPercent: 50},
				PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{
					Port:         &networking.PortSelector{Number: 9090},
					LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST}},
				}},
			},
			Subsets: []*networking.Subset{
				{Name: "v1", Labels: map[string]string{"version": "v1"}},
				{Name: "v2", Labels: map[string]string{"version": "v2"}, TrafficPolicy: &networking.TrafficPolicy{
					LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_RANDOM}},
				}},
			},
		}),
	}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	return model.Build(st.Snapshot())
}

var grpcProxy = &xds.Proxy{ID: "p1", Kind: xds.KindGRPC, Namespace: "default"}

// validate runs the generated Validate of a message and of every Any inside
// the filters it is known to carry.
func validate(t *testing.T, m proto.Message) {
	t.Helper()
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%T: %v", m, err)
		}
	}
	unpack := func(a *anypb.Any) {
		t.Helper()
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Errorf("unpacking %s: %v", a.GetTypeUrl(), err)
			return
		}
		validate(t, inner)
	}
	switch x := m.(type) {
	case *listenerv3.Listener:
		if x.GetApiListener() != nil {
			unpack(x.GetApiListener().GetApiListener())
		}
		for _, fc := range x.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				unpack(f.GetTypedConfig())
			}
			if ts := fc.GetTransportSocket(); ts != nil {
				unpack(ts.GetTypedConfig())
			}
		}
	case *clusterv3.Cluster:
		if ts := x.GetTransportSocket(); ts != nil {
			unpack(ts.GetTypedConfig())
		}
	case *hcmv3.HttpConnectionManager:
		for _, f := range x.GetHttpFilters() {
			unpack(f.GetTypedConfig())
		}
		if rc := x.GetRouteConfig(); rc != nil {
			validate(t, rc)
		}
	case *routev3.RouteConfiguration:
		for _, vh := range x.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				for _, a := range r.GetTypedPerFilterConfig() {
					unpack(a)
				}
			}
		}
	}
}

func dump(t *testing.T, typ string, msgs map[string]proto.Message) map[string]json.RawMessage {
	t.Helper()
	out := map[string]json.RawMessage{}
	for name, m := range msgs {
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			t.Fatal(err)
		}
		out[typ+" "+name] = json.RawMessage(buf.Bytes())
	}
	return out
}

func TestGRPCGeneratorGolden(t *testing.T) {
	s := richSnapshot(t)
	lds, err := xds.Listeners(s, grpcProxy)
	if err != nil {
		t.Fatal(err)
	}
	rds, err := xds.Routes(s, grpcProxy)
	if err != nil {
		t.Fatal(err)
	}
	cds, err := xds.Clusters(s, grpcProxy)
	if err != nil {
		t.Fatal(err)
	}
	eds, err := xds.Endpoints(s, grpcProxy)
	if err != nil {
		t.Fatal(err)
	}
	inbound, err := xds.InboundListener(s, grpcProxy, xds.InboundListenerPrefix+"10.0.0.1:17070")
	if err != nil {
		t.Fatal(err)
	}
	edsNames := map[string]bool{}
	all := map[string]json.RawMessage{}
	add := func(typ string, list map[string]proto.Message) {
		for _, m := range list {
			validate(t, m)
		}
		for k, v := range dump(t, typ, list) {
			all[k] = v
		}
	}
	l := map[string]proto.Message{inbound.GetName(): inbound}
	for _, x := range lds {
		l[x.GetName()] = x
	}
	add("LDS", l)
	r := map[string]proto.Message{}
	for _, x := range rds {
		r[x.GetName()] = x
	}
	add("RDS", r)
	c := map[string]proto.Message{}
	for _, x := range cds {
		c[x.GetName()] = x
		if x.GetType() == clusterv3.Cluster_LOGICAL_DNS {
			validate(t, x.GetLoadAssignment())
		}
	}
	add("CDS", c)
	e := map[string]proto.Message{}
	for _, x := range eds {
		e[x.GetClusterName()] = x
		edsNames[x.GetClusterName()] = true
	}
	add("EDS", e)
	if err := xds.Consistent(lds, rds, cds, edsNames, nil); err != nil {
		t.Fatal(err)
	}

	got, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "grpc_rich.golden")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./xds -run Golden -update)", err)
	}
	if diff := cmp.Diff(string(bytes.TrimSpace(want)), string(got)); diff != "" {
		t.Errorf("generated config differs from %s (-want +got):\n%s", golden, diff)
	}
}

// Behaviour the golden file shows, asserted so a reviewer need not read it.
func TestGRPCGeneratorMapping(t *testing.T) {
	s := richSnapshot(t)
	cds, _ := xds.Clusters(s, grpcProxy)
	byName := map[string]*clusterv3.Cluster{}
	for _, c := range cds {
		byName[c.GetName()] = c
	}
	wantClusters := []string{
		"outbound|443||api.example.com",
		"outbound|7070||shop.internal", "outbound|7070|v1|shop.internal", "outbound|7070|v2|shop.internal",
		"outbound|9090||shop.internal", "outbound|9090|v1|shop.internal", "outbound|9090|v2|shop.internal",
	}
	var names []string
	for _, c := range cds {
		names = append(names, c.GetName())
	}
	if diff := cmp.Diff(wantClusters, names); diff != "" {
		t.Errorf("clusters (-want +got):\n%s", diff)
	}
	if c := byName["outbound|443||api.example.com"]; c.GetType() != clusterv3.Cluster_LOGICAL_DNS {
		t.Errorf("DNS service cluster type = %v, want LOGICAL_DNS", c.GetType())
	}
	if c := byName["outbound|7070||shop.internal"]; c.GetLbPolicy() != clusterv3.Cluster_RING_HASH ||
		c.GetCircuitBreakers().GetThresholds()[0].GetMaxRequests().GetValue() != 100 ||
		c.GetOutlierDetection().GetConsecutive_5Xx().GetValue() != 5 || c.GetRingHashLbConfig().GetMinimumRingSize().GetValue() != 2048 {
		t.Errorf("shop 7070 cluster policy not mapped: %v", c)
	}
	if c := byName["outbound|9090||shop.internal"]; c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST {
		t.Errorf("port-level LB = %v, want LEAST_REQUEST", c.GetLbPolicy())
	}
	if c := byName["outbound|7070|v2|shop.internal"]; c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
		t.Errorf("RANDOM subset LB = %v, want ROUND_ROBIN (grpc-go has no RANDOM)", c.GetLbPolicy())
	}

	eds, _ := xds.Endpoints(s, grpcProxy)
	for _, cla := range eds {
		if cla.GetClusterName() != "outbound|7070||shop.internal" {
			continue
		}
		if len(cla.GetEndpoints()) != 2 {
			t.Fatalf("localities = %d, want 2", len(cla.GetEndpoints()))
		}
		a := cla.GetEndpoints()[0]
		if a.GetLocality().GetZone() != "west" || a.GetLocality().GetSubZone() != "a" || a.GetLoadBalancingWeight().GetValue() != 3 || len(a.GetLbEndpoints()) != 2 {
			t.Errorf("locality eu/west/a = %v, want weight 3 (2+1) with 2 endpoints", a)
		}
		if p := a.GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); p != 17070 {
			t.Errorf("named port = %d, want 17070", p)
		}
	}

	rds, _ := xds.Routes(s, grpcProxy)
	for _, rc := range rds {
		routes := rc.GetVirtualHosts()[0].GetRoutes()
		switch rc.GetName() {
		case "shop.internal:7070":
			// canary x2 matches; admin route is for port 9090 only; then the split.
			if len(routes) != 3 {
				t.Fatalf("7070 routes = %d, want 3", len(routes))
			}
			wc := routes[2].GetRoute().GetWeightedClusters().GetClusters()
			if len(wc) != 2 || wc[0].GetWeight().GetValue() != 80 || wc[1].GetName() != "outbound|7070|v2|shop.internal" {
				t.Errorf("split = %v", wc)
			}
			if rp := routes[2].GetRoute().GetRetryPolicy(); rp.GetNumRetries().GetValue() != 3 || rp.GetRetryOn() != "unavailable,cancelled" {
				t.Errorf("retry = %v", rp)
			}
			f := &faultv3.HTTPFault{}
			if err := routes[2].GetTypedPerFilterConfig()["envoy.filters.http.fault"].UnmarshalTo(f); err != nil {
				t.Fatal(err)
			}
			if f.GetAbort().GetGrpcStatus() != 14 || f.GetAbort().GetPercentage().GetNumerator() != 10000 || f.GetDelay().GetPercentage().GetNumerator() != 5000 {
				t.Errorf("fault = %v", f)
			}
			if hp := routes[2].GetRoute().GetHashPolicy(); len(hp) != 1 || hp[0].GetHeader().GetHeaderName() != "x-user" {
				t.Errorf("hash policy = %v, want header x-user from the DestinationRule", hp)
			}
			if hp := routes[0].GetRoute().GetHashPolicy(); len(hp) != 0 {
				t.Errorf("subset v2 overrides the LB to RANDOM, yet hash policy = %v", hp)
			}
		case "shop.internal:9090":
			if len(routes) != 4 || routes[2].GetRoute().GetMaxStreamDuration().GetMaxStreamDuration().AsDuration() != 3e9 {
				t.Errorf("9090 routes = %v", routes)
			}
		case "api.example.com:443":
			if len(routes) != 1 || routes[0].GetRoute().GetCluster() != "outbound|443||api.example.com" {
				t.Errorf("default route = %v", routes)
			}
		}
	}
	if len(rds) != 3 {
		t.Errorf("route configs = %d, want 3 (NONE service skipped)", len(rds))
	}

	lds, _ := xds.Listeners(s, grpcProxy)
	hcm := &hcmv3.HttpConnectionManager{}
	if err := lds[0].GetApiListener().GetApiListener().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	if fs := hcm.GetHttpFilters(); len(fs) != 2 || !fs[1].GetTypedConfig().MessageIs(&routerv3.Router{}) {
		t.Errorf("filters = %v, want fault then router", fs)
	}
}

func TestGeneratorsDispatchByKind(t *testing.T) {
	s := richSnapshot(t)
	envoy := &xds.Proxy{ID: "envoy", Kind: xds.KindSidecar, Namespace: "default"}
	cds, err := xds.Clusters(s, envoy)
	if err != nil || len(cds) == 0 || cds[0].GetName() != sidecar.PassthroughCluster {
		t.Errorf("sidecar clusters: %v, %v; want the Envoy sidecar layout", cds, err)
	}
	lds, err := xds.Listeners(s, envoy)
	if err != nil || len(lds) == 0 || lds[0].GetName() != sidecar.VirtualOutboundListener {
		t.Errorf("sidecar listeners: %v, %v; want the Envoy sidecar layout", lds, err)
	}
	if l, err := xds.InboundListener(s, envoy, xds.InboundListenerPrefix+"10.0.0.1:80"); err == nil || l != nil {
		t.Errorf("sidecar inbound server listener: %v, %v; want none (sidecars use virtualInbound)", l, err)
	}
	if l, err := xds.Listeners(s, &xds.Proxy{ID: "x", Kind: "mystery"}); err == nil || l != nil {
		t.Errorf("unknown kind: %v, %v; want an error and nothing", l, err)
	}
	if _, err := xds.InboundListener(s, grpcProxy, xds.InboundListenerPrefix+"not-an-ip:80"); err == nil {
		t.Error("inbound listener for a host name: want an error")
	}
}
