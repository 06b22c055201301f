package grpc

import (
	"fmt"

	"github.com/vmesh/vmesh/xds/translate"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/security"
	"google.golang.org/protobuf/types/known/anypb"
)

// Listeners returns one API listener per visible service port, named
// host:port, whose HttpConnectionManager fetches the route configuration of
// the same name over ADS.
func Listeners(v *model.View) ([]*listenerv3.Listener, error) {
	return ListenersOf(v.Services())
}

// ListenersOf returns the client listeners of the given services.
func ListenersOf(svcs []*model.Service) ([]*listenerv3.Listener, error) {
	var out []*listenerv3.Listener
	for _, svc := range svcs {
		for _, port := range svc.Ports {
			name := ListenerName(svc.Hostname, port.Number)
			hcm := &hcmv3.HttpConnectionManager{
				StatPrefix: name,
				RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
					ConfigSource:    translate.ADSConfigSource(),
					RouteConfigName: name,
				}},
				HttpFilters: clientHTTPFilters(),
			}
			a, err := anypb.New(hcm)
			if err != nil {
				return nil, fmt.Errorf("listener %s: %w", name, err)
			}
			out = append(out, &listenerv3.Listener{
				Name:        name,
				ApiListener: &listenerv3.ApiListener{ApiListener: a},
			})
		}
	}
	return out, nil
}

// clientHTTPFilters returns the client filter chain: fault injection (no
// fault unless a route overrides it) then the router, which must be last.
func clientHTTPFilters() []*hcmv3.HttpFilter {
	return []*hcmv3.HttpFilter{
		{Name: faultFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: translate.MustAny(&faultv3.HTTPFault{})}},
		routerFilter(),
	}
}

func routerFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: routerFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: translate.MustAny(&routerv3.Router{})}}
}

// InboundListener returns the listener an xDS-enabled gRPC server needs
// to become SERVING: its exact socket address and one filter chain with an
// HttpConnectionManager whose only route is a NonForwardingAction. The
// PeerAuthentication mode of the proxy's workload on that port decides the
// chain's transport: STRICT requires mTLS (certificate-provider instance
// security.CertProviderInstance, client certificate required); PERMISSIVE
// and DISABLE serve plaintext, because grpc-go cannot tell TLS from
// plaintext on one port (it has no tls_inspector and drops filter chains
// matching transport_protocol "tls"). AuthorizationPolicies that select the
// workload become RBAC filters before the router.
// name is InboundListenerPrefix + "IP:port".
func InboundListener(v *model.View, name string) (*listenerv3.Listener, error) {
	ip, port, err := parseInboundName(name)
	if err != nil {
		return nil, err
	}
	filters, err := security.RBACFilters(v.AuthorizationPolicies())
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", name, err)
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "inbound",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "inbound|" + ListenerName(ip, port),
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "inbound",
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: append(filters, routerFilter()),
	}
	a, err := anypb.New(hcm)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", name, err)
	}
	mode := v.PeerAuthenticationMode(port)
	chain := &listenerv3.FilterChain{
		Name:    "inbound|" + mode.String(),
		Filters: []*listenerv3.Filter{{Name: hcmFilterName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a}}},
	}
	if mode == model.MTLSStrict {
		chain.TransportSocket = security.GRPCDownstreamMTLS()
	}
	return &listenerv3.Listener{
		Name: name,
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address:       ip,
			PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
		}}},
		FilterChains:     []*listenerv3.FilterChain{chain},
		TrafficDirection: corev3.TrafficDirection_INBOUND,
	}, nil
}
