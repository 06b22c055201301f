package sidecar

//lint:file-ignore SA1019 Istio's deprecated targetPort is read because Istio still honours it

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/model"
	networking "istio.io/api/networking/v1alpha3"
)

// target is one outbound service port the proxy may reach.
type target struct {
	svc  *model.Service
	port model.Port
}

// inboundPort is one port the workload serves.
type inboundPort struct {
	port     uint32 // the port traffic arrives on
	protocol string
	// host and hostPort are where the sidecar forwards: empty host for the
	// address the connection was sent to (Istio's passthrough, an
	// ORIGINAL_DST cluster), else an IP address (127.0.0.1, or the VM's own
	// from a Sidecar ingress defaultEndpoint 0.0.0.0:port) or a unix socket
	// path ("unix:///path", no port).
	host     string
	hostPort uint32
	// pool is the connection pool of its inbound cluster, set server-side
	// as Istio sets it so the workload gets the capacity its clients are
	// given: the Sidecar's (its ingress listener's for the port, else
	// inboundConnectionPool), else the one the DestinationRule of the
	// workload's service gives the service port. nil: none.
	pool *networking.ConnectionPoolSettings
}

// scope is the proxy's View with what the Envoy generators derive from it
// once per call: the Sidecar's spec and the outbound service ports.
type scope struct {
	v *model.View
	p model.Workload
	// spec is the Sidecar's spec, nil without a Sidecar.
	spec    *networking.Sidecar
	targets []target // sorted by port, then host
	// gateway, when set, is the Gateway ("namespace/name") the routes are
	// translated for (GatewayRoutes): a match applies by its gateways,
	// resolved in gatewayVSNamespace, the VirtualService's namespace.
	gateway, gatewayVSNamespace string
	// gatewayTLS is whether the gateway's server has TLS settings (its
	// redirects' default scheme is https).
	gatewayTLS bool
}

// baseScope is the proxy's scope without its outbound targets: what the
// generators of clusters, endpoints and the inbound side read.
func baseScope(v *model.View) *scope {
	return &scope{v: v, p: v.Workload(), spec: v.Sidecar().GetSpec()}
}

// newScope is the proxy's scope with its outbound targets, for listeners
// and routes.
func newScope(v *model.View) *scope {
	sc := baseScope(v)
	sps := v.ReachablePorts()
	sc.targets = make([]target, len(sps))
	for i, sp := range sps {
		sc.targets[i] = target{svc: sp.Service, port: sp.Port}
	}
	// ReachablePorts lists the services in host order: a stable sort by
	// port orders the targets by port, then host.
	slices.SortStableFunc(sc.targets, func(a, b target) int { return cmp.Compare(a.port.Number, b.port.Number) })
	return sc
}

// Outbound generates a sidecar's outbound listeners and route
// configurations, the parts of its config that read the scope's targets
// (every service port the proxy reaches, sorted). An update regenerates a
// few listeners and routes of one scope: the targets are listed once, on
// first use, for all of them.
type Outbound struct {
	v  *model.View
	sc *scope
}

// NewOutbound returns the outbound generator of v's scope.
func NewOutbound(v *model.View) *Outbound { return &Outbound{v: v} }

func (o *Outbound) scope() *scope {
	if o.sc == nil {
		o.sc = newScope(o.v)
	}
	return o.sc
}

// registryOnly reports whether unknown destinations are blocked: the
// Sidecar's outboundTrafficPolicy, else the mesh's (MeshConfig, ALLOW_ANY
// by default). REGISTRY_ONLY is the enum's zero value, so an absent policy
// must be told apart.
func (sc *scope) registryOnly() bool {
	if otp := sc.spec.GetOutboundTrafficPolicy(); otp != nil {
		return otp.GetMode() == networking.OutboundTrafficPolicy_REGISTRY_ONLY
	}
	return sc.v.Mesh().RegistryOnly
}

// fallbackCluster is where unmatched outbound traffic goes: nowhere under
// REGISTRY_ONLY; else the cluster of the Sidecar's outboundTrafficPolicy
// egressProxy when it names one (Istio's outbound|port|subset|host for it:
// unknown traffic leaves through that egress proxy, and fails when the
// Sidecar does not import its host), else the original destination.
func (sc *scope) fallbackCluster() string {
	if sc.registryOnly() {
		return BlackHoleCluster
	}
	if ep := sc.spec.GetOutboundTrafficPolicy().GetEgressProxy(); ep.GetHost() != "" {
		return model.ClusterName(ep.GetPort().GetNumber(), ep.GetSubset(), ep.GetHost())
	}
	return PassthroughCluster
}

// ownsEndpoint reports whether e is this proxy's workload.
func (sc *scope) ownsEndpoint(e *model.Endpoint) bool { return OwnsEndpoint(sc.p, e) }

// OwnsEndpoint reports whether e is w's own (its inbound side serves it):
// one of w's IPs, or the WorkloadEntry <namespace>/<workload name>.
func OwnsEndpoint(w model.Workload, e *model.Endpoint) bool {
	if w.WorkloadName != "" && isOrigin(e.Origin, w.Namespace, w.WorkloadName) {
		return true
	}
	return slices.Contains(w.IPs, e.Address)
}

// isOrigin reports whether origin is "<ns>/<name>", without building that
// string: a sidecar's inbound ports look at every endpoint of the mesh.
func isOrigin(origin, ns, name string) bool {
	return len(origin) == len(ns)+1+len(name) && origin[len(ns)] == '/' && strings.HasPrefix(origin, ns) && strings.HasSuffix(origin, name)
}

// inbound returns the ports the workload serves, sorted by port: the
// Sidecar's ingress listeners when it has any, else the ports of every
// service endpoint the proxy owns (first service by host wins a port).
func (sc *scope) inbound() []inboundPort {
	var out []inboundPort
	seen := make(map[uint32]bool)
	if ing := sc.spec.GetIngress(); len(ing) > 0 {
		for _, l := range ing {
			n := l.GetPort().GetNumber()
			if n == 0 || seen[n] {
				continue
			}
			seen[n] = true
			ip := inboundPort{port: n, protocol: strings.ToUpper(l.GetPort().GetProtocol()), hostPort: n}
			if tp := l.GetPort().GetTargetPort(); tp != 0 {
				ip.hostPort = tp
			}
			ip.host, ip.hostPort = sc.defaultEndpoint(l.GetDefaultEndpoint(), ip.hostPort)
			ip.pool = l.GetConnectionPool()
			if ip.pool == nil {
				ip.pool = sc.inboundPool(n)
			}
			out = append(out, ip)
		}
	} else {
		for _, svc := range sc.v.AllServices() {
			for _, e := range svc.Endpoints {
				if !sc.ownsEndpoint(e) {
					continue
				}
				for _, port := range svc.Ports {
					wp := e.PortFor(port)
					if wp == 0 || seen[wp] {
						continue
					}
					seen[wp] = true
					pool := sc.spec.GetInboundConnectionPool()
					if pool == nil {
						pool = sc.v.DestinationRule(svc).TrafficPolicy(port.Number, "").GetConnectionPool()
					}
					out = append(out, inboundPort{port: wp, protocol: port.Protocol, host: sc.inboundHost(), hostPort: wp, pool: pool})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b inboundPort) int { return cmp.Compare(a.port, b.port) })
	return out
}

// inboundPool is the connection pool of a Sidecar ingress port without
// one of its own: the Sidecar's inboundConnectionPool, else that of the
// DestinationRule of the first service (in host order) with an endpoint
// of this workload on the port, for that service port.
func (sc *scope) inboundPool(port uint32) *networking.ConnectionPoolSettings {
	if cp := sc.spec.GetInboundConnectionPool(); cp != nil {
		return cp
	}
	for _, svc := range sc.v.AllServices() {
		for _, e := range svc.Endpoints {
			if !sc.ownsEndpoint(e) {
				continue
			}
			for _, sp := range svc.Ports {
				if e.PortFor(sp) == port {
					return sc.v.DestinationRule(svc).TrafficPolicy(sp.Number, "").GetConnectionPool()
				}
			}
		}
	}
	return nil
}

// inboundHost is where the sidecar forwards the traffic of a workload port
// that no Sidecar ingress listener declares, as Istio's inbound clusters:
// under MeshConfig's inboundTrafficPolicy PASSTHROUGH (the default) the
// address the connection was sent to (""), under LOCALHOST the loopback
// address of the proxy's IP family.
func (sc *scope) inboundHost() string {
	if !sc.v.Mesh().InboundLocalhost {
		return ""
	}
	if sc.ipv6Only() {
		return "::1"
	}
	return "127.0.0.1"
}

// families reports which IP families the proxy's addresses have.
func (sc *scope) families() (v4, v6 bool) {
	for _, ip := range sc.p.IPs {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		if a.Is4() || a.Is4In6() {
			v4 = true
		} else {
			v6 = true
		}
	}
	return v4, v6
}

// ipv6Only reports whether every IP address of the proxy is IPv6 (and it
// has one): Istio's IPv6 IP mode, whose loopback is ::1 and whose
// passthrough source ::6.
func (sc *scope) ipv6Only() bool {
	v4, v6 := sc.families()
	return v6 && !v4
}

// passthroughSources are the source addresses of the connections a
// sidecar opens to its own workload for traffic sent to the VM's address,
// Istio's: 127.0.0.6 for IPv4 and ::6 for IPv6 (the capture puts ::6 on
// the loopback interface), which the capture rules let through
// (agents/capture); from any other address, a connection of the sidecar's
// user to the VM's own address is captured back to the sidecar's inbound
// port. A dual-stack VM gets both, IPv4 first, and Envoy binds the one of
// the destination's family (Istio's dual-stack mode); a VM without
// addresses gets IPv4's.
func (sc *scope) passthroughSources() []string {
	v4, v6 := sc.families()
	switch {
	case v4 && v6:
		return []string{"127.0.0.6", "::6"}
	case v6:
		return []string{"::6"}
	}
	return []string{"127.0.0.6"}
}

// defaultEndpoint parses a Sidecar ingress defaultEndpoint, as Istio reads
// it: empty for the address the connection was sent to (""), "127.0.0.1:port"
// or "[::1]:port" for loopback, "0.0.0.0:port" ("[::]:port") for the VM's
// first IPv4 (IPv6) address, loopback when it has none, another IP as
// given, "unix:///path" for a unix socket.
func (sc *scope) defaultEndpoint(s string, port uint32) (string, uint32) {
	if s == "" {
		return "", port
	}
	if path, ok := strings.CutPrefix(s, "unix://"); ok {
		return "unix://" + path, 0
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return "", port
	}
	a := ap.Addr()
	if a.IsUnspecified() {
		for _, ip := range sc.p.IPs {
			if own, err := netip.ParseAddr(ip); err == nil && own.Is4() == a.Is4() {
				return own.String(), uint32(ap.Port())
			}
		}
		if a.Is4() {
			return "127.0.0.1", uint32(ap.Port())
		}
		return "::1", uint32(ap.Port())
	}
	return a.String(), uint32(ap.Port())
}
