package bootstrap

import (
	"fmt"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Istio's gateway readiness: Envoy itself answers GET /healthz/ready on
// port 15021 of every address by asking the agent (its status port), so a
// load balancer in front of gateway VMs checks the gateway through the
// proxy that carries the traffic, as it does Istio's gateways.
const (
	// ReadinessPort is the gateway's readiness port (Istio's 15021).
	ReadinessPort = 15021
	// ReadinessPath is what it answers.
	ReadinessPath = "/healthz/ready"
	// AgentCluster is the static cluster of the agent's status port
	// (Istio's "agent").
	AgentCluster = "agent"
	// ReadinessListener names the static listener.
	ReadinessListener = "readiness"
)

// readiness returns the static listener on port ReadinessPort that routes
// ReadinessPath to the agent's status port at 127.0.0.1:agentPort (and
// answers 404 otherwise), and the cluster it routes to.
func readiness(agentPort uint32) (*listenerv3.Listener, *clusterv3.Cluster, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, nil, fmt.Errorf("bootstrap: %w", err)
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix: ReadinessListener,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: ReadinessListener,
			VirtualHosts: []*routev3.VirtualHost{{
				Name: ReadinessListener, Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: ReadinessPath}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{
						ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: AgentCluster},
					}},
				}},
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("bootstrap: %w", err)
	}
	l := &listenerv3.Listener{
		Name:    ReadinessListener,
		Address: socketAddress("0.0.0.0", ReadinessPort),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
		}}}},
	}
	c := &clusterv3.Cluster{
		Name:                 AgentCluster,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(250 * time.Millisecond),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: AgentCluster,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddress("127.0.0.1", agentPort)}},
			}}}},
		},
	}
	return l, c, nil
}

// validateListeners runs ValidateAll on what the static listeners' filters
// carry in an Any.
func validateListeners(ls []*listenerv3.Listener) error {
	for _, l := range ls {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				m, err := f.GetTypedConfig().UnmarshalNew()
				if err != nil {
					return fmt.Errorf("bootstrap: listener %s: %s: %w", l.GetName(), f.GetName(), err)
				}
				if v, ok := m.(interface{ ValidateAll() error }); ok {
					if err := v.ValidateAll(); err != nil {
						return fmt.Errorf("bootstrap: listener %s: %s: %w", l.GetName(), f.GetName(), err)
					}
				}
				if hcm, ok := m.(*hcmv3.HttpConnectionManager); ok {
					for _, hf := range hcm.GetHttpFilters() {
						if _, err := hf.GetTypedConfig().UnmarshalNew(); err != nil {
							return fmt.Errorf("bootstrap: listener %s: %s: %w", l.GetName(), hf.GetName(), err)
						}
					}
				}
			}
		}
	}
	return nil
}
