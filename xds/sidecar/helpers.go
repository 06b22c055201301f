package sidecar

import (
	"strings"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/translate"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// mustAny packs a message known to marshal.
func mustAny(m proto.Message) *anypb.Any { return translate.MustAny(m) }

// address returns a socket address, or a pipe for "unix://path".
func address(host string, port uint32) *corev3.Address {
	if path, ok := strings.CutPrefix(host, "unix://"); ok {
		return &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: path}}}
	}
	return translate.SocketAddress(host, port)
}

func networkFilter(name string, m proto.Message) *listenerv3.Filter {
	return &listenerv3.Filter{Name: name, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(m)}}
}

// weighted is one destination of a TCP or HTTP route.
type weighted struct {
	cluster string
	weight  uint32
	ref     model.Cluster
}

// tcpProxy returns a tcp_proxy filter to one cluster or a weighted split.
func tcpProxy(statPrefix string, dests []weighted) *listenerv3.Filter {
	tp := &tcpproxyv3.TcpProxy{StatPrefix: statPrefix}
	if len(dests) == 1 {
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_Cluster{Cluster: dests[0].cluster}
	} else {
		wc := &tcpproxyv3.TcpProxy_WeightedCluster{}
		for _, d := range dests {
			wc.Clusters = append(wc.Clusters, &tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{Name: d.cluster, Weight: d.weight})
		}
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_WeightedClusters{WeightedClusters: wc}
	}
	return networkFilter(tcpProxyFilter, tp)
}

func boolValue(b bool) *wrapperspb.BoolValue { return wrapperspb.Bool(b) }

// cloneRoute copies a route built once for several matches.
func cloneRoute(r *routev3.Route) *routev3.Route { return proto.Clone(r).(*routev3.Route) }
