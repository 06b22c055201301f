package sidecar

//lint:file-ignore SA1019 Istio's deprecated targetPort is read because Istio still honours it

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/xds/translate"

	"github.com/vmesh/vmesh/model"
	networking "istio.io/api/networking/v1alpha3"
)

// Proxy is everything the generator reads about one Envoy sidecar beyond
// the model: the model supplies the rest (the Sidecar that scopes it, the
// PeerAuthentication modes and AuthorizationPolicies that apply to it, the
// trust domain). Two proxies with equal Proxy values (ID aside) get
// identical config from one snapshot, so a caller may group proxies by these
// fields.
type Proxy struct {
	// ID is the xDS node id, for error messages only.
	ID string
	// Namespace decides visibility (exportTo), DestinationRule lookup, short
	// host names and, with Labels, the Sidecar and the policies that apply.
	Namespace string
	// Labels select the Sidecar and the workload policies (through the
	// model) and VirtualService sourceLabels.
	Labels map[string]string
	// IPs are the workload's addresses: a service endpoint with one of them
	// is served by this proxy (inbound).
	IPs []string
	// WorkloadName, when set, also claims the endpoint that came from the
	// WorkloadEntry <Namespace>/<WorkloadName>.
	WorkloadName string
	// Locality is the proxy's region/zone/subzone, for locality-aware load
	// balancing; "" turns it off.
	Locality string
}

// target is one outbound service port the proxy may reach.
type target struct {
	svc  *model.Service
	port model.Port
}

// clusterRef is one outbound cluster: a service port and a subset.
type clusterRef struct {
	target
	subset string
	labels map[string]string
	dr     *model.DestinationRule
}

func (c clusterRef) name() string {
	return translate.ClusterName(c.port.Number, c.subset, c.svc.Hostname)
}

// inboundPort is one port the workload serves.
type inboundPort struct {
	port     uint32 // the port traffic arrives on
	protocol string
	// endpoint is where the sidecar forwards: "127.0.0.1:port", or a unix
	// socket path from a Sidecar ingress defaultEndpoint.
	host     string
	hostPort uint32
}

// scope is the part of the model one proxy sees, computed once per call.
type scope struct {
	s   *model.Snapshot
	p   *Proxy
	msc *model.Sidecar
	// spec is the Sidecar's spec, nil without a Sidecar.
	spec     *networking.Sidecar
	targets  []target // sorted by port, then host
	clusters []clusterRef
	byName   map[string]clusterRef
}

func newScope(s *model.Snapshot, p *Proxy) *scope {
	sc := &scope{s: s, p: p, msc: s.SidecarFor(p.Namespace, p.Labels), byName: make(map[string]clusterRef)}
	if sc.msc != nil {
		sc.spec = sc.msc.Spec
	}
	for _, svc := range s.VisibleServices(p.Namespace, sc.msc) {
		if len(svc.Ports) == 0 {
			continue
		}
		dr := s.DestinationRuleFor(svc.Hostname, p.Namespace, svc.Namespace)
		for _, port := range svc.Ports {
			if !egressAllows(sc.spec, p.Namespace, svc, port.Number) {
				continue
			}
			t := target{svc: svc, port: port}
			sc.targets = append(sc.targets, t)
			refs := []clusterRef{{target: t, dr: dr}}
			for _, ss := range dr.Subsets() {
				if ss.GetName() != "" {
					refs = append(refs, clusterRef{target: t, subset: ss.GetName(), labels: ss.GetLabels(), dr: dr})
				}
			}
			for _, r := range refs {
				sc.clusters = append(sc.clusters, r)
				sc.byName[r.name()] = r
			}
		}
	}
	slices.SortStableFunc(sc.targets, func(a, b target) int {
		return cmp.Or(cmp.Compare(a.port.Number, b.port.Number), cmp.Compare(a.svc.Hostname, b.svc.Hostname))
	})
	return sc
}

// egressAllows applies the port of each Sidecar egress listener: a listener
// with a port admits its hosts on that port only.
func egressAllows(spec *networking.Sidecar, ns string, svc *model.Service, port uint32) bool {
	if spec == nil || len(spec.GetEgress()) == 0 {
		return true
	}
	for _, l := range spec.GetEgress() {
		if n := l.GetPort().GetNumber(); n != 0 && n != port {
			continue
		}
		for _, h := range l.GetHosts() {
			hns, host, ok := strings.Cut(h, "/")
			if !ok {
				continue
			}
			if hns == "." {
				hns = ns
			}
			if (hns == "*" || hns == svc.Namespace) && model.HostMatches(host, svc.Hostname) {
				return true
			}
		}
	}
	return false
}

// registryOnly reports whether the Sidecar blocks unknown destinations.
// REGISTRY_ONLY is the enum's zero value, so an absent policy must be
// told apart: it means ALLOW_ANY, the mesh default.
func (sc *scope) registryOnly() bool {
	otp := sc.spec.GetOutboundTrafficPolicy()
	return otp != nil && otp.GetMode() == networking.OutboundTrafficPolicy_REGISTRY_ONLY
}

// fallbackCluster is where unmatched outbound traffic goes.
func (sc *scope) fallbackCluster() string {
	if sc.registryOnly() {
		return BlackHoleCluster
	}
	return PassthroughCluster
}

// ownsEndpoint reports whether e is this proxy's workload.
func (sc *scope) ownsEndpoint(e *model.Endpoint) bool {
	if sc.p.WorkloadName != "" && e.Origin == sc.p.Namespace+"/"+sc.p.WorkloadName {
		return true
	}
	return slices.Contains(sc.p.IPs, e.Address)
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
			out = append(out, ip)
		}
	} else {
		for _, svc := range sc.s.Services {
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
					out = append(out, inboundPort{port: wp, protocol: port.Protocol, host: "127.0.0.1", hostPort: wp})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b inboundPort) int { return cmp.Compare(a.port, b.port) })
	return out
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
