// Package analysis checks Istio config across objects, as istioctl analyze
// does (a route's subset against the DestinationRules, a host against the
// ServiceEntries), which no single object can answer. It runs on a built
// model Snapshot and asks the model's own rules (host qualification,
// exportTo, which DestinationRule a client uses, delegate merging, which
// ServiceEntry selects a workload), so a warning cannot disagree with what
// is served. It runs on every source's config in the control plane (Cache,
// Log), and on the files given to vmesh validate, analyze and diff (Objects,
// with complete false). It only warns; nothing it finds rejects config.
// Only objects read from files or git are warned about (they have a
// file:line to fix); registry and registration objects are what references
// resolve against.
package analysis

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// Analyze returns the warnings found across the config ms was built from,
// sorted by file and line. complete says it holds every object the control
// plane would have; when it is false (files checked without the
// registries, which may define more hosts), a host no object defines is an
// info, not a warning.
func Analyze(ms *model.Snapshot, complete bool) []store.ConfigError {
	out, _ := analyze(ms, complete, nil)
	return out
}

// selections remembers, for each WorkloadEntry object one analysis saw,
// whether a ServiceEntry of its model selected it: the next analysis of a
// model with the same selectors (model.Snapshot.SameSelectors) reuses the
// answer for every entry object it still holds.
type selections struct {
	of       *model.Snapshot
	selected map[*store.Object]bool
}

// analyze is Analyze taking the previous analysis' selections (nil: none)
// and returning this one's.
func analyze(ms *model.Snapshot, complete bool, prev *selections) ([]store.ConfigError, *selections) {
	a := newAnalysis(ms, complete)
	a.next = &selections{of: ms, selected: make(map[*store.Object]bool, len(a.objects.List(store.KindWorkloadEntry)))}
	if prev != nil && prev.of.SameSelectors(ms) {
		a.prev = prev.selected
	}
	for _, k := range []store.Kind{store.KindVirtualService, store.KindDestinationRule, store.KindWorkloadEntry, store.KindWorkloadGroup, store.KindGateway} {
		for _, o := range a.objects.List(k) {
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
			case *networking.Gateway:
				if !a.gatewayServed(spec) {
					sev, why := a.missingSeverity()
					a.add(o, "", sev, store.CodeGatewayNotServed,
						"no gateway VM: no WorkloadEntry has the labels selector %s asks for, so no router serves this Gateway, and VirtualServices bound to it route no one (run a router with those labels: vmesh agent --gateway, its WorkloadEntry carrying them)%s",
						gatewaySelector(spec), why)
				}
			}
		}
	}
	for _, o := range a.objects.List(store.KindTelemetry) {
		if spec, ok := o.Spec.(*telemetry.Telemetry); ok && o.Origin.File != "" {
			a.telemetryProviders(o, spec)
		}
	}
	a.conflictingVirtualServices()
	a.sidecarsWithoutSelector()
	a.telemetriesWithoutSelector()
	slices.SortFunc(a.out, func(x, y store.ConfigError) int {
		return cmp.Or(cmp.Compare(x.File, y.File), cmp.Compare(x.Line, y.Line), cmp.Compare(x.Field, y.Field), cmp.Compare(x.Code, y.Code), cmp.Compare(x.Object, y.Object))
	})
	return a.out, a.next
}

// Objects analyses objects as the control plane would hold them, built
// into a model snapshot with DefaultMesh() settings (and a MeshConfig
// among them): config (files, git) wins over others (a control plane's
// registry objects) for a key both define, and a key one of them defines
// twice keeps its first object (the loader reports the second).
func Objects(config, others []*store.Object, complete bool) ([]store.ConfigError, error) {
	first := func(objs []*store.Object) []*store.Object {
		seen := make(map[store.Key]bool, len(objs))
		return slices.DeleteFunc(slices.Clone(objs), func(o *store.Object) bool {
			dup := seen[o.Key]
			seen[o.Key] = true
			return dup
		})
	}
	config, others = first(config), first(others)
	st := store.NewStore()
	for _, set := range []struct {
		src  store.Source
		objs []*store.Object
	}{
		{store.Source{Name: "config", Class: store.ClassConfig}, config},
		{store.Source{Name: "others", Class: store.ClassRegistry}, others},
	} {
		if err := st.Replace(set.src, set.objs); err != nil {
			return nil, fmt.Errorf("analysis: %w", err)
		}
	}
	// The Gateway API routes become VirtualServices as the control
	// plane's gatewayapi.Writer makes them, analysed with the rest.
	gw := gatewayapi.Convert(st.Snapshot())
	if err := st.Replace(gatewayapi.Source(), gw.Objects); err != nil {
		return nil, fmt.Errorf("analysis: %w", err)
	}
	return append(gw.Warnings, Analyze(model.Build(st.Snapshot()), complete)...), nil
}

type analysis struct {
	complete bool
	ms       *model.Snapshot
	// objects are the objects ms was built from (their origins).
	objects *store.Snapshot
	// delegates are the VirtualServices without hosts, which only root
	// routes' delegate: use.
	delegates map[store.Key]*store.Object
	out       []store.ConfigError
	// prev is the previous analysis' selections when its model had the
	// same selectors (else nil); next collects this one's.
	prev map[*store.Object]bool
	next *selections
}

func newAnalysis(ms *model.Snapshot, complete bool) *analysis {
	a := &analysis{complete: complete, ms: ms, objects: ms.Source(), delegates: map[store.Key]*store.Object{}}
	for _, o := range a.objects.List(store.KindVirtualService) {
		if vs, ok := o.Spec.(*networking.VirtualService); ok && len(vs.GetHosts()) == 0 {
			a.delegates[o.Key] = o
		}
	}
	return a
}

// telemetryProviders names the providers a Telemetry's access logging and
// tracing entries name that vmesh's proxies do not use (VM1023): a name no
// extension provider (nor Istio's built-in envoy) has, an access log
// provider other than envoyFileAccessLog and envoyOtelAls, a tracing
// provider other than zipkin and opentelemetry. Metrics providers are warned about by
// filestore with the rest of metrics.
func (a *analysis) telemetryProviders(o *store.Object, t *telemetry.Telemetry) {
	if t.GetTargetRef() != nil || len(t.GetTargetRefs()) > 0 {
		return // ignored whole (filestore's VM1023)
	}
	m := a.ms.Mesh
	for i, l := range t.GetAccessLogging() {
		for j, p := range l.GetProviders() {
			field := at(at("accessLogging", i)+".providers", j)
			switch ep := m.TelemetryProvider(p.GetName()); {
			case ep == nil:
				a.add(o, field, store.SeverityWarning, store.CodeTelemetryFieldNotApplied, "no extensionProviders entry is named %q: nothing is logged to it (as Istio)", p.GetName())
			case ep.GetEnvoyFileAccessLog() == nil && ep.GetEnvoyOtelAls() == nil:
				a.add(o, field, store.SeverityWarning, store.CodeTelemetryFieldNotApplied, "provider %q is not applied: vmesh's Envoy proxies write access logs to envoyFileAccessLog and envoyOtelAls providers only", p.GetName())
			case ep.GetEnvoyOtelAls() != nil:
				a.providerService(o, field, p.GetName(), ep.GetEnvoyOtelAls().GetService(), "nothing is logged to it")
			}
		}
	}
	for i, tr := range t.GetTracing() {
		if len(tr.GetProviders()) == 0 {
			continue
		}
		p := tr.GetProviders()[0] // Istio uses the first (IST0133 for the rest)
		field := at(at("tracing", i)+".providers", 0)
		switch ep := m.TelemetryProvider(p.GetName()); {
		case ep == nil:
			a.add(o, field, store.SeverityWarning, store.CodeTelemetryFieldNotApplied, "no extensionProviders entry is named %q: tracing is off where this entry applies (as Istio)", p.GetName())
		case ep.GetZipkin() == nil && ep.GetOpentelemetry() == nil:
			a.add(o, field, store.SeverityWarning, store.CodeTelemetryFieldNotApplied, "provider %q is not applied: vmesh's Envoy proxies trace to zipkin and opentelemetry providers only; tracing is off where this entry applies", p.GetName())
		case ep.GetZipkin() != nil:
			a.providerService(o, field, p.GetName(), ep.GetZipkin().GetService(), "tracing is off where this entry applies")
		default:
			a.providerService(o, field, p.GetName(), ep.GetOpentelemetry().GetService(), "tracing is off where this entry applies")
		}
	}
}

// providerService names (VM1023) a provider a Telemetry names whose
// service ("host" or "namespace/host") no ServiceEntry defines: proxies
// have no cluster for it, so, as Istio's, they leave the log or tracer
// out (effect says what that means).
func (a *analysis) providerService(o *store.Object, field, name, service, effect string) {
	host := service
	if _, h, ok := strings.Cut(service, "/"); ok {
		host = h
	}
	if host == "" || len(a.ms.ServicesForHost(host)) > 0 {
		return
	}
	sev, note := a.missingSeverity()
	a.add(o, field, sev, store.CodeTelemetryFieldNotApplied, "provider %q sends to %s, which no ServiceEntry defines: %s (as Istio)%s", name, store.Quote(service), effect, note)
}

func (a *analysis) add(o *store.Object, field string, sev store.Severity, code, format string, args ...any) {
	a.out = append(a.out, store.ConfigError{File: o.Origin.File, Line: o.FieldLine(field), Object: store.Clip(o.Key.String(), store.MaxField), Field: field,
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
	q := model.QualifyHost(host, o.Namespace)
	if len(a.ms.ServicesForHost(q)) > 0 || q == "*" {
		return true
	}
	if strings.HasPrefix(q, "*") {
		return slices.ContainsFunc(a.ms.Services, func(svc *model.Service) bool { return strings.HasSuffix(svc.Hostname, q[1:]) })
	}
	if q != host {
		if ses := a.ms.ServicesForHost(host); len(ses) > 0 {
			a.add(o, field(), store.SeverityWarning, store.CodeShortHostMismatch,
				"host %s qualifies to %s, which no ServiceEntry defines, while ServiceEntry %s/%s defines %s: this has no effect (write the same full name, e.g. %s, in both)",
				store.Quote(host), store.Quote(q), ses[0].Namespace, ses[0].Name, store.Quote(host), store.Quote(q))
			return true
		}
	}
	return false
}

func (a *analysis) virtualService(o *store.Object, vs *networking.VirtualService) {
	mesh := model.AppliesToMesh(vs.GetGateways())
	for i, gw := range vs.GetGateways() {
		if gw == "mesh" {
			continue
		}
		ns, name, ok := strings.Cut(gw, "/")
		if !ok {
			ns, name = o.Namespace, gw
		}
		if a.objects.Get(store.Key{Kind: store.KindGateway, Namespace: ns, Name: name}) == nil {
			a.add(o, at("gateways", i), store.SeverityWarning, store.CodeReferencedResourceNotFound,
				"Referenced gateway not found: %s: the VirtualService does not apply to it (define Gateway %s/%s, or fix the name)", store.Quote(ns+"/"+name), ns, name)
		}
	}
	if !mesh && len(vs.GetGateways()) > 0 && !a.anyGatewayServed(o.Namespace, vs.GetGateways()) {
		sev, why := a.missingSeverity()
		a.add(o, "gateways", sev, store.CodeGatewayOnlyRoutes,
			"bound to gateways only, and none of them is served by a router (no gateway VM has the labels their selectors ask for): this VirtualService routes no one (run the gateway's router, or add \"mesh\" to gateways to route mesh clients)%s", why)
	}
	if mesh {
		for i, h := range vs.GetHosts() {
			if !a.hostDefined(o, at("hosts", i), h) {
				sev, why := a.missingSeverity()
				a.add(o, at("hosts", i), sev, store.CodeHostNotDefined,
					"no ServiceEntry defines host %s: only Envoy sidecars use it, for requests with that Host on the HTTP ports of the VirtualService's other hosts (port 80 without them), as Istio's do; proxyless gRPC clients never (add a ServiceEntry, or fix the host)%s", store.Quote(model.QualifyHost(h, o.Namespace)), why)
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
			"Referenced delegate VirtualService not found: %s (a delegate has no hosts): the route is dropped", store.Quote(ns+"/"+d.GetName()))
		return
	}
	if !model.DelegateExported(do, o.Namespace, a.ms.Mesh) {
		a.add(o, field, store.SeverityWarning, store.CodeDelegateNotExported,
			"delegate VirtualService %s is not exported to namespace %s: the route is dropped (add %s to its exportTo)", store.Quote(ns+"/"+d.GetName()), o.Namespace, o.Namespace)
		return
	}
	for j, dr := range do.Spec.(*networking.VirtualService).GetHttp() {
		if _, ok := model.MergeDelegateRoute(root, proto.Clone(dr).(*networking.HTTPRoute)); !ok {
			a.add(o, field, store.SeverityWarning, store.CodeDelegateRouteConflicts,
				"route %d of delegate VirtualService %s matches nothing this route matches: it is dropped (narrow its match to within the root's)", j, store.Quote(ns+"/"+d.GetName()))
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
	host := model.QualifyHost(d.GetHost(), o.Namespace)
	if !a.hostDefinedAt(o, func() string { return dp.String() + ".host" }, d.GetHost()) {
		path := dp.String()
		sev, why := a.missingSeverity()
		a.add(o, path+".host", sev, store.CodeReferencedResourceNotFound,
			"Referenced host not found: %s: its share of the route fails, as in Istio (the route names a cluster that does not exist) (add a ServiceEntry, or fix the host)%s", store.Quote(host), why)
		return
	}
	if port := d.GetPort().GetNumber(); port != 0 && !strings.HasPrefix(host, "*") && !a.hasPort(host, port) {
		a.add(o, dp.String()+".port.number", store.SeverityWarning, store.CodeReferencedResourceNotFound,
			"Referenced host:port not found: %s: no ServiceEntry for the host has port %d, so its share of the route fails, as in Istio (fix the port)", store.Quote(fmt.Sprintf("%s:%d", host, port)), port)
	}
	subset := d.GetSubset()
	if subset == "" || strings.HasPrefix(host, "*") {
		return
	}
	path := dp.String()
	dr := a.destinationRuleFor(host, o.Namespace)
	if dr == nil {
		a.add(o, path+".subset", store.SeverityWarning, store.CodeReferencedResourceNotFound,
			"Referenced host+subset in destinationrule not found: %s: no DestinationRule is for host %s, so its share of the route fails, as in Istio (define the subset in a DestinationRule)", store.Quote(host+"+"+subset), store.Quote(host))
		return
	}
	if dr.Subset(subset) != nil {
		return
	}
	a.add(o, path+".subset", store.SeverityWarning, store.CodeReferencedResourceNotFound,
		"Referenced host+subset in destinationrule not found: %s: DestinationRule %s/%s has no subset %s, so its share of the route fails, as in Istio (add the subset, or fix the name)", store.Quote(host+"+"+subset), dr.Namespace, dr.Name, store.Quote(subset))
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
			host := model.QualifyHost(h, o.Namespace)
			for _, svc := range a.ms.ServicesForHost(host) {
				for _, p := range svc.Ports {
					if p.IsTLS() && applies(p.Number) {
						a.add(o, at("tcp", i), store.SeverityWarning, store.CodeL4RouteNotApplied,
							"not applied to port %d of %s: it is a %s port, which sidecars route by the VirtualService's tls routes only, as Istio's do (write a tls route with sniHosts for it)",
							p.Number, store.Quote(host), p.Protocol)
						continue routes
					}
				}
			}
		}
	}
}

// hasPort reports whether a ServiceEntry for host has port.
func (a *analysis) hasPort(host string, port uint32) bool {
	svcs := a.ms.ServicesForHost(host)
	for _, svc := range svcs {
		for _, p := range svc.Ports {
			if p.Number == port {
				return true
			}
		}
	}
	return len(svcs) == 0 // a short-host mismatch, warned as such
}

// destinationRuleFor returns the DestinationRule a client in ns uses for
// host, as the model picks it (model.Snapshot.DestinationRuleFor) for the
// host's services, by namespace.
func (a *analysis) destinationRuleFor(host, ns string) *model.DestinationRule {
	svcs := a.ms.ServicesForHost(host)
	if len(svcs) == 0 {
		return a.ms.DestinationRuleFor(host, ns, "")
	}
	for _, svc := range svcs {
		if dr := a.ms.DestinationRuleFor(host, ns, svc.Namespace); dr != nil {
			return dr
		}
	}
	return nil
}

func (a *analysis) destinationRule(o *store.Object, dr *networking.DestinationRule) {
	if dr.GetWorkloadSelector() != nil || strings.HasPrefix(dr.GetHost(), "*") {
		return
	}
	if !a.hostDefined(o, "host", dr.GetHost()) {
		sev, why := a.missingSeverity()
		a.add(o, "host", sev, store.CodeHostNotDefined,
			"no ServiceEntry defines host %s: the DestinationRule has no effect (add a ServiceEntry, or fix the host)%s", store.Quote(model.QualifyHost(dr.GetHost(), o.Namespace)), why)
	}
}

func (a *analysis) workloadEntry(o *store.Object, we *networking.WorkloadEntry) {
	selected, known := a.prev[o]
	if !known {
		selected = a.ms.Selects(o.Namespace, entryLabels(o, we))
	}
	a.next.selected[o] = selected
	if !selected {
		labels := entryLabels(o, we)
		a.add(o, "", store.SeverityWarning, store.CodeWorkloadEntryUnselected,
			"no ServiceEntry in namespace %s selects this WorkloadEntry's labels {%s}: it is no service's endpoint (add a ServiceEntry whose workloadSelector matches, or fix the labels)", o.Namespace, labelString(labels))
	}
}

// entryLabels are a WorkloadEntry's labels: the spec's as they are when
// the object has none of its own (no copy for each of 100,000 entries),
// else both, the spec's winning.
func entryLabels(o *store.Object, we *networking.WorkloadEntry) map[string]string {
	if len(o.Labels) == 0 {
		return we.GetLabels()
	}
	labels := maps.Clone(o.Labels)
	maps.Copy(labels, we.GetLabels())
	return labels
}

func (a *analysis) workloadGroup(o *store.Object, wg *networking.WorkloadGroup) {
	labels := map[string]string{}
	for k, v := range wg.GetTemplate().GetLabels() {
		labels[k] = v
	}
	for k, v := range wg.GetMetadata().GetLabels() {
		labels[k] = v
	}
	if !a.ms.Selects(o.Namespace, labels) {
		a.add(o, "metadata", store.SeverityWarning, store.CodeWorkloadGroupUnselected,
			"no ServiceEntry in namespace %s selects this WorkloadGroup's labels {%s}: the VMs that join it are no service's endpoints (add a ServiceEntry whose workloadSelector matches)", o.Namespace, labelString(labels))
	}
}

// conflictingVirtualServices warns IST0109 on each of two or more
// VirtualServices of the mesh gateway for one host that some namespace
// sees both of (exportTo): a client uses one (of its own namespace first,
// else the first by namespace and name), never a merge.
func (a *analysis) conflictingVirtualServices() {
	byHost := map[string][]*model.VirtualService{}
	for _, vs := range a.ms.VirtualServices {
		for _, h := range slices.Compact(slices.Sorted(slices.Values(vs.Hosts))) {
			byHost[h] = append(byHost[h], vs)
		}
	}
	for host, list := range byHost {
		if len(list) < 2 {
			continue
		}
		for i, vs := range list {
			o := a.objects.Get(store.Key{Kind: store.KindVirtualService, Namespace: vs.Namespace, Name: vs.Name})
			if o == nil || o.Origin.File == "" {
				continue
			}
			names := []string{vs.Namespace + "/" + vs.Name}
			for j, other := range list {
				if i != j && seenTogether(vs.ExportTo, other.ExportTo) {
					names = append(names, other.Namespace+"/"+other.Name)
				}
			}
			if len(names) < 2 {
				continue
			}
			slices.Sort(names)
			field := "hosts"
			for k, h := range o.Spec.(*networking.VirtualService).GetHosts() {
				if model.QualifyHost(h, o.Namespace) == host {
					field = at("hosts", k)
					break
				}
			}
			a.add(o, field, store.SeverityWarning, store.CodeConflictingVirtualServices,
				"The VirtualServices %s associated with mesh gateway define the same host %s: a client uses one of them (its own namespace's, else the first by namespace/name), never both (merge them into one VirtualService)",
				strings.Join(names, ","), store.Quote(host))
		}
	}
}

// sidecarsWithoutSelector warns IST0111 on each of two or more Sidecars
// without a workloadSelector in one namespace: the first by name applies to
// the namespace's other workloads, the rest to none.
func (a *analysis) sidecarsWithoutSelector() {
	var whole []store.Key // model.Snapshot.Sidecars are sorted by namespace and name
	for _, sc := range a.ms.Sidecars {
		if len(sc.Selector) == 0 {
			whole = append(whole, store.Key{Kind: store.KindSidecar, Namespace: sc.Namespace, Name: sc.Name})
		}
	}
	a.severalWithoutSelector(whole, store.CodeSidecarsWithoutSelector,
		"The Sidecars %s in namespace %s have no workload selector: vmesh uses %s for the namespace's workloads and ignores the others (keep one, or give the others a workloadSelector)")
}

// telemetriesWithoutSelector reports the namespaces with several
// Telemetries without a selector (Istio's IST0160): vmesh applies the first
// by name to the namespace (or, in the root namespace, the mesh), Istio the
// oldest; the others apply to nothing.
func (a *analysis) telemetriesWithoutSelector() {
	var whole []store.Key // model.Snapshot.Telemetries are sorted by namespace and name
	for _, t := range a.ms.Telemetries {
		if len(t.Selector) == 0 {
			whole = append(whole, store.Key{Kind: store.KindTelemetry, Namespace: t.Namespace, Name: t.Name})
		}
	}
	a.severalWithoutSelector(whole, store.CodeTelemetriesWithoutSelector,
		"The Telemetries %s in namespace %s have no workload selector: vmesh applies %s and ignores the others (Istio the oldest; keep one, or give the others a selector)")
}

// severalWithoutSelector warns code on each object of keys (objects without
// a selector, sorted by namespace and name) that shares its namespace with
// another: format gets the names, the namespace and the one that applies
// (the first by name).
func (a *analysis) severalWithoutSelector(keys []store.Key, code, format string) {
	byNS := map[string][]store.Key{}
	for _, k := range keys {
		byNS[k.Namespace] = append(byNS[k.Namespace], k)
	}
	for ns, list := range byNS {
		if len(list) < 2 {
			continue
		}
		names := make([]string, len(list))
		for i, k := range list {
			names[i] = k.Name
		}
		for _, k := range list {
			if o := a.objects.Get(k); o != nil && o.Origin.File != "" {
				a.add(o, "", store.SeverityWarning, code, format, strings.Join(names, ","), store.Quote(ns), store.Quote(list[0].Name))
			}
		}
	}
}

// seenTogether reports whether some namespace sees config exported to a
// and to b (model.VirtualService.ExportTo: "*", namespaces, or none).
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

// at is a list element's field path: path[i].
func at(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

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

// Cache keeps the analysis of a Store's snapshots (every source's objects,
// so complete), each built into a model snapshot with its mesh settings,
// computed again only after a change it reads: a registry's endpoint
// changes (WorkloadEntries from no file, which leave the snapshot's
// ConfigRevision) do not make it build and analyse 100,000 objects again.
// The zero value uses DefaultMesh(); it is safe for concurrent use.
type Cache struct {
	mesh model.Mesh
	// models, when set, returns the model the control plane's Feed built
	// last; Analysis uses it when it was built from the snapshot analysed.
	models func() *model.Snapshot
	mu     sync.Mutex
	out    []store.ConfigError
	of     *store.Snapshot
	// served is servedGateways of the snapshot out was computed on.
	served string
	// selections are the WorkloadEntries' selections of out's analysis.
	selections *selections
}

// NewCache returns a Cache that builds the model with mesh, as the control
// plane's model.Feed does.
func NewCache(mesh model.Mesh) *Cache { return &Cache{mesh: mesh} }

// Analysis returns the analysis of snap.
func (c *Cache) Analysis(snap *store.Snapshot) []store.ConfigError {
	c.mu.Lock()
	defer c.mu.Unlock()
	served := servedGateways(snap)
	if c.of != nil && c.of.ConfigRevision() == snap.ConfigRevision() && c.served == served {
		return HoldBack(c.out, Broken(snap))
	}
	c.out, c.selections = analyze(c.model(snap), true, c.selections)
	c.of, c.served = snap, served
	return HoldBack(c.out, Broken(snap))
}

// ModelsFrom makes Analysis take the model of a snapshot from latest (the
// control plane's model.Feed.Latest, built with the same mesh settings)
// when latest's was built from that very snapshot: a Feed rebuilds only
// what a change touched, where BuildWith builds every service again (on an
// endpoint change at 1,000 services × 10 endpoints, most of the analysis'
// CPU). Call it before the Cache is used.
func (c *Cache) ModelsFrom(latest func() *model.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.models = latest
}

// model returns the model of snap: latest's when it is snap's, else built.
func (c *Cache) model(snap *store.Snapshot) *model.Snapshot {
	if c.models != nil {
		if m := c.models(); m != nil && m.Revision == snap.Revision {
			return m
		}
	}
	return model.BuildWith(snap, c.mesh)
}

// servedGateways says, one byte per Gateway of snap in its order, whether
// a WorkloadEntry's labels match the Gateway's selector (gatewayServed):
// a gateway VM's agent registers its WorkloadEntry, which leaves the
// ConfigRevision, and VM1008 and VM1009 follow it. Nothing, at no cost,
// without Gateways.
func servedGateways(snap *store.Snapshot) string {
	gws := snap.List(store.KindGateway)
	if len(gws) == 0 {
		return ""
	}
	wes := snap.List(store.KindWorkloadEntry)
	out := make([]byte, len(gws))
	for i, o := range gws {
		out[i] = '0'
		gw, ok := o.Spec.(*networking.Gateway)
		if !ok {
			continue
		}
		for _, w := range wes {
			if we, ok := w.Spec.(*networking.WorkloadEntry); ok && model.LabelsMatch(gw.GetSelector(), we.GetLabels()) {
				out[i] = '1'
				break
			}
		}
	}
	return string(out)
}

// Broken lists the files config sources report errors for and hold no
// object of (they failed to decode and have no last good version), as
// "source file", sorted; nothing, at no cost, when no source has an error.
func Broken(snap *store.Snapshot) []string {
	bad := map[[2]string]bool{}
	for _, st := range snap.Sources {
		for _, e := range st.Errors {
			if e.File != "" {
				bad[[2]string{st.Source, e.File}] = true
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	for _, k := range store.Kinds {
		for _, o := range snap.List(k) {
			delete(bad, [2]string{o.Origin.Source, o.Origin.File})
		}
	}
	out := make([]string, 0, len(bad))
	for k := range bad {
		out = append(out, k[1])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// missingCauses reports whether a finding may be caused by an object
// that is missing: a reference to something no object defines, or an
// object nothing selects.
func missingCauses(code string) bool {
	switch code {
	case store.CodeReferencedResourceNotFound, store.CodeShortHostMismatch, store.CodeHostNotDefined,
		store.CodeWorkloadEntryUnselected, store.CodeWorkloadGroupUnselected, store.CodeDelegateNotExported:
		return true
	}
	return false
}

// HoldBack drops, while files failed to decode and define no object
// (broken), the findings a missing object may cause: they may be about
// the broken files' objects ("X references unknown Y" cascading from one
// syntax error). It says so once: one warning naming the files and how
// many findings it held back.
func HoldBack(found []store.ConfigError, broken []string) []store.ConfigError {
	if len(broken) == 0 {
		return found
	}
	out := make([]store.ConfigError, 0, len(found))
	held := 0
	for _, f := range found {
		if missingCauses(f.Code) {
			held++
			continue
		}
		out = append(out, f)
	}
	if held == 0 {
		return out
	}
	return append(out, store.ConfigError{Severity: store.SeverityWarning, Code: store.CodeAnalysisHeldBack,
		Message: fmt.Sprintf("%d cross-object finding(s) (unknown references, unselected workloads) held back while %s failed to decode: they may be about its objects; fix it to see them",
			held, strings.Join(broken, ", "))})
}

// Warnings returns every warning of snap: each source's own (its files')
// and the analysis across sources, in that order.
func (c *Cache) Warnings(snap *store.Snapshot) []store.ConfigError {
	var out []store.ConfigError
	for _, st := range snap.Sources {
		for _, w := range st.Warnings {
			w.Source = st.Source
			out = append(out, w)
		}
	}
	return append(out, c.Analysis(snap)...)
}

// analysisLogEvery bounds how often Log analyses the config: a
// registry that changes endpoints every 100 ms costs one analysis a second.
const analysisLogEvery = time.Second

// Log logs the analysis of the store's config once per change
// (new warnings in one line, and how many cleared), not per push, until
// ctx ends: the first time at once (start it when the sources are ready),
// then at most once per analysisLogEvery while the config changes.
func Log(ctx context.Context, st *store.Store, cache *Cache, logger *slog.Logger) error {
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
		for _, w := range cache.Analysis(st.Snapshot()) {
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

// gatewayServed reports whether a router serves gw: a gateway VM, which is a
// WorkloadEntry (written in config or registered by a VM's agent) whose
// labels gw's selector matches, as the router running on that VM sends
// them in its node. A Gateway without selector applies to every router:
// served when any WorkloadEntry exists.
func (a *analysis) gatewayServed(gw *networking.Gateway) bool {
	sel := gw.GetSelector()
	for _, o := range a.objects.List(store.KindWorkloadEntry) {
		we, ok := o.Spec.(*networking.WorkloadEntry)
		if ok && model.LabelsMatch(sel, we.GetLabels()) {
			return true
		}
	}
	return false
}

// anyGatewayServed reports whether one of the gateways a VirtualService in
// ns names (its "mesh" aside) exists and is served by a router.
func (a *analysis) anyGatewayServed(ns string, gateways []string) bool {
	for _, g := range gateways {
		if g == "mesh" {
			continue
		}
		gns, name, _ := strings.Cut(model.ResolveGatewayName(g, ns), "/")
		o := a.objects.Get(store.Key{Kind: store.KindGateway, Namespace: gns, Name: name})
		if o == nil {
			continue
		}
		if gw, ok := o.Spec.(*networking.Gateway); ok && a.gatewayServed(gw) {
			return true
		}
	}
	return false
}

// gatewaySelector renders a Gateway's selector for a message.
func gatewaySelector(gw *networking.Gateway) string {
	if len(gw.GetSelector()) == 0 {
		return "{} (every router)"
	}
	return "{" + labelString(gw.GetSelector()) + "}"
}
