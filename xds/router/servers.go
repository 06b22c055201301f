package router

import (
	"slices"
	"strconv"
	"strings"

	"github.com/vmesh/vmesh/model"
	networking "istio.io/api/networking/v1alpha3"
)

// server is one server of a Gateway that selects the router.
type server struct {
	gw   *model.Gateway
	spec *networking.Server
}

// port is the server's port number.
func (s server) port() uint32 { return s.spec.GetPort().GetNumber() }

// protocol is the server's port protocol, upper case.
func (s server) protocol() string { return strings.ToUpper(s.spec.GetPort().GetProtocol()) }

// isHTTP reports whether the server speaks plaintext HTTP.
func (s server) isHTTP() bool {
	switch s.protocol() {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB":
		return true
	}
	return false
}

// passthrough reports whether the server passes TLS through (PASSTHROUGH
// or AUTO_PASSTHROUGH): it routes by SNI without terminating.
func (s server) passthrough() bool {
	m := s.spec.GetTls().GetMode()
	return s.spec.GetTls() != nil && (m == networking.ServerTLSSettings_PASSTHROUGH || m == networking.ServerTLSSettings_AUTO_PASSTHROUGH)
}

// terminatesHTTPS reports whether the server terminates TLS and routes
// HTTP (protocol HTTPS, a TLS mode that is not passthrough).
func (s server) terminatesHTTPS() bool { return s.protocol() == "HTTPS" && !s.passthrough() }

// terminatesTCP reports whether the server terminates TLS in front of tcp
// routes: a protocol neither HTTP nor HTTPS (TLS, TCP, MONGO) with a TLS
// mode that is not passthrough.
func (s server) terminatesTCP() bool {
	return s.spec.GetTls() != nil && !s.passthrough() && !s.isHTTP() && s.protocol() != "HTTPS"
}

// routeName is the name of the server's route configuration, as Istio's
// gatewayRDSRouteName: "http.<port>" for plaintext HTTP (every such server
// of the port shares it), "https.<port>.<port name>.<gateway>.<namespace>"
// for terminated HTTPS; "" for others.
func (s server) routeName() string {
	bind := ""
	if s.spec.GetBind() != "" {
		bind = "." + s.spec.GetBind()
	}
	switch {
	case s.isHTTP():
		return "http." + itoa(s.port()) + bind
	case s.terminatesHTTPS():
		return "https." + itoa(s.port()) + "." + s.spec.GetPort().GetName() + "." + s.gw.Name + "." + s.gw.Namespace + bind
	}
	return ""
}

// servers lists the servers of the router's Gateways, in Gateway order,
// then server order.
func servers(v *model.View) []server {
	var out []server
	for _, gw := range v.Gateways() {
		for _, sv := range gw.Spec.GetServers() {
			if sv.GetPort().GetNumber() == 0 {
				continue
			}
			out = append(out, server{gw: gw, spec: sv})
		}
	}
	return out
}

// hostsFor returns the server's hosts a VirtualService in vsNamespace may
// bind to, as Istio's host.NamesForNamespace: "ns/host" applies when ns is
// "*" or vsNamespace ("." is the Gateway's namespace), a bare host always.
func (s server) hostsFor(vsNamespace string) []string {
	var out []string
	for _, h := range s.spec.GetHosts() {
		if ns, host, ok := strings.Cut(h, "/"); ok {
			if ns == "." {
				ns = s.gw.Namespace
			}
			if ns != "*" && ns != vsNamespace {
				continue
			}
			h = host
		}
		out = append(out, h)
	}
	return out
}

// intersect returns the hosts both lists match, the more specific of each
// matching pair, as Istio's host.Names.Intersection.
func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		for _, y := range b {
			var h string
			switch {
			case subsetOf(x, y):
				h = x
			case subsetOf(y, x):
				h = y
			default:
				continue
			}
			if !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	return out
}

// subsetOf reports whether every host a matches, b matches too (Istio's
// host.Name.SubsetOf).
func subsetOf(a, b string) bool {
	switch {
	case b == "*":
		return true
	case strings.HasPrefix(b, "*"):
		if strings.HasPrefix(a, "*") {
			return strings.HasSuffix(a[1:], b[1:])
		}
		return strings.HasSuffix(a, b[1:])
	}
	return a == b
}

// sniHosts are a TLS server's names for its filter chain match: its hosts
// without namespace, none when one is "*" (every name), as Istio's
// getSNIHostsForServer.
func (s server) sniHosts() []string {
	var out []string
	for _, h := range s.spec.GetHosts() {
		if _, host, ok := strings.Cut(h, "/"); ok {
			h = host
		}
		if h == "*" {
			return nil
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
