package grpc

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/vmesh/vmesh/model"
)

// InboundListenerPrefix starts the names of the server listeners that
// xds.NewGRPCServer asks for. A gRPC server's bootstrap sets
// server_listener_resource_name_template to InboundListenerPrefix + "%s".
const InboundListenerPrefix = "xds.vmesh.io/grpc/lds/inbound/"

// Filter names used in HttpConnectionManagers.
const (
	faultFilterName  = "envoy.filters.http.fault"
	routerFilterName = "envoy.filters.http.router"
	hcmFilterName    = "envoy.filters.network.http_connection_manager"
)

// ListenerName returns the client listener (and route configuration) name
// for a service port: "host:port", the target a gRPC client dials as
// xds:///host:port.
func ListenerName(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// parseInboundName returns the IP and port of a server listener name.
func parseInboundName(name string) (string, uint32, error) {
	hp, ok := strings.CutPrefix(name, InboundListenerPrefix)
	if !ok {
		return "", 0, fmt.Errorf("listener %q is not an inbound listener", name)
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("listener %q: %w", name, err)
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("listener %q: %q is not an IP address", name, host)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("listener %q: bad port %q", name, port)
	}
	return host, uint32(n), nil
}

// UsesEDS reports whether a service's clusters get endpoints over EDS. DNS
// services whose endpoints are host names use a LOGICAL_DNS cluster instead.
func UsesEDS(svc *model.Service) bool {
	if svc.Resolution != model.ResolutionDNS && svc.Resolution != model.ResolutionDNSRoundRobin {
		return true
	}
	for _, e := range svc.Endpoints {
		if net.ParseIP(e.Address) == nil {
			return false
		}
	}
	return true
}

// ClusterDomain is the DNS suffix of Kubernetes-style service names
// (<name>.<namespace>.svc.cluster.local), the domain Istio's proxyless
// generator expands short names in.
const ClusterDomain = "cluster.local"

// shortForms returns the short names a client in namespace ns may dial a
// host by, as Istio's grpcgen accepts them: for <name>.<ns>.svc.<domain>,
// "<name>", "<name>.<ns>" and "<name>.<ns>.svc"; none for a host of
// another namespace or not of that form.
func shortForms(host, ns string) []string {
	name, ok := strings.CutSuffix(host, "."+ns+".svc."+ClusterDomain)
	if !ok || ns == "" || name == "" || strings.Contains(name, ".") {
		return nil
	}
	return []string{name, name + "." + ns, name + "." + ns + ".svc"}
}

// ExpandShortName returns the listener name a short client listener name
// stands for in namespace ns, as Istio's grpcgen expands it: "reviews:9080"
// is "reviews.<ns>.svc.cluster.local:9080", and so are
// "reviews.<ns>:9080" and "reviews.<ns>.svc:9080". ok is false for any
// other name.
func ExpandShortName(name, ns string) (string, bool) {
	host, port, err := net.SplitHostPort(name)
	if err != nil || ns == "" || host == "" {
		return "", false
	}
	switch {
	case !strings.Contains(host, "."):
	case strings.HasSuffix(host, "."+ns):
		host = strings.TrimSuffix(host, "."+ns)
	case strings.HasSuffix(host, "."+ns+".svc"):
		host = strings.TrimSuffix(host, "."+ns+".svc")
	default:
		return "", false
	}
	if strings.Contains(host, ".") {
		return "", false
	}
	return net.JoinHostPort(host+"."+ns+".svc."+ClusterDomain, port), true
}
