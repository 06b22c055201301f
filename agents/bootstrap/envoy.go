package bootstrap

import (
	"fmt"
	"path/filepath"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Static cluster names in the Envoy bootstrap, Istio's. Generated TLS
// contexts fetch secrets with an SDS config source naming SDSCluster.
const (
	XDSCluster = "xds-grpc"
	SDSCluster = "sds-grpc"
)

// DefaultAdminPort is Envoy's admin port on 127.0.0.1 (Istio's 15000).
const DefaultAdminPort = 15000

// EnvoyConfig describes an Envoy sidecar's bootstrap.
type EnvoyConfig struct {
	Node Node
	// XDSSocket is the Unix socket of the agent's xDS proxy.
	XDSSocket string
	// SDSSocket is the Unix socket of the agent's SDS server.
	SDSSocket string
	// AdminPort on 127.0.0.1; 0 means DefaultAdminPort.
	AdminPort uint32
	// SotW selects state-of-the-world ADS; the default is delta ADS, as
	// Istio's since 1.22.
	SotW bool
	// AgentStatusPort, for a gateway (Node.Gateway), is the agent's status
	// port on 127.0.0.1: Envoy answers readiness on ReadinessPort through
	// it, as Istio's gateways do. Required for a gateway.
	AgentStatusPort uint32
}

// Envoy builds the Envoy bootstrap: the node (no GENERATOR), the admin
// endpoint on loopback, ADS (delta unless cfg.SotW) for listeners and
// clusters over the static cluster xds-grpc to the agent's xDS socket, and
// the static cluster sds-grpc to the agent's SDS socket. The result passes
// ValidateAll, including what its Any fields hold (see Validate).
func Envoy(cfg EnvoyConfig) (*bootstrapv3.Bootstrap, error) {
	if err := cfg.Node.Validate(); err != nil {
		return nil, err
	}
	if cfg.XDSSocket == "" || cfg.SDSSocket == "" {
		return nil, fmt.Errorf("bootstrap: envoy bootstrap needs the xDS and SDS socket paths")
	}
	if cfg.AdminPort == 0 {
		cfg.AdminPort = DefaultAdminPort
	}
	for _, p := range []*string{&cfg.XDSSocket, &cfg.SDSSocket} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: socket path: %w", err)
		}
		*p = abs
	}
	node, err := cfg.Node.Envoy("")
	if err != nil {
		return nil, err
	}
	apiType := corev3.ApiConfigSource_DELTA_GRPC
	if cfg.SotW {
		apiType = corev3.ApiConfigSource_GRPC
	}
	ads := &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
	xds, err := pipeCluster(XDSCluster, cfg.XDSSocket)
	if err != nil {
		return nil, err
	}
	sds, err := pipeCluster(SDSCluster, cfg.SDSSocket)
	if err != nil {
		return nil, err
	}
	b := &bootstrapv3.Bootstrap{
		Node: node,
		Admin: &bootstrapv3.Admin{
			Address: socketAddress("127.0.0.1", cfg.AdminPort),
		},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:                   apiType,
				TransportApiVersion:       corev3.ApiVersion_V3,
				SetNodeOnFirstMessageOnly: true,
				GrpcServices: []*corev3.GrpcService{{
					TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: XDSCluster}},
				}},
			},
			LdsConfig: ads,
			CdsConfig: ads,
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{xds, sds}},
	}
	if cfg.Node.Gateway {
		if cfg.AgentStatusPort == 0 {
			return nil, fmt.Errorf("bootstrap: a gateway's Envoy answers readiness on %d through the agent's status port: the agent needs one", ReadinessPort)
		}
		l, c, err := readiness(cfg.AgentStatusPort)
		if err != nil {
			return nil, err
		}
		b.StaticResources.Listeners = append(b.StaticResources.Listeners, l)
		b.StaticResources.Clusters = append(b.StaticResources.Clusters, c)
	}
	if err := Validate(b); err != nil {
		return nil, err
	}
	return b, nil
}

// EnvoyJSON renders b as the JSON file Envoy's -c reads.
func EnvoyJSON(b *bootstrapv3.Bootstrap) ([]byte, error) {
	out, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return append(out, '\n'), nil
}

// Validate runs the generated ValidateAll of the bootstrap and of every
// typed extension option its static clusters carry in an Any.
func Validate(b *bootstrapv3.Bootstrap) error {
	if err := b.ValidateAll(); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := validateListeners(b.GetStaticResources().GetListeners()); err != nil {
		return err
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		for name, a := range c.GetTypedExtensionProtocolOptions() {
			m, err := a.UnmarshalNew()
			if err != nil {
				return fmt.Errorf("bootstrap: cluster %s: %s: %w", c.GetName(), name, err)
			}
			v, ok := m.(interface{ ValidateAll() error })
			if !ok {
				return fmt.Errorf("bootstrap: cluster %s: %s: %T has no validator", c.GetName(), name, m)
			}
			if err := v.ValidateAll(); err != nil {
				return fmt.Errorf("bootstrap: cluster %s: %s: %w", c.GetName(), name, err)
			}
		}
	}
	return nil
}

// pipeCluster is a static HTTP/2 cluster with one endpoint: a Unix socket.
func pipeCluster(name, path string) (*clusterv3.Cluster, error) {
	opts, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(time.Second),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts,
		},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
						Address: &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: path}}},
					}},
				}},
			}},
		},
	}, nil
}

func socketAddress(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       ip,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}
