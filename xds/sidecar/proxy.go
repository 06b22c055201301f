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
	// endpoint is where the sidecar forwards: "127.0.0.1:port", or a unix
	// socket path from a Sidecar ingress defaultEndpoint.
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
}

func newScope(v *model.View) *scope {
	sc := &scope{v: v, p: v.Workload(), spec: v.Sidecar().GetSpec()}
	sps := v.ReachablePorts()
	sc.targets = make([]target, len(sps))
	for i, sp := range sps {
		sc.targets[i] = target{svc: sp.Service, port: sp.Port}
	}
	slices.SortStableFunc(sc.targets, func(a, b target) int {
		return cmp.Or(cmp.Compare(a.port.Number, b.port.Number), cmp.Compare(a.svc.Hostname, b.svc.Hostname))
	})
	return sc
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
	if w.WorkloadName != "" && e.Origin == w.Namespace+"/"+w.WorkloadName {
		return true
	}
	return slices.Contains(w.IPs, e.Address)
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
			ip := inboundPort{port: n, protocol: strings.ToUpper(l.GetPort().GetProtocol()), host: "127.0.0.1", hostPort: n}
			if tp := l.GetPort().GetTargetPort(); tp != 0 {
				ip.hostPort = tp
			}
			ip.host, ip.hostPort = defaultEndpoint(l.GetDefaultEndpoint(), ip.hostPort)
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
					out = append(out, inboundPort{port: wp, protocol: port.Protocol, host: "127.0.0.1", hostPort: wp, pool: pool})
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

// defaultEndpoint parses a Sidecar ingress defaultEndpoint: "IP:port",
// "0.0.0.0:port" (meaning loopback for a sidecar) or "unix:///path".
// Empty means 127.0.0.1 on the given port.
func defaultEndpoint(s string, port uint32) (string, uint32) {
	if s == "" {
		return "127.0.0.1", port
	}
	if path, ok := strings.CutPrefix(s, "unix://"); ok {
		return "unix://" + path, 0
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		host := ap.Addr().String()
		if ap.Addr().IsUnspecified() {
			host = "127.0.0.1"
		}
		return host, uint32(ap.Port())
	}
	return "127.0.0.1", port
}
