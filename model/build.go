package model

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/store"
	networking "istio.io/api/networking/v1alpha3"
)

// DefaultDomainSuffix completes short host names in VirtualServices,
// DestinationRules and Sidecars: name -> name.namespace.svc.cluster.local.
const DefaultDomainSuffix = "svc.cluster.local"

// Build turns a Store snapshot into a model Snapshot with DefaultMesh()
// settings. It is pure: it reads only its input and returns a new value that
// shares nothing mutable.
func Build(fs *store.Snapshot) *Snapshot { return BuildWith(fs, DefaultMesh()) }

// BuildWith is Build with mesh settings; zero fields take DefaultMesh()'s.
// A MeshConfig in the config (a source's mesh.yaml) replaces them, but for
// the root namespace and trust domain, which stay the control plane's.
func BuildWith(fs *store.Snapshot, mesh Mesh) *Snapshot {
	b := &builder{
		s: &Snapshot{
			Revision:   fs.Revision,
			Commit:     shortCommit(fs.Commit()),
			Mesh:       meshOf(fs, mesh).withDefaults(),
			baseMesh:   mesh,
			byHost:     make(map[string]hostRange),
			id:         &snapshotID{},
			source:     fs,
			vsByHost:   make(map[string][]*VirtualService),
			drByHost:   make(map[string][]*DestinationRule),
			sidecarsNS: make(map[string][]*Sidecar),
			paByNS:     make(map[string][]*PeerAuthentication),
			apByNS:     make(map[string][]*AuthorizationPolicy),
			wgByNS:     make(map[string][]*WorkloadGroup),
		},
	}
	b.indexWorkloadEntries(fs.List(store.KindWorkloadEntry))
	for _, o := range fs.List(store.KindServiceEntry) {
		b.addServiceEntry(o)
	}
	slices.SortFunc(b.s.Services, func(a, c *Service) int {
		return cmp.Or(cmp.Compare(a.Hostname, c.Hostname), cmp.Compare(a.Namespace, c.Namespace))
	})
	b.s.servicesOf = make(map[store.Key][]int)
	for i, svc := range b.s.Services {
		r, ok := b.s.byHost[svc.Hostname]
		if !ok {
			r.lo = i
		}
		r.hi = i + 1
		b.s.byHost[svc.Hostname] = r
		k := store.Key{Kind: store.KindServiceEntry, Namespace: svc.Namespace, Name: svc.Name}
		b.s.servicesOf[k] = append(b.s.servicesOf[k], i)
	}
	b.s.seIndex = indexSelectors(fs.List(store.KindServiceEntry))
	assignVIPs(b.s.Services)
	b.addRouting(fs)
	for _, o := range fs.List(store.KindSidecar) {
		b.addSidecar(o)
	}
	for _, o := range fs.List(store.KindGateway) {
		b.addGateway(o)
	}
	for _, o := range fs.List(store.KindPeerAuthentication) {
		b.addPeerAuthentication(o)
	}
	for _, o := range fs.List(store.KindAuthorizationPolicy) {
		b.addAuthorizationPolicy(o)
	}
	b.addWorkloadGroups(fs.List(store.KindWorkloadGroup))
	b.addAuthn(fs)
	for _, o := range fs.List(store.KindTelemetry) {
		b.addTelemetry(o)
	}
	b.sortProblems()
	return b.s
}

// addRouting adds the VirtualServices and DestinationRules and binds them
// to the services' hosts.
func (b *builder) addRouting(fs *store.Snapshot) {
	vss := fs.List(store.KindVirtualService)
	b.s.sourceLabelKeys = sourceLabelKeys(vss)
	ds := delegates{}
	for _, o := range vss {
		if vs, ok := o.Spec.(*networking.VirtualService); ok && len(vs.GetHosts()) == 0 {
			ds[delegateKey(o.Namespace, o.Name)] = o
		}
	}
	for _, o := range vss {
		b.addVirtualService(o, ds)
	}
	for _, o := range fs.List(store.KindDestinationRule) {
		b.addDestinationRule(o)
	}
	b.s.localityMatters = localityMatters(b.s.Mesh, b.s.DestinationRules)
	b.s.failoverLabelKeys = failoverLabelKeys(b.s.Mesh, b.s.DestinationRules)
	b.bindHosts()
}

// sourceLabelKeys returns the label keys the sourceLabels of the
// VirtualServices' HTTP, TLS and TCP matches name (delegates included),
// sorted.
func sourceLabelKeys(vss []*store.Object) []string {
	keys := map[string]bool{}
	add := func(l map[string]string) {
		for k := range l {
			keys[k] = true
		}
	}
	for _, o := range vss {
		vs, ok := o.Spec.(*networking.VirtualService)
		if !ok {
			continue
		}
		for _, r := range vs.GetHttp() {
			for _, m := range r.GetMatch() {
				add(m.GetSourceLabels())
			}
		}
		for _, r := range vs.GetTls() {
			for _, m := range r.GetMatch() {
				add(m.GetSourceLabels())
			}
		}
		for _, r := range vs.GetTcp() {
			for _, m := range r.GetMatch() {
				add(m.GetSourceLabels())
			}
		}
	}
	return slices.Sorted(maps.Keys(keys))
}

func (b *builder) sortProblems() {
	slices.SortFunc(b.s.Problems, func(a, c Problem) int {
		return cmp.Or(cmp.Compare(a.Object, c.Object), cmp.Compare(a.Message, c.Message))
	})
}

// shortCommit returns the first 12 characters of a git commit.
func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

type builder struct {
	s *Snapshot
	// weIndex maps namespace -> "key=value" -> WorkloadEntries carrying
	// that label, so selecting is proportional to the matches, not to all
	// entries in the namespace.
	weIndex map[string]map[labelKV][]*store.Object
	// weAll maps namespace -> every WorkloadEntry, for empty selectors.
	weAll map[string][]*store.Object
}

func (b *builder) problem(o *store.Object, format string, args ...any) {
	b.s.Problems = append(b.s.Problems, Problem{Object: o.Key.String(), Message: fmt.Sprintf(format, args...)})
}

func (b *builder) indexWorkloadEntries(list []*store.Object) {
	b.weIndex = make(map[string]map[labelKV][]*store.Object)
	b.weAll = make(map[string][]*store.Object)
	for _, o := range list {
		we, ok := o.Spec.(*networking.WorkloadEntry)
		if !ok {
			continue
		}
		b.weAll[o.Namespace] = append(b.weAll[o.Namespace], o)
		m := b.weIndex[o.Namespace]
		if m == nil {
			m = make(map[labelKV][]*store.Object)
			b.weIndex[o.Namespace] = m
		}
		// Istio selects on the WorkloadEntry's spec labels, falling back to
		// its metadata labels.
		for k, v := range workloadLabels(o, we) {
			m[labelKV{k, v}] = append(m[labelKV{k, v}], o)
		}
	}
}

// labelKV is one label, as an index key.
type labelKV struct{ k, v string }

// workloadLabels returns the labels a selector matches a WorkloadEntry on:
// its metadata labels overlaid with its spec labels.
func workloadLabels(o *store.Object, we *networking.WorkloadEntry) map[string]string {
	if len(o.Labels) == 0 {
		return we.GetLabels()
	}
	if len(we.GetLabels()) == 0 {
		return o.Labels
	}
	out := make(map[string]string, len(o.Labels)+len(we.GetLabels()))
	for k, v := range o.Labels {
		out[k] = v
	}
	for k, v := range we.GetLabels() {
		out[k] = v
	}
	return out
}

// selectWorkloadEntries returns the WorkloadEntries of ns that carry every
// selector label, in namespace/name order.
func (b *builder) selectWorkloadEntries(ns string, selector map[string]string) []*store.Object {
	if len(selector) == 0 {
		return b.weAll[ns]
	}
	// Start from the smallest candidate list (without an index, every
	// entry of the namespace).
	cands := b.weAll[ns]
	if b.weIndex != nil {
		first := true
		for k, v := range selector {
			l := b.weIndex[ns][labelKV{k, v}]
			if first || len(l) < len(cands) {
				cands, first = l, false
			}
		}
	}
	var out []*store.Object
	for _, o := range cands {
		if workloadMatches(selector, o, o.Spec.(*networking.WorkloadEntry)) {
			out = append(out, o)
		}
	}
	return out
}

// workloadMatches is LabelsMatch(selector, workloadLabels(o, we)) without
// building the merged labels (a selector scans every entry of a
// namespace): the entry's spec labels win over its metadata labels.
func workloadMatches(selector map[string]string, o *store.Object, we *networking.WorkloadEntry) bool {
	for k, v := range selector {
		lv, ok := we.GetLabels()[k]
		if !ok {
			lv, ok = o.Labels[k]
		}
		if !ok || lv != v {
			return false
		}
	}
	return true
}

// LabelsMatch reports whether labels carry every selector entry (an empty
// selector matches everything), the rule of every Istio workloadSelector.
func LabelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

func (b *builder) addServiceEntry(o *store.Object) {
	se, ok := o.Spec.(*networking.ServiceEntry)
	if !ok {
		b.problem(o, "spec is %T, want ServiceEntry", o.Spec)
		return
	}
	ports := make([]Port, 0, len(se.GetPorts()))
	for _, p := range se.GetPorts() {
		ports = append(ports, Port{Name: p.GetName(), Number: p.GetNumber(), Protocol: strings.ToUpper(p.GetProtocol()), TargetPort: p.GetTargetPort()})
	}
	slices.SortFunc(ports, func(a, c Port) int { return cmp.Compare(a.Number, c.Number) })

	eps := b.endpoints(o, se)
	res := Resolution(se.GetResolution())
	exportTo := normaliseExportTo(exportTo(se.GetExportTo(), b.s.Mesh.ExportTo.Services), o.Namespace)
	addrs := singleAddresses(se.GetAddresses())
	for _, h := range se.GetHosts() {
		svc := &Service{
			Hostname:        h,
			Namespace:       o.Namespace,
			Name:            o.Name,
			Ports:           ports,
			Resolution:      res,
			MeshExternal:    se.GetLocation() == networking.ServiceEntry_MESH_EXTERNAL,
			ExportTo:        exportTo,
			Addresses:       addrs,
			Endpoints:       eps,
			SubjectAltNames: se.GetSubjectAltNames(),
		}
		svc.Endpoints = hostEndpoints(o, se, h, eps)
		b.s.Services = append(b.s.Services, svc)
	}
}

// singleAddresses returns a ServiceEntry's addresses with a prefix of one
// address (192.0.2.10/32) written as that address, as Istio converts them:
// the service listens on the address rather than on 0.0.0.0 with a match.
func singleAddresses(addrs []string) []string {
	out := addrs
	for i, a := range addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil || p.Bits() != p.Addr().BitLen() {
			continue
		}
		if &out[0] == &addrs[0] {
			out = slices.Clone(addrs)
		}
		out[i] = p.Addr().String()
	}
	return out
}

// endpoints returns a ServiceEntry's endpoints before per-host rules: its
// inline endpoints and the healthy WorkloadEntries it selects, sorted by
// address, then origin.
func (b *builder) endpoints(o *store.Object, se *networking.ServiceEntry) []*Endpoint {
	var eps []*Endpoint
	// An endpoint with only a network and no address is reached through
	// that network's gateway, which vmesh does not have: it is left out
	// (filestore warns, VM1010), never sent as an empty address.
	for i, we := range se.GetEndpoints() {
		if we.GetAddress() == "" {
			continue
		}
		eps = append(eps, endpointFrom(we, we.GetLabels(), fmt.Sprintf("%s/%s#%d", o.Namespace, o.Name, i)))
	}
	if sel := se.GetWorkloadSelector(); sel != nil {
		for _, wo := range b.selectWorkloadEntries(o.Namespace, sel.GetLabels()) {
			if !healthy(wo) {
				continue
			}
			we := wo.Spec.(*networking.WorkloadEntry)
			if we.GetAddress() == "" {
				continue
			}
			eps = append(eps, endpointFrom(we, workloadLabels(wo, we), wo.Namespace+"/"+wo.Name))
		}
	}
	slices.SortFunc(eps, compareEndpoints)
	return eps
}

// hostEndpoints applies the per-host rules to a ServiceEntry's endpoints:
// a DNS entry without endpoints or selector resolves the host itself (as
// in Istio); NONE resolution has no endpoints.
func hostEndpoints(o *store.Object, se *networking.ServiceEntry, host string, eps []*Endpoint) []*Endpoint {
	res := Resolution(se.GetResolution())
	if (res == ResolutionDNS || res == ResolutionDNSRoundRobin) && len(eps) == 0 && se.GetWorkloadSelector() == nil && !strings.HasPrefix(host, "*") {
		return []*Endpoint{{Address: host, Origin: o.Namespace + "/" + o.Name + "#host"}}
	}
	if res == ResolutionNone {
		return nil
	}
	return eps
}

// healthy reports whether a WorkloadEntry counts as an endpoint: always,
// unless it has health checks enabled and is not known healthy.
func healthy(o *store.Object) bool {
	if !store.HealthChecksEnabled(o) {
		return true
	}
	return o.Healthy != nil && *o.Healthy
}

func endpointFrom(we *networking.WorkloadEntry, labels map[string]string, origin string) *Endpoint {
	return &Endpoint{
		Address:        we.GetAddress(),
		Ports:          we.GetPorts(),
		Labels:         labels,
		Locality:       we.GetLocality(),
		Weight:         we.GetWeight(),
		Network:        we.GetNetwork(),
		ServiceAccount: we.GetServiceAccount(),
		Origin:         origin,
	}
}

// normaliseExportTo resolves "." to the namespace, keeps "*", and returns nil
// for "~" (hidden). An empty list means "*".
func normaliseExportTo(in []string, ns string) []string {
	if len(in) == 0 {
		return []string{"*"}
	}
	var out []string
	for _, e := range in {
		switch e {
		case "~":
			return nil
		case ".":
			out = append(out, ns)
		default:
			out = append(out, e)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Visible reports whether config exported to exportTo can be seen from ns.
func Visible(exportTo []string, ns string) bool {
	for _, e := range exportTo {
		if e == "*" || e == ns {
			return true
		}
	}
	return false
}

// QualifyHost expands a short host name in namespace ns to
// name.ns.svc.cluster.local (DefaultDomainSuffix); "*" and names with a
// dot are kept.
func QualifyHost(host, ns string) string {
	if host == "*" || strings.Contains(host, ".") {
		return host
	}
	return host + "." + ns + "." + DefaultDomainSuffix
}

// AppliesToMesh reports whether a VirtualService with these gateways
// routes mesh clients: none named, or "mesh" among them.
func AppliesToMesh(gateways []string) bool {
	return len(gateways) == 0 || slices.Contains(gateways, "mesh")
}

// HostMatches reports whether pattern ("*", "*.suffix" or exact) matches host.
func HostMatches(pattern, host string) bool {
	switch {
	case pattern == "*":
		return true
	case strings.HasPrefix(pattern, "*"):
		return strings.HasSuffix(host, pattern[1:])
	}
	return pattern == host
}

func (b *builder) addVirtualService(o *store.Object, ds delegates) {
	vs, ok := o.Spec.(*networking.VirtualService)
	if !ok {
		b.problem(o, "spec is %T, want VirtualService", o.Spec)
		return
	}
	if len(vs.GetHosts()) == 0 {
		return // a delegate: used only through the root routes naming it
	}
	mesh, gateways := AppliesToMesh(vs.GetGateways()), gatewayNames(vs.GetGateways(), o.Namespace)
	if !mesh && len(gateways) == 0 {
		return
	}
	if isRoot(vs) {
		vs = b.merge(o, vs, ds)
	}
	m := &VirtualService{Namespace: o.Namespace, Name: o.Name, ExportTo: normaliseExportTo(exportTo(vs.GetExportTo(), b.s.Mesh.ExportTo.VirtualServices), o.Namespace), Gateways: gateways, Spec: vs,
		GatewaySemantics: o.Annotations[gatewayapi.RouteSemanticsAnnotation] == "gateway",
		FromTLSRoute:     strings.HasPrefix(o.Annotations[gatewayapi.ParentAnnotation], "TLSRoute/")}
	for _, h := range vs.GetHosts() {
		m.Hosts = append(m.Hosts, QualifyHost(h, o.Namespace))
	}
	if mesh {
		b.s.VirtualServices = append(b.s.VirtualServices, m)
	}
	if len(gateways) > 0 {
		b.s.GatewayVirtualServices = append(b.s.GatewayVirtualServices, m)
	}
}

func (b *builder) addDestinationRule(o *store.Object) {
	dr, ok := o.Spec.(*networking.DestinationRule)
	if !ok {
		b.problem(o, "spec is %T, want DestinationRule", o.Spec)
		return
	}
	if dr.GetWorkloadSelector() != nil {
		// Workload-scoped rules apply to server-side policy, not to clients.
		return
	}
	b.s.DestinationRules = append(b.s.DestinationRules, &DestinationRule{
		Namespace: o.Namespace, Name: o.Name, Host: QualifyHost(dr.GetHost(), o.Namespace),
		ExportTo: normaliseExportTo(exportTo(dr.GetExportTo(), b.s.Mesh.ExportTo.DestinationRules), o.Namespace), Spec: dr,
	})
}

func (b *builder) addSidecar(o *store.Object) {
	sc, ok := o.Spec.(*networking.Sidecar)
	if !ok {
		b.problem(o, "spec is %T, want Sidecar", o.Spec)
		return
	}
	m := &Sidecar{Namespace: o.Namespace, Name: o.Name, Spec: sc, Selector: sc.GetWorkloadSelector().GetLabels()}
	for _, l := range sc.GetEgress() {
		for _, h := range l.GetHosts() {
			ns, host, ok := strings.Cut(h, "/")
			if !ok {
				b.problem(o, "egress host %q is not namespace/host", h)
				continue
			}
			exclude := strings.HasPrefix(ns, "~")
			if exclude {
				ns = strings.TrimPrefix(ns, "~")
				if ns == "" {
					ns = "*"
				}
			}
			if ns == "." {
				ns = o.Namespace
			}
			m.Egress = append(m.Egress, EgressHost{Namespace: ns, Host: host, Exclude: exclude})
		}
	}
	if len(sc.GetEgress()) > 0 && m.Egress == nil {
		m.Egress = []EgressHost{} // egress given but empty: sees nothing
	}
	b.s.Sidecars = append(b.s.Sidecars, m)
	b.s.sidecarsNS[o.Namespace] = append(b.s.sidecarsNS[o.Namespace], m)
}

// bindHosts indexes VirtualServices and DestinationRules by every service host
// they match, exact matches first.
func (b *builder) bindHosts() {
	hosts := make([]string, 0, len(b.s.byHost))
	for h := range b.s.byHost {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	var wildVS []*VirtualService
	exactVS := make(map[string][]*VirtualService)
	for _, vs := range b.s.VirtualServices {
		for _, h := range vs.Hosts {
			if strings.HasPrefix(h, "*") {
				wildVS = append(wildVS, vs)
			} else {
				exactVS[h] = append(exactVS[h], vs)
			}
		}
	}
	var wildDR []*DestinationRule
	exactDR := make(map[string][]*DestinationRule)
	for _, dr := range b.s.DestinationRules {
		if strings.HasPrefix(dr.Host, "*") {
			wildDR = append(wildDR, dr)
		} else {
			exactDR[dr.Host] = append(exactDR[dr.Host], dr)
		}
	}
	for _, h := range hosts {
		vss := slices.Clone(exactVS[h])
		for _, vs := range wildVS {
			for _, p := range vs.Hosts {
				if strings.HasPrefix(p, "*") && HostMatches(p, h) && !slices.Contains(vss, vs) {
					vss = append(vss, vs)
					break
				}
			}
		}
		if len(vss) > 0 {
			b.s.vsByHost[h] = vss
		}
		drs := slices.Clone(exactDR[h])
		for _, dr := range wildDR {
			if HostMatches(dr.Host, h) {
				drs = append(drs, dr)
			}
		}
		if len(drs) > 0 {
			b.s.drByHost[h] = drs
		}
	}
}
