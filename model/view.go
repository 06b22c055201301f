package model

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	networking "istio.io/api/networking/v1alpha3"
)

// ProxyKind names a kind of proxy (its generators live in a package of
// xds, listed in xds's one table of kinds). The model never decides by it:
// what differs between kinds in the View is the Reads each kind declares.
type ProxyKind string

// The names of the proxy kinds vmesh serves (xds/kinds.go lists them).
const (
	KindGRPC    ProxyKind = "grpc"
	KindSidecar ProxyKind = "sidecar"
	// KindRouter is an Envoy in router mode serving Istio Gateways (Istio's
	// ingress and egress gateways; node ids "router~IP~id~ns.svc.cluster.local").
	KindRouter ProxyKind = "router"
)

// Reads is what a proxy kind's generators read of its workload and which
// services and ports it reaches: the kind's package declares it
// (sidecar.Reads, grpc.Reads), the View applies it, and the group key is
// the View's workload as Reads lets it through (View.Key).
type Reads struct {
	// Workload: the generators read the whole workload (every label, the
	// IPs, the workload name and the locality). Otherwise they read only
	// its namespace and the labels VirtualService sourceLabels name.
	Workload bool
	// EgressPorts: a Sidecar egress listener with a port admits its hosts
	// on that port only (Envoy applies the Sidecar's ports; a proxyless
	// client takes the Sidecar's hosts only).
	EgressPorts bool
	// Resolvable: the proxy has clusters only for resolvable, non-wildcard
	// hosts (no Envoy in the path to resolve DNS or match a wildcard).
	// Otherwise any service with ports.
	Resolvable bool
	// Locality: when the generators do not read the whole workload, they
	// read its locality, and the labels failoverPriority names, where a
	// locality setting or outlier detection can apply (a proxyless
	// client's EDS priorities and weights, as Istio's endpoint builder
	// gives them); the group key then carries them.
	Locality bool
	// Gateways: the proxy is a gateway (Istio's router). Its generators
	// read the Gateways that select its labels and the VirtualServices
	// bound to them (View.Gateways), which its group key names; no Sidecar
	// scopes it (Istio applies none to gateways).
	Gateways bool
}

// Workload is what config generation may know about a proxy.
type Workload struct {
	// ID is the xDS node id, for error messages only.
	ID   string
	Kind ProxyKind
	// Reads is what the kind's generators read (its package declares it).
	Reads Reads
	// Namespace decides visibility (exportTo), DestinationRule lookup, short
	// host names and, with Labels, the Sidecar and the policies that apply.
	Namespace string
	// Labels select the Sidecar and the workload policies and match
	// VirtualService sourceLabels.
	Labels map[string]string
	// IPs are the workload's addresses: a service endpoint with one of them
	// is served by this proxy (an Envoy sidecar's inbound side).
	IPs []string
	// WorkloadName, when set, also claims the endpoint that came from the
	// WorkloadEntry <Namespace>/<WorkloadName>.
	WorkloadName string
	// Locality is the proxy's region/zone/subzone, for locality-aware load
	// balancing; "" turns it off.
	Locality string
}

// View is the part of a Snapshot one proxy's config depends on (as Consul's
// proxycfg.ConfigSnapshot is for a Consul proxy): the Sidecar that scopes
// it, the services it sees and their clusters with the DestinationRule of
// each, the policies that select it, and every route destination resolved
// by one rule (Resolve). Generators read only the View.
//
// A View is read-only: no method changes what it answers, and it is safe
// for concurrent use. What it derives from the snapshot (its services,
// clusters, reachable ports, unregistered hosts, key) is resolved once, on
// first use (sync.Once): the incremental generators read only a few
// hosts' worth of it.
//
// Proxies with equal Keys get identical config from one snapshot. The key is
// derived from what the View lets the generators read: the kind, the
// namespace, the Sidecar, the policies that select the workload, and the
// workload as the kind's Reads lets it through (Workload), field by field
// (TestEqualKeysEqualConfig).
type View struct {
	snap  *Snapshot
	proxy Workload
	// whole is the workload as given: its labels select the Sidecar and
	// the policies, which the key covers through their keys.
	whole   Workload
	sidecar *Sidecar

	keyOnce sync.Once
	key     string
	// services are resolved on first use (Services).
	servicesOnce sync.Once
	services     []*Service
	clustersOnce sync.Once
	clusters     []Cluster
	reachOnce    sync.Once
	reachable    []ServicePort
	unregOnce    sync.Once
	unregistered []UnregisteredHost
}

// Cluster is one outbound cluster of a proxy: a service port and a subset,
// with the DestinationRule that applies.
type Cluster struct {
	Service *Service
	Port    Port
	// Subset is "" for the service's own cluster; SubsetLabels select the
	// subset's endpoints.
	Subset       string
	SubsetLabels map[string]string
	// DestinationRule is the rule of the service as the proxy sees it, or
	// nil.
	DestinationRule *DestinationRule
	// LocalityLB is how the proxy balances the cluster's endpoints by
	// locality, nil for not at all.
	LocalityLB *LocalityLB
}

// Name is the cluster's name, Istio's outbound|<port>|<subset>|<host>.
func (c Cluster) Name() string { return ClusterName(c.Port.Number, c.Subset, c.Service.Hostname) }

// ClusterName returns Istio's outbound cluster name,
// "outbound|port|subset|host". Both kinds of client name clusters (and
// their EDS resources) by it.
func ClusterName(port uint32, subset, host string) string {
	return "outbound|" + strconv.FormatUint(uint64(port), 10) + "|" + subset + "|" + host
}

// ViewKey is the group key of w's View: what NewView(s, w).Key() returns,
// without resolving the rest of the View.
func ViewKey(s *Snapshot, w Workload) string {
	return keyOf(s, w, sidecarOf(s, w))
}

// sidecarOf is the Sidecar that scopes w: none for a gateway
// (Reads.Gateways), as Istio's gateways take no Sidecar.
func sidecarOf(s *Snapshot, w Workload) *Sidecar {
	if w.Reads.Gateways {
		return nil
	}
	return s.SidecarFor(w.Namespace, w.Labels)
}

// OutboundKey is the key of the part of w's config that depends only on its
// scope, not on the workload itself: for an Envoy sidecar its outbound
// listeners, routes, clusters and endpoints read the namespace, the
// Sidecar, the labels that VirtualService sourceLabels name (no other) and
// the locality and the labels failoverPriority names (locality load
// balancing, LocalityKey) and the Telemetries that select it (access logs
// and tracing of every listener), never its IPs, workload name or
// the policies that select it (those make its inbound side). Proxies with
// one OutboundKey share that part. Only a kind that splits its config so
// (xds/sidecar) asks for it.
func OutboundKey(s *Snapshot, w Workload) string {
	return outboundKeyOf(s, w, sidecarOf(s, w))
}

func outboundKeyOf(s *Snapshot, w Workload, sidecar *Sidecar) string {
	sc := "-"
	if sidecar != nil {
		sc = sidecar.Key()
	}
	// LabelString of the labels sourceLabels read (their keys are sorted),
	// built as the push computes it for every group.
	var b strings.Builder
	b.WriteString(string(w.Kind) + "|" + w.Namespace + "|" + sc + "|labels=")
	first := true
	for _, k := range s.sourceLabelKeys {
		if v, ok := w.Labels[k]; ok {
			if !first {
				b.WriteByte(',')
			}
			b.WriteString(k + "=" + v)
			first = false
		}
	}
	b.WriteString("|locality=" + localityKey(s, w))
	if tk := s.telemetryKey(w.Namespace, w.Labels); tk != "" {
		b.WriteString("|" + tk)
	}
	return b.String()
}

// visibleWorkload is what a View lets its generators read of w: all of it
// when its kind reads the workload (Reads.Workload), else its id (for
// errors), kind and namespace and the labels sourceLabels name.
func visibleWorkload(s *Snapshot, w Workload) Workload {
	if w.Reads.Workload {
		return w
	}
	vw := Workload{ID: w.ID, Kind: w.Kind, Reads: w.Reads, Namespace: w.Namespace, Labels: sourceLabels(s, w.Labels)}
	if w.Reads.Locality && s.localityMatters && w.Locality != "" {
		vw.Locality = w.Locality
		for _, k := range s.failoverLabelKeys {
			if v, ok := w.Labels[k]; ok {
				if vw.Labels == nil {
					vw.Labels = map[string]string{}
				}
				vw.Labels[k] = v
			}
		}
	}
	return vw
}

// sourceLabels returns the labels among l whose keys VirtualService
// sourceLabels name (nil when none): all a proxyless client's routes read
// of its labels.
func sourceLabels(s *Snapshot, l map[string]string) map[string]string {
	var out map[string]string
	for _, k := range s.sourceLabelKeys {
		if v, ok := l[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// keyOf is the group key of w, scoped by sidecar: the kind, namespace,
// Sidecar and workload policies, then the workload as its View shows it
// (visibleWorkload), each field the generators may read that is set. The
// id is left out: it names the proxy in errors only.
func keyOf(s *Snapshot, w Workload, sidecar *Sidecar) string {
	sc := "-"
	if sidecar != nil {
		sc = sidecar.Key()
	}
	var b strings.Builder
	b.WriteString(string(w.Kind) + "|" + w.Namespace + "|" + sc)
	if pk := s.WorkloadPolicyKey(w.Namespace, w.Labels); pk != "" {
		b.WriteString("|" + pk)
	}
	if w.Reads.Gateways {
		b.WriteString("|gateways=" + gatewayKey(s, w.Labels))
	}
	vw := visibleWorkload(s, w)
	if len(vw.Labels) > 0 {
		b.WriteString("|labels=" + LabelString(vw.Labels))
	}
	if len(vw.IPs) > 0 {
		b.WriteString("|ips=" + strings.Join(vw.IPs, ","))
	}
	if vw.WorkloadName != "" {
		b.WriteString("|workload=" + vw.WorkloadName)
	}
	if vw.Locality != "" {
		b.WriteString("|locality=" + vw.Locality)
	}
	return b.String()
}

// NewView returns w's View of s. What it derives from the snapshot is
// resolved once, on first use.
func NewView(s *Snapshot, w Workload) *View {
	return &View{snap: s, proxy: visibleWorkload(s, w), whole: w, sidecar: sidecarOf(s, w)}
}

func (v *View) resolve() {
	// VisibleServices' slice is the View's own: filtered in place.
	all := v.snap.VisibleServices(v.proxy.Namespace, v.sidecar)
	v.services = all[:0]
	for _, svc := range all {
		if v.serves(svc) {
			v.services = append(v.services, svc)
		}
	}
}

// ServicesOf returns the services among hosts the proxy sees and its kind
// can reach, in host order.
func (v *View) ServicesOf(hosts []string) []*Service {
	var out []*Service
	for _, h := range slices.Sorted(slices.Values(hosts)) {
		if svc := v.ServiceFor(h); svc != nil && v.serves(svc) {
			out = append(out, svc)
		}
	}
	return out
}

// ClustersOf returns the clusters of svcs: per port the proxy may reach,
// the service's own and one per named subset of its DestinationRule.
func (v *View) ClustersOf(svcs []*Service) []Cluster {
	var out []Cluster
	for _, svc := range svcs {
		dr := v.DestinationRule(svc)
		for _, port := range svc.Ports {
			if !v.reaches(svc, port.Number) {
				continue
			}
			out = append(out, Cluster{Service: svc, Port: port, DestinationRule: dr, LocalityLB: v.localityLB(dr, port.Number, "")})
			for _, ss := range dr.Subsets() {
				if ss.GetName() != "" {
					out = append(out, Cluster{Service: svc, Port: port, Subset: ss.GetName(), SubsetLabels: ss.GetLabels(), DestinationRule: dr,
						LocalityLB: v.localityLB(dr, port.Number, ss.GetName())})
				}
			}
		}
	}
	return out
}

// reaches applies the Sidecar's egress ports when the kind does
// (Reads.EgressPorts).
func (v *View) reaches(svc *Service, port uint32) bool {
	return !v.proxy.Reads.EgressPorts || egressAllows(v.sidecar, v.proxy.Namespace, svc, port)
}

// serves reports whether the proxy's kind can have clusters for svc: a
// resolvable, non-wildcard host (servable) when it needs one
// (Reads.Resolvable), else a service with ports.
func (v *View) serves(svc *Service) bool {
	if v.proxy.Reads.Resolvable {
		return servable(svc)
	}
	return len(svc.Ports) > 0
}

// servable reports whether a client that resolves no DNS and matches no
// wildcard can have a cluster for svc: a resolvable, non-wildcard host
// with ports.
func servable(svc *Service) bool {
	return svc.Resolution != ResolutionNone && len(svc.Ports) > 0 && !strings.HasPrefix(svc.Hostname, "*")
}

// egressAllows applies the port of each Sidecar egress listener: a listener
// with a port admits its hosts on that port only.
func egressAllows(sc *Sidecar, ns string, svc *Service, port uint32) bool {
	spec := sc.GetSpec()
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
			if (hns == "*" || hns == svc.Namespace) && HostMatches(host, svc.Hostname) {
				return true
			}
		}
	}
	return false
}

// GetSpec returns the Sidecar's spec, nil for no Sidecar.
func (s *Sidecar) GetSpec() *networking.Sidecar {
	if s == nil {
		return nil
	}
	return s.Spec
}

// Key is the group key (see View).
func (v *View) Key() string {
	v.keyOnce.Do(func() { v.key = keyOf(v.snap, v.whole, v.sidecar) })
	return v.key
}

// OutboundKey is the key of the View's scope-only part (see OutboundKey).
func (v *View) OutboundKey() string {
	return outboundKeyOf(v.snap, v.whole, v.sidecar)
}

// Workload is what the generators may read about the proxy.
func (v *View) Workload() Workload { return v.proxy }

// Sidecar is the Sidecar that scopes the proxy, or nil.
func (v *View) Sidecar() *Sidecar { return v.sidecar }

// Mesh is the mesh-wide settings.
func (v *View) Mesh() Mesh { return v.snap.Mesh }

// Telemetries returns the Telemetries that apply to the proxy's workload
// (Snapshot.TelemetriesFor).
func (v *View) Telemetries() []*Telemetry {
	return v.snap.TelemetriesFor(v.whole.Namespace, v.whole.Labels)
}

// Services are the services the proxy's clients may call and its kind can
// reach, sorted by host.
func (v *View) Services() []*Service {
	v.servicesOnce.Do(v.resolve)
	return v.services
}

// AllServices is every service of the snapshot, for the inbound side: the
// services whose endpoints are the proxy's own.
func (v *View) AllServices() []*Service { return v.snap.Services }

// Clusters are the proxy's outbound clusters: ClustersOf(Services()).
func (v *View) Clusters() []Cluster {
	v.clustersOnce.Do(func() { v.clusters = v.ClustersOf(v.Services()) })
	return v.clusters
}

// ServicePort is one port of a service.
type ServicePort struct {
	Service *Service
	Port    Port
}

// ReachablePorts are the service ports of the proxy's outbound clusters
// without their subsets, in the order of Clusters (services in host order,
// each one's ports in its order); they need no DestinationRule. The slice
// is shared: callers must not change it.
func (v *View) ReachablePorts() []ServicePort {
	v.reachOnce.Do(func() {
		v.reachable = make([]ServicePort, 0, len(v.Services())) // most services have one port
		for _, svc := range v.Services() {
			for _, port := range svc.Ports {
				if v.reaches(svc, port.Number) {
					v.reachable = append(v.reachable, ServicePort{Service: svc, Port: port})
				}
			}
		}
	})
	return v.reachable
}

// ServiceFor returns the service for host as the proxy sees it, or nil.
func (v *View) ServiceFor(host string) *Service {
	return v.snap.ServiceFor(host, v.proxy.Namespace, v.sidecar)
}

// VirtualServiceFor returns the VirtualService bound to host for the proxy.
func (v *View) VirtualServiceFor(host string) *VirtualService {
	return v.snap.VirtualServiceFor(host, v.proxy.Namespace)
}

// DestinationRule returns the DestinationRule of svc as the proxy sees it,
// or nil.
func (v *View) DestinationRule(svc *Service) *DestinationRule {
	return v.snap.DestinationRuleFor(svc.Hostname, v.proxy.Namespace, svc.Namespace)
}

// PeerAuthenticationMode is the mTLS mode of the proxy's workload port (0:
// the workload-wide mode).
func (v *View) PeerAuthenticationMode(port uint32) MTLSMode {
	return v.snap.PeerAuthenticationMode(v.proxy.Namespace, v.whole.Labels, port)
}

// AuthorizationPolicies are the policies that apply to the proxy's
// workload, in evaluation order.
func (v *View) AuthorizationPolicies() []*AuthorizationPolicy {
	return v.snap.AuthorizationPoliciesFor(v.proxy.Namespace, v.whole.Labels)
}

// UpstreamTLS is the client TLS toward cluster c (see Snapshot.UpstreamTLS).
func (v *View) UpstreamTLS(c Cluster, auto AutoMTLS) UpstreamTLS {
	return v.snap.UpstreamTLS(c.Service, c.Port, c.Subset, c.DestinationRule, auto)
}

// ServiceIdentities are the SPIFFE IDs svc's endpoints present.
func (v *View) ServiceIdentities(svc *Service) []string { return v.snap.ServiceIdentities(svc) }

// DestinationHost qualifies a route destination's host: a short name is in
// the VirtualService's namespace. Resolve and the incremental generator's
// "which hosts does this route reach" both use it.
func DestinationHost(host, vsNamespace string) string {
	return QualifyHost(host, vsNamespace)
}

// Resolve finds the cluster a route destination of vs names when the route
// serves port of host: its host qualified in the VirtualService's namespace,
// its port (DestinationPort) and subset. ok is false when the proxy has no
// cluster for that host, port or subset; the route keeps the destination
// all the same, under RouteCluster's name.
func (v *View) Resolve(host string, port uint32, vs *VirtualService, d *networking.Destination) (Cluster, bool) {
	dh := DestinationHost(d.GetHost(), vs.Namespace)
	return v.cluster(dh, v.DestinationPort(host, port, dh, d), d.GetSubset())
}

// DestinationPort is the port of the cluster a route destination names
// when the route serves port of host (the listener's port), as Istio's
// GetDestinationCluster picks it: the destination's port; else, for
// another host that the proxy sees with exactly one port, that port; else
// the route's own port. dh is the destination's qualified host.
func (v *View) DestinationPort(host string, port uint32, dh string, d *networking.Destination) uint32 {
	if p := d.GetPort().GetNumber(); p != 0 {
		return p
	}
	if dh != host {
		if svc := v.ServiceFor(dh); svc != nil && len(svc.Ports) == 1 {
			return svc.Ports[0].Number
		}
	}
	return port
}

// RouteCluster returns the name of the cluster a route destination of vs
// names when the route serves port of host, with the cluster when the
// proxy has it (Resolve). A destination whose host, port or subset the
// proxy has no cluster for is kept under the name Istio gives it,
// outbound|port|subset|host (GetDestinationCluster), which no cluster of
// the proxy has: its share of the traffic fails, and the proxy reports the
// missing cluster, as under Istio. MissingCluster tells such names from a
// generator's dangling reference in the checks of generated config.
func (v *View) RouteCluster(host string, port uint32, vs *VirtualService, d *networking.Destination) (string, Cluster, bool) {
	dh := DestinationHost(d.GetHost(), vs.Namespace)
	dport := v.DestinationPort(host, port, dh, d)
	if c, ok := v.cluster(dh, dport, d.GetSubset()); ok {
		return c.Name(), c, true
	}
	return ClusterName(dport, d.GetSubset(), dh), Cluster{}, false
}

// MissingCluster reports whether name is one RouteCluster gives a
// destination the proxy has no cluster for: Istio's outbound cluster name
// of a host, port and subset the proxy has no cluster for. Those are the
// only names a route generated from this View may name without a cluster
// of that name.
func (v *View) MissingCluster(name string) bool {
	rest, ok := strings.CutPrefix(name, "outbound|")
	if !ok {
		return false
	}
	port, rest, ok := strings.Cut(rest, "|")
	if !ok {
		return false
	}
	subset, host, ok := strings.Cut(rest, "|")
	if !ok || host == "" {
		return false
	}
	n, err := strconv.ParseUint(port, 10, 32)
	if err != nil || strconv.FormatUint(n, 10) != port {
		return false
	}
	_, has := v.cluster(host, uint32(n), subset)
	return !has
}

// cluster returns the cluster of host's port and subset, when the proxy
// has one: the host is visible and of a kind it reaches, the port is the
// service's (and allowed by the Sidecar's egress for an Envoy sidecar), and
// the subset is one of its DestinationRule's.
func (v *View) cluster(host string, port uint32, subset string) (Cluster, bool) {
	svc := v.ServiceFor(host)
	if svc == nil || !v.serves(svc) {
		return Cluster{}, false
	}
	p, ok := svc.Port(port)
	if !ok || !v.reaches(svc, port) {
		return Cluster{}, false
	}
	c := Cluster{Service: svc, Port: p, Subset: subset, DestinationRule: v.DestinationRule(svc)}
	if subset != "" {
		ss := c.DestinationRule.Subset(subset)
		if ss == nil {
			return Cluster{}, false
		}
		c.SubsetLabels = ss.GetLabels()
	}
	return c, true
}

// OwnCluster is the cluster of a service port without a subset (a route
// to the service itself); ok is false when the proxy has none.
func (v *View) OwnCluster(svc *Service, port uint32) (Cluster, bool) {
	return v.cluster(svc.Hostname, port, "")
}

// LabelString renders labels deterministically: k=v pairs sorted by key.
func LabelString(l map[string]string) string {
	keys := slices.Sorted(maps.Keys(l))
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + l[k])
	}
	return b.String()
}
