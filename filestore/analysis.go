package filestore

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// The analysis: like istioctl analyze, checks across the whole config set
// (a route's subset against the DestinationRules, a host against the
// ServiceEntries), which no single object can answer. It runs where the
// whole set is: on the Store's snapshot in the control plane (every
// source, registries included: Analyses), and on the files given to
// vmesh validate, analyze and diff (Analyze with complete false). It only
// warns; nothing it finds rejects config. Only objects read from files or
// git are warned about (they have a file:line to fix); registry and
// registration objects are what references resolve against.

// domainSuffix completes short host names as model.DefaultDomainSuffix does
// (filestore cannot import model).
const domainSuffix = "svc.cluster.local"

// qualifyHost expands a short host name in ns, as the model does.
func qualifyHost(host, ns string) string {
	if host == "*" || strings.Contains(host, ".") {
		return host
	}
	return host + "." + ns + "." + domainSuffix
}

// Analyze returns the warnings found across objs, sorted by file and line.
// complete says objs is every object the control plane would have; when it
// is false (files checked without the registries, which may define more
// hosts), a host no object defines is an info, not a warning.
func Analyze(objs []*store.Object, complete bool) []store.ConfigError {
	a := newAnalysis(objs, complete)
	for _, o := range objs {
		if o.Origin.File == "" {
			continue
		}
		switch spec := o.Spec.(type) {
		case *networking.VirtualService:
			a.virtualService(o, spec)
		case *networking.DestinationRule:
			a.destinationRule(o, spec)
		case *networking.WorkloadEntry:
			a.workloadEntry(o, spec)
		case *networking.WorkloadGroup:
			a.workloadGroup(o, spec)
		}
	}
	a.conflictingVirtualServices()
	a.sidecarsWithoutSelector()
	slices.SortFunc(a.out, func(x, y store.ConfigError) int {
		return cmp.Or(cmp.Compare(x.File, y.File), cmp.Compare(x.Line, y.Line), cmp.Compare(x.Field, y.Field), cmp.Compare(x.Code, y.Code), cmp.Compare(x.Object, y.Object))
	})
	return a.out
}

type analysis struct {
	complete bool
	hosts    map[string][]*store.Object // ServiceEntries by host
	// selectors indexes the ServiceEntries with a workloadSelector by
	// namespace and by each selector label (an empty selector under the
	// zero label).
	selectors map[string]map[label][]*store.Object
	drs       map[string][]*store.Object // DestinationRules by qualified host
	gateways  map[store.Key]bool
	// meshVS are the VirtualServices that apply to mesh clients, by
	// qualified host.
	meshVS map[string][]*store.Object
	// wholeSidecars are the Sidecars without a workloadSelector, by
	// namespace.
	wholeSidecars map[string][]*store.Object
	// delegates are the VirtualServices without hosts, which only root
	// routes' delegate: use.
	delegates map[store.Key]*store.Object
	out       []store.ConfigError
}

func newAnalysis(objs []*store.Object, complete bool) *analysis {
	a := &analysis{complete: complete, hosts: map[string][]*store.Object{}, selectors: map[string]map[label][]*store.Object{}, drs: map[string][]*store.Object{},
		gateways: map[store.Key]bool{}, meshVS: map[string][]*store.Object{}, wholeSidecars: map[string][]*store.Object{}, delegates: map[store.Key]*store.Object{}}
	for _, o := range objs {
		switch spec := o.Spec.(type) {
		case *networking.ServiceEntry:
			for _, h := range spec.GetHosts() {
				a.hosts[h] = append(a.hosts[h], o)
			}
			if sel := spec.GetWorkloadSelector(); sel != nil {
				idx := a.selectors[o.Namespace]
				if idx == nil {
					idx = map[label][]*store.Object{}
					a.selectors[o.Namespace] = idx
				}
				if len(sel.GetLabels()) == 0 {
					idx[label{}] = append(idx[label{}], o)
				}
				for k, v := range sel.GetLabels() {
					idx[label{k, v}] = append(idx[label{k, v}], o)
				}
			}
		case *networking.DestinationRule:
			if spec.GetWorkloadSelector() == nil {
				h := qualifyHost(spec.GetHost(), o.Namespace)
				a.drs[h] = append(a.drs[h], o)
			}
		case *networking.Gateway:
			a.gateways[o.Key] = true
		case *networking.Sidecar:
			if len(spec.GetWorkloadSelector().GetLabels()) == 0 {
				a.wholeSidecars[o.Namespace] = append(a.wholeSidecars[o.Namespace], o)
			}
		case *networking.VirtualService:
			if len(spec.GetHosts()) == 0 {
				a.delegates[o.Key] = o
			}
			if appliesToMesh(spec.GetGateways()) {
				for _, h := range spec.GetHosts() {
					q := qualifyHost(h, o.Namespace)
					a.meshVS[q] = append(a.meshVS[q], o)
				}
			}
		}
	}
	return a
}

// appliesToMesh reports whether a VirtualService with these gateways
// routes mesh clients: none named, or "mesh" among them.
func appliesToMesh(gateways []string) bool {
	return len(gateways) == 0 || slices.Contains(gateways, "mesh")
}

func (a *analysis) add(o *store.Object, field string, sev store.Severity, code, format string, args ...any) {
	a.out = append(a.out, store.ConfigError{File: o.Origin.File, Line: o.FieldLine(field), Object: clip(o.Key.String(), maxField), Field: field,
		Commit: o.Origin.Commit, Source: o.Origin.Source, Severity: sev, Code: code, Message: fmt.Sprintf(format, args...)}.Bounded())
}

// missingSeverity grades a host no object defines: a warning when the set
// is complete, an info when registries may define it.
func (a *analysis) missingSeverity() (store.Severity, string) {
	if a.complete {
		return store.SeverityWarning, ""
	}
	return store.SeverityInfo, "; checked without the registries, which may define it"
}

// hostDefined reports whether host (qualified, exact) is a ServiceEntry's,
// or a wildcard that matches one; for a short host that qualifies to no
// service while a ServiceEntry defines the short name itself, it warns
// VM2001 and reports true (one warning for one mistake).
func (a *analysis) hostDefined(o *store.Object, field, host string) bool {
	return a.hostDefinedAt(o, func() string { return field }, host)
}

// hostDefinedAt is hostDefined with the field written only for a warning.
func (a *analysis) hostDefinedAt(o *store.Object, field func() string, host string) bool {
	q := qualifyHost(host, o.Namespace)
	if len(a.hosts[q]) > 0 || q == "*" {
		return true
	}
	if strings.HasPrefix(q, "*") {
		for h := range a.hosts {
			if strings.HasSuffix(h, q[1:]) {
				return true
			}
		}
		return false
	}
	if q != host {
		if ses := a.hosts[host]; len(ses) > 0 {
			a.add(o, field(), store.SeverityWarning, store.CodeShortHostMismatch,
				"host %s qualifies to %s, which no ServiceEntry defines, while ServiceEntry %s/%s defines %s: this has no effect (write the same full name, e.g. %s, in both)",
				quote(host), quote(q), ses[0].Namespace, ses[0].Name, quote(host), quote(q))
			return true
		}
	}
	return false
}

func (a *analysis) virtualService(o *store.Object, vs *networking.VirtualService) {
	mesh := appliesToMesh(vs.GetGateways())
	for i, gw := range vs.GetGateways() {
		if gw == "mesh" {
			continue
		}
		ns, name, ok := strings.Cut(gw, "/")
		if !ok {
			ns, name = o.Namespace, gw
		}
		if !a.gateways[store.Key{Kind: store.KindGateway, Namespace: ns, Name: name}] {
			a.add(o, at("gateways", i), store.SeverityWarning, store.CodeReferencedResourceNotFound,
				"Referenced gateway not found: %s: the VirtualService does not apply to it (define Gateway %s/%s, or fix the name)", quote(ns+"/"+name), ns, name)
		}
	}
	if mesh {
		for i, h := range vs.GetHosts() {
			if !a.hostDefined(o, at("hosts", i), h) {
				sev, why := a.missingSeverity()
				a.add(o, at("hosts", i), sev, store.CodeHostNotDefined,
					"no ServiceEntry defines host %s: only Envoy sidecars use it, for requests with that Host on the HTTP ports of the VirtualService's other hosts (port 80 without them), as Istio's do; proxyless gRPC clients never (add a ServiceEntry, or fix the host)%s", quote(qualifyHost(h, o.Namespace)), why)
			}
		}
	}
	if mesh {
		a.tcpOnTLSPorts(o, vs)
	}
	for i, r := range vs.GetHttp() {
		if r.GetDelegate() != nil {
			a.delegate(o, i, r)
		}
		for j, d := range r.GetRoute() {
			a.destination(o, destPath{"http[%d].route[%d].destination", i, j}, d.GetDestination())
		}
		if m := r.GetMirror(); m != nil {
			a.destination(o, destPath{"http[%d].mirror", i, -1}, m)
		}
		for j, m := range r.GetMirrors() {
			a.destination(o, destPath{"http[%d].mirrors[%d].destination", i, j}, m.GetDestination())
		}
	}
	for i, r := range vs.GetTcp() {
		for j, d := range r.GetRoute() {
			a.destination(o, destPath{"tcp[%d].route[%d].destination", i, j}, d.GetDestination())
		}
	}
	for i, r := range vs.GetTls() {
		for j, d := range r.GetRoute() {
			a.destination(o, destPath{"tls[%d].route[%d].destination", i, j}, d.GetDestination())
		}
	}
}

// delegate checks a root route's delegate: a VirtualService without hosts
// that exists and is exported to the root's namespace; otherwise the route
// is dropped (model/delegate.go).
func (a *analysis) delegate(o *store.Object, i int, root *networking.HTTPRoute) {
	d := root.GetDelegate()
	ns := cmp.Or(d.GetNamespace(), o.Namespace)
	field := fmt.Sprintf("http[%d].delegate", i)
	do := a.delegates[store.Key{Kind: store.KindVirtualService, Namespace: ns, Name: d.GetName()}]
	if do == nil {
		a.add(o, field, store.SeverityWarning, store.CodeReferencedResourceNotFound,
			"Referenced delegate VirtualService not found: %s (a delegate has no hosts): the route is dropped", quote(ns+"/"+d.GetName()))
		return
	}
	if exp := exportTo(do); !slices.Contains(exp, "*") && !slices.Contains(exp, o.Namespace) {
		a.add(o, field, store.SeverityWarning, store.CodeDelegateNotExported,
			"delegate VirtualService %s is not exported to namespace %s: the route is dropped (add %s to its exportTo)", quote(ns+"/"+d.GetName()), o.Namespace, o.Namespace)
		return
	}
	for j, dr := range do.Spec.(*networking.VirtualService).GetHttp() {
		if _, ok := MergeDelegateRoute(root, proto.Clone(dr).(*networking.HTTPRoute)); !ok {
			a.add(o, field, store.SeverityWarning, store.CodeDelegateRouteConflicts,
				"route %d of delegate VirtualService %s matches nothing this route matches: it is dropped (narrow its match to within the root's)", j, quote(ns+"/"+d.GetName()))
		}
	}
}

// destPath is a destination's field path, written only for a warning.
type destPath struct {
	format string
	i, j   int
}

func (p destPath) String() string {
	if p.j < 0 {
		return fmt.Sprintf(p.format, p.i)
	}
	return fmt.Sprintf(p.format, p.i, p.j)
}

// destination checks a route destination's host and subset.
func (a *analysis) destination(o *store.Object, dp destPath, d *networking.Destination) {
	if d == nil || d.GetHost() == "" {
		return
	}
	host := qualifyHost(d.GetHost(), o.Namespace)
	if !a.hostDefinedAt(o, func() string { return dp.String() + ".host" }, d.GetHost()) {
		path := dp.String()
		sev, why := a.missingSeverity()
		a.add(o, path+".host", sev, store.CodeReferencedResourceNotFound,
			"Referenced host not found: %s: its share of the route fails, as in Istio (the route names a cluster that does not exist) (add a ServiceEntry, or fix the host)%s", quote(host), why)
		return
	}
	if port := d.GetPort().GetNumber(); port != 0 && !strings.HasPrefix(host, "*") && !a.hasPort(host, port) {
		a.add(o, dp.String()+".port.number", store.SeverityWarning, store.CodeReferencedResourceNotFound,
			"Referenced host:port not found: %s: no ServiceEntry for the host has port %d, so its share of the route fails, as in Istio (fix the port)", quote(fmt.Sprintf("%s:%d", host, port)), port)
	}
	subset := d.GetSubset()
	if subset == "" || strings.HasPrefix(host, "*") {
		return
	}
	path := dp.String()
	dr := a.destinationRuleFor(host, o.Namespace)
	if dr == nil {
		a.add(o, path+".subset", store.SeverityWarning, store.CodeReferencedResourceNotFound,
			"Referenced host+subset in destinationrule not found: %s: no DestinationRule is for host %s, so its share of the route fails, as in Istio (define the subset in a DestinationRule)", quote(host+"+"+subset), quote(host))
		return
	}
	for _, s := range dr.Spec.(*networking.DestinationRule).GetSubsets() {
		if s.GetName() == subset {
			return
		}
	}
	a.add(o, path+".subset", store.SeverityWarning, store.CodeReferencedResourceNotFound,
		"Referenced host+subset in destinationrule not found: %s: DestinationRule %s/%s has no subset %s, so its share of the route fails, as in Istio (add the subset, or fix the name)", quote(host+"+"+subset), dr.Namespace, dr.Name, quote(subset))
}

// tcpOnTLSPorts warns about a tcp route that would take a TLS or HTTPS port
// of a host the VirtualService names: sidecars route such a port by the
// tls routes only (as Istio's do), so the tcp route has no effect on it.
func (a *analysis) tcpOnTLSPorts(o *store.Object, vs *networking.VirtualService) {
routes:
	for i, r := range vs.GetTcp() {
		applies := func(port uint32) bool {
			if len(r.GetMatch()) == 0 {
				return true
			}
			return slices.ContainsFunc(r.GetMatch(), func(m *networking.L4MatchAttributes) bool { return m.GetPort() == 0 || m.GetPort() == port })
		}
		for _, h := range vs.GetHosts() {
			host := qualifyHost(h, o.Namespace)
			for _, se := range a.hosts[host] {
				for _, p := range se.Spec.(*networking.ServiceEntry).GetPorts() {
					if isTLSProtocol(p.GetProtocol()) && applies(p.GetNumber()) {
						a.add(o, at("tcp", i), store.SeverityWarning, store.CodeL4RouteNotApplied,
							"not applied to port %d of %s: it is a %s port, which sidecars route by the VirtualService's tls routes only, as Istio's do (write a tls route with sniHosts for it)",
							p.GetNumber(), quote(host), strings.ToUpper(p.GetProtocol()))
						continue routes
					}
				}
			}
		}
	}
}

// hasPort reports whether a ServiceEntry for host has port.
func (a *analysis) hasPort(host string, port uint32) bool {
	for _, se := range a.hosts[host] {
		for _, p := range se.Spec.(*networking.ServiceEntry).GetPorts() {
			if p.GetNumber() == port {
				return true
			}
		}
	}
	return len(a.hosts[host]) == 0 // a short-host mismatch, warned as such
}

// destinationRuleFor picks the DestinationRule of host for a client in ns
// as the model does: one in ns first, then in a ServiceEntry's namespace,
// then the first by namespace and name.
func (a *analysis) destinationRuleFor(host, ns string) *store.Object {
	cands := a.drs[host]
	if len(cands) == 0 {
		return nil
	}
	want := []string{ns}
	for _, se := range a.hosts[host] {
		want = append(want, se.Namespace)
	}
	for _, w := range want {
		for _, dr := range cands {
			if dr.Namespace == w {
				return dr
			}
		}
	}
	return slices.MinFunc(cands, store.CompareObjects)
}

func (a *analysis) destinationRule(o *store.Object, dr *networking.DestinationRule) {
	if dr.GetWorkloadSelector() != nil || strings.HasPrefix(dr.GetHost(), "*") {
		return
	}
	if !a.hostDefined(o, "host", dr.GetHost()) {
		sev, why := a.missingSeverity()
		a.add(o, "host", sev, store.CodeHostNotDefined,
			"no ServiceEntry defines host %s: the DestinationRule has no effect (add a ServiceEntry, or fix the host)%s", quote(qualifyHost(dr.GetHost(), o.Namespace)), why)
	}
}

// label is one label, as an index key.
type label struct{ k, v string }

// selected reports whether a ServiceEntry of ns selects labels: one with
// an empty selector, or one among those selecting one of the labels.
func (a *analysis) selected(ns string, labels map[string]string) bool {
	idx := a.selectors[ns]
	if len(idx[label{}]) > 0 {
		return true
	}
	for k, v := range labels {
		for _, se := range idx[label{k, v}] {
			if labelsMatch(se.Spec.(*networking.ServiceEntry).GetWorkloadSelector().GetLabels(), labels) {
				return true
			}
		}
	}
	return false
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

func (a *analysis) workloadEntry(o *store.Object, we *networking.WorkloadEntry) {
	labels := map[string]string{}
	for k, v := range o.Labels {
		labels[k] = v
	}
	for k, v := range we.GetLabels() {
		labels[k] = v
	}
	if !a.selected(o.Namespace, labels) {
		a.add(o, "", store.SeverityWarning, store.CodeWorkloadEntryUnselected,
			"no ServiceEntry in namespace %s selects this WorkloadEntry's labels {%s}: it is no service's endpoint (add a ServiceEntry whose workloadSelector matches, or fix the labels)", o.Namespace, labelString(labels))
	}
}

func (a *analysis) workloadGroup(o *store.Object, wg *networking.WorkloadGroup) {
	labels := map[string]string{}
	for k, v := range wg.GetTemplate().GetLabels() {
		labels[k] = v
	}
	for k, v := range wg.GetMetadata().GetLabels() {
		labels[k] = v
	}
	if !a.selected(o.Namespace, labels) {
		a.add(o, "metadata", store.SeverityWarning, store.CodeWorkloadGroupUnselected,
			"no ServiceEntry in namespace %s selects this WorkloadGroup's labels {%s}: the VMs that join it are no service's endpoints (add a ServiceEntry whose workloadSelector matches)", o.Namespace, labelString(labels))
	}
}

// conflictingVirtualServices warns IST0109 on each of two or more
// VirtualServices of the mesh gateway for one host that some namespace
// sees both of (exportTo): a client uses one (of its own namespace first,
// else the first by namespace and name), never a merge.
func (a *analysis) conflictingVirtualServices() {
	for host, list := range a.meshVS {
		if len(list) < 2 {
			continue
		}
		list = slices.CompactFunc(slices.SortedFunc(slices.Values(list), store.CompareObjects), func(x, y *store.Object) bool { return x.Key == y.Key })
		for i, o := range list {
			if o.Origin.File == "" {
				continue
			}
			names := []string{o.Namespace + "/" + o.Name}
			for j, other := range list {
				if i != j && seenTogether(exportTo(o), exportTo(other)) {
					names = append(names, other.Namespace+"/"+other.Name)
				}
			}
			if len(names) < 2 {
				continue
			}
			slices.Sort(names)
			vs := o.Spec.(*networking.VirtualService)
			field := "hosts"
			for k, h := range vs.GetHosts() {
				if qualifyHost(h, o.Namespace) == host {
					field = at("hosts", k)
					break
				}
			}
			a.add(o, field, store.SeverityWarning, store.CodeConflictingVirtualServices,
				"The VirtualServices %s associated with mesh gateway define the same host %s: a client uses one of them (its own namespace's, else the first by namespace/name), never both (merge them into one VirtualService)",
				strings.Join(names, ","), quote(host))
		}
	}
}

// sidecarsWithoutSelector warns IST0111 on each of two or more Sidecars
// without a workloadSelector in one namespace: the first by name applies to
// the namespace's other workloads, the rest to none.
func (a *analysis) sidecarsWithoutSelector() {
	for ns, list := range a.wholeSidecars {
		if len(list) < 2 {
			continue
		}
		list = slices.SortedFunc(slices.Values(list), store.CompareObjects)
		names := make([]string, len(list))
		for i, o := range list {
			names[i] = o.Name
		}
		for _, o := range list {
			if o.Origin.File != "" {
				a.add(o, "", store.SeverityWarning, store.CodeSidecarsWithoutSelector,
					"The Sidecars %s in namespace %s have no workload selector: vmesh uses %s for the namespace's workloads and ignores the others (keep one, or give the others a workloadSelector)",
					strings.Join(names, ","), quote(ns), quote(list[0].Name))
			}
		}
	}
}

// exportTo is where a VirtualService is visible: "*", namespaces, or
// nothing ("~"), as the model normalises it.
func exportTo(o *store.Object) []string {
	in := o.Spec.(*networking.VirtualService).GetExportTo()
	if len(in) == 0 {
		return []string{"*"}
	}
	var out []string
	for _, e := range in {
		switch e {
		case "~":
			return nil
		case ".":
			out = append(out, o.Namespace)
		default:
			out = append(out, e)
		}
	}
	return out
}

// seenTogether reports whether some namespace sees config exported to a
// and to b.
func seenTogether(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	if slices.Contains(a, "*") || slices.Contains(b, "*") {
		return true
	}
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// labelString renders labels as sorted k=v pairs.
func labelString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = k + "=" + l[k]
	}
	return strings.Join(keys, ", ")
}

// Analyses keeps the analysis of a Store's snapshots (every source's
// objects, so complete), computed again only after a change it reads: a
// registry's endpoint changes (WorkloadEntries from no file, which leave
// the snapshot's ConfigRevision) do not make it analyse 100,000 objects
// again. The zero value is ready; it is safe for concurrent use.
type Analyses struct {
	mu  sync.Mutex
	out []store.ConfigError
	of  *store.Snapshot
}

// Analysis returns the analysis of snap.
func (a *Analyses) Analysis(snap *store.Snapshot) []store.ConfigError {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.of != nil && a.of.ConfigRevision() == snap.ConfigRevision() {
		return a.out
	}
	objs := make([]*store.Object, 0, snap.Len())
	for _, k := range store.Kinds {
		objs = append(objs, snap.List(k)...)
	}
	a.out, a.of = Analyze(objs, true), snap
	return a.out
}

// Warnings returns every warning of snap: each source's own (its files')
// and the analysis across sources, in that order.
func (a *Analyses) Warnings(snap *store.Snapshot) []store.ConfigError {
	var out []store.ConfigError
	for _, st := range snap.Sources {
		for _, w := range st.Warnings {
			w.Source = st.Source
			out = append(out, w)
		}
	}
	return append(out, a.Analysis(snap)...)
}

// analysisLogEvery bounds how often LogAnalysis analyses the config: a
// registry that changes endpoints every 100 ms costs one analysis a second.
const analysisLogEvery = time.Second

// LogAnalysis logs the analysis of the store's config once per change
// (new warnings in one line, and how many cleared), not per push, until
// ctx ends: the first time at once (start it when the sources are ready),
// then at most once per analysisLogEvery while the config changes.
func LogAnalysis(ctx context.Context, st *store.Store, analyses *Analyses, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	sub := st.Subscribe()
	defer sub.Close()
	logged := map[string]bool{}
	logNow := func() {
		sub.Take()
		seen := map[string]bool{}
		var added []string
		for _, w := range analyses.Analysis(st.Snapshot()) {
			line := w.Error()
			seen[line] = true
			if !logged[line] {
				added = append(added, line)
			}
		}
		cleared := 0
		for line := range logged {
			if !seen[line] {
				cleared++
			}
		}
		logged = seen
		switch {
		case len(added) > 0:
			logger.Warn("config analysis warnings", "warnings", added, "cleared", cleared, "total", len(seen))
		case cleared > 0:
			logger.Info("config analysis warnings cleared", "cleared", cleared, "total", len(seen))
		}
	}
	logNow()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.C():
		}
		timer := time.NewTimer(analysisLogEvery)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		logNow()
	}
}
