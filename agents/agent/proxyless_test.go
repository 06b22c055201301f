package agent_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	healthgrpc "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/certs"
	"github.com/vmesh/vmesh/ca"
)

// TestProxylessAppReachesServiceOverMTLS: a grpc-go application configured
// only by the files the agent wrote (its xDS bootstrap and certificates)
// gets its configuration from an xDS server on the control plane's TLS port
// (go-control-plane here, standing in for vmesh's), through the agent's xDS
// socket without TLS (grpc-bootstrap.json: the agent carries the stream
// over its mTLS connection) or directly over mTLS
// (grpc-bootstrap-mtls.json), and calls a service over mTLS with the
// agent's certificate through the "default" certificate provider. The
// node carries the locality of the VM's topology labels.
func TestProxylessAppReachesServiceOverMTLS(t *testing.T) {
	for _, tc := range []struct {
		name  string
		file  func(*agent.Agent) string
		local bool
	}{
		{"through the agent's xDS socket", (*agent.Agent).GRPCBootstrap, true},
		{"directly over mTLS", (*agent.Agent).GRPCMTLSBootstrap, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := startStandIn(t)
			a := cp.agent

			// The service: a plain gRPC server requiring a mesh client certificate.
			dir := a.CertDir()
			pair, err := tls.LoadX509KeyPair(filepath.Join(dir, certs.CertChainFile), filepath.Join(dir, certs.KeyFile))
			if err != nil {
				t.Fatal(err)
			}
			rootsPEM, err := os.ReadFile(filepath.Join(dir, certs.RootCertFile))
			if err != nil {
				t.Fatal(err)
			}
			callers := make(chan string, 16)
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(rootsPEM)
			svc := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
				Certificates: []tls.Certificate{pair}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert,
			})), grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				p, _ := peer.FromContext(ctx)
				ti := p.AuthInfo.(credentials.TLSInfo)
				callers <- ti.State.PeerCertificates[0].URIs[0].String()
				return h(ctx, req)
			}))
			hs := healthgrpc.NewServer()
			healthpb.RegisterHealthServer(svc, hs)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go svc.Serve(lis)
			defer svc.Stop()

			// The control plane's view: one service, cart.shop:8080, whose cluster
			// asks for mTLS with the "default" certificate provider.
			cp.set(t, apiListener(t, "cart.shop:8080", "cart"), mtlsCluster(t, "cart"), endpoints("cart", uint32(lis.Addr().(*net.TCPAddr).Port)))

			// The application: nothing but the agent's bootstrap file.
			js, err := os.ReadFile(tc.file(a))
			if err != nil {
				t.Fatal(err)
			}
			checkBootstrap(t, a, js, tc.local)
			resolver, err := xds.NewXDSResolverWithConfigForTesting(js)
			if err != nil {
				t.Fatal(err)
			}
			creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient("xds:///cart.shop:8080", grpc.WithResolvers(resolver), grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
				t.Fatalf("call through xDS: %v", err)
			}
			if got := <-callers; got != "spiffe://cluster.local/ns/shop/sa/cart" {
				t.Fatalf("the service saw caller %q, want the VM's identity", got)
			}
			if got := cp.locality(t); got != "eu-west/eu-west-1/rack-7" {
				t.Fatalf("the control plane saw node locality %q, want the bundle's topology labels' eu-west/eu-west-1/rack-7", got)
			}
		})
	}
}

// standIn is go-control-plane standing in for vmesh's xDS server on the
// control plane's TLS port, behind an agent whose bundle carries topology
// labels (eu-west/eu-west-1/rack-7).
type standIn struct {
	agent *agent.Agent
	snaps cachev3.SnapshotCache
	// nodes gets the locality of each stream's first request's node.
	nodes chan string
}

func startStandIn(t *testing.T) *standIn {
	t.Helper()
	cp := &standIn{snaps: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil), nodes: make(chan string, 64)}
	srvCtx, stopSrv := context.WithCancel(context.Background())
	t.Cleanup(stopSrv)
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		if n := req.GetNode(); n != nil {
			l := n.GetLocality()
			select {
			case cp.nodes <- strings.TrimRight(l.GetRegion()+"/"+l.GetZone()+"/"+l.GetSubZone(), "/"):
			default:
			}
		}
		return nil
	}}
	labels := map[string]string{"app": "cart", "topology.kubernetes.io/region": "eu-west", "topology.kubernetes.io/zone": "eu-west-1", "topology.istio.io/subzone": "rack-7"}
	r := startWithLabels(t, labels, func(s *grpc.Server, _ *ca.CA) {
		discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, serverv3.NewServer(srvCtx, cp.snaps, cb))
	}, func(c *agent.Config) { c.CertTTL = time.Hour })
	cp.agent = r.agent
	return cp
}

// set serves the agent's node (shared by its applications) these resources.
func (cp *standIn) set(t *testing.T, l *listenerv3.Listener, c *clusterv3.Cluster, e *endpointv3.ClusterLoadAssignment) {
	t.Helper()
	snap, err := cachev3.NewSnapshot("1", map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: {l}, resourcev3.ClusterType: {c}, resourcev3.EndpointType: {e},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.snaps.SetSnapshot(context.Background(), cp.agent.Node().ID(), snap); err != nil {
		t.Fatal(err)
	}
}

// locality returns the locality of the next node that opens a stream
// (the agent's own stream's is skipped: it is the first).
func (cp *standIn) locality(t *testing.T) string {
	t.Helper()
	var got []string
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l := <-cp.nodes:
			got = append(got, l)
			if len(got) >= 2 {
				return got[len(got)-1]
			}
		case <-timeout:
			t.Fatalf("saw nodes with localities %q only", got)
			return ""
		}
	}
}

// checkBootstrap checks the proxyless bootstrap's xDS server (the agent's
// socket without TLS, or the control plane with TLS) and node locality.
func checkBootstrap(t *testing.T, a *agent.Agent, js []byte, local bool) {
	t.Helper()
	var b struct {
		XDSServers []struct {
			ServerURI    string `json:"server_uri"`
			ChannelCreds []struct {
				Type string `json:"type"`
			} `json:"channel_creds"`
		} `json:"xds_servers"`
		Node struct {
			Locality map[string]string `json:"locality"`
		} `json:"node"`
	}
	if err := json.Unmarshal(js, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.XDSServers) == 0 || len(b.XDSServers[0].ChannelCreds) == 0 {
		t.Fatalf("bootstrap without an xDS server:\n%s", js)
	}
	s := b.XDSServers[0]
	if local && (s.ServerURI != "unix://"+a.XDSSocket() || s.ChannelCreds[0].Type != "insecure" || len(b.XDSServers) != 1) {
		t.Fatalf("local bootstrap's xDS servers %+v, want only unix://%s without TLS", b.XDSServers, a.XDSSocket())
	}
	if !local && s.ChannelCreds[0].Type != "tls" {
		t.Fatalf("mTLS bootstrap's xDS server %+v", s)
	}
	if want := map[string]string{"region": "eu-west", "zone": "eu-west-1", "sub_zone": "rack-7"}; !maps.Equal(b.Node.Locality, want) {
		t.Fatalf("node.locality %v, want %v", b.Node.Locality, want)
	}
}

func apiListener(t *testing.T, name, cluster string) *listenerv3.Listener {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		t.Fatal(err)
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: name,
			VirtualHosts: []*routev3.VirtualHost{{
				Name: cluster, Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
				}},
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{Name: "router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: hcm}}
}

func mtlsCluster(t *testing.T, name string) *clusterv3.Cluster {
	provider := func(cert string) *tlsv3.CertificateProviderPluginInstance {
		return &tlsv3.CertificateProviderPluginInstance{InstanceName: "default", CertificateName: cert}
	}
	tc, err := anypb.New(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateProviderInstance: provider("default"),
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			CaCertificateProviderInstance: provider("ROOTCA"),
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
			ResourceApiVersion: corev3.ApiVersion_V3, ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		}},
		LbPolicy:        clusterv3.Cluster_ROUND_ROBIN,
		TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tc}},
	}
}

func endpoints(cluster string, port uint32) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: cluster,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{Region: "vm"},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
				}}}}},
			}},
		}},
	}
}
