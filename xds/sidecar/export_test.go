package sidecar

import (
	"fmt"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
)

// References lists the route configurations ("route NAME") and clusters
// ("cluster NAME") m names, as CheckReferences reads them.
func References(m proto.Message) ([]string, error) {
	var out []string
	err := references(m, func(route bool, name string) error {
		if name != "" {
			out = append(out, refLabel(route, name))
		}
		return nil
	})
	return out, err
}

// ReflectiveReferences lists the same by walking every field of m and
// unpacking every Any: slow, but it cannot miss a filter or route that
// References' typed traversal does not know to look in.
func ReflectiveReferences(m proto.Message) ([]string, error) {
	var out []string
	add := func(route bool, names ...string) {
		for _, n := range names {
			if n != "" {
				out = append(out, refLabel(route, n))
			}
		}
	}
	err := walk(m.ProtoReflect(), nil, func(x proto.Message) error {
		switch v := x.(type) {
		case *hcmv3.HttpConnectionManager:
			add(true, v.GetRds().GetRouteConfigName())
		case *tcpproxyv3.TcpProxy:
			add(false, v.GetCluster())
			for _, wc := range v.GetWeightedClusters().GetClusters() {
				add(false, wc.GetName())
			}
		case *routev3.RouteAction:
			add(false, v.GetCluster())
			for _, wc := range v.GetWeightedClusters().GetClusters() {
				add(false, wc.GetName())
			}
			for _, mp := range v.GetRequestMirrorPolicies() {
				add(false, mp.GetCluster())
			}
		}
		return nil
	})
	return out, err
}

func refLabel(route bool, name string) string {
	if route {
		return fmt.Sprintf("route %s", name)
	}
	return fmt.Sprintf("cluster %s", name)
}
