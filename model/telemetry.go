package model

import (
	"slices"
	"strings"

	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// Telemetry is one Telemetry resource (telemetry.istio.io): the access
// logs, tracing and metrics of the workloads it applies to. A Telemetry
// of the root namespace without a selector applies to the mesh, one of a
// namespace without a selector to its namespace, one with a selector to
// the workloads of its namespace it selects (Istio's
// applicableTelemetries; targetRefs are not applied: filestore warns).
type Telemetry struct {
	Namespace string
	Name      string
	// Selector is the workload selector; empty: namespace-wide.
	Selector map[string]string
	// Spec is the resource's spec (never modified).
	Spec *telemetry.Telemetry
}

// Key returns "namespace/name".
func (t *Telemetry) Key() string { return t.Namespace + "/" + t.Name }

func (b *builder) addTelemetry(o *store.Object) {
	spec, ok := o.Spec.(*telemetry.Telemetry)
	if !ok {
		b.problem(o, "spec is %T, want Telemetry", o.Spec)
		return
	}
	if len(spec.GetTargetRefs()) > 0 || spec.GetTargetRef() != nil {
		// A Kubernetes Gateway or Service reference: vmesh has neither
		// (filestore warns, VM1023).
		return
	}
	t := &Telemetry{Namespace: o.Namespace, Name: o.Name, Selector: spec.GetSelector().GetMatchLabels(), Spec: spec}
	b.s.Telemetries = append(b.s.Telemetries, t)
	if b.s.tmByNS == nil {
		b.s.tmByNS = map[string][]*Telemetry{}
	}
	b.s.tmByNS[o.Namespace] = append(b.s.tmByNS[o.Namespace], t)
}

// TelemetriesFor returns the Telemetries that apply to a workload in ns
// with labels, in Istio's order (the later override the earlier): the
// root namespace's namespace-wide one, ns's namespace-wide one, then those
// of ns whose selector matches. Istio takes the oldest namespace-wide
// Telemetry of a namespace; vmesh, which has no creation times, the first
// by name.
func (s *Snapshot) TelemetriesFor(ns string, labels map[string]string) []*Telemetry {
	var out []*Telemetry
	wide := func(n string) {
		for _, t := range s.tmByNS[n] {
			if len(t.Selector) == 0 {
				out = append(out, t)
				return
			}
		}
	}
	wide(s.Mesh.RootNamespace)
	if ns != s.Mesh.RootNamespace {
		wide(ns)
	}
	for _, t := range s.tmByNS[ns] {
		if len(t.Selector) > 0 && LabelsMatch(t.Selector, labels) {
			out = append(out, t)
		}
	}
	return out
}

// telemetryKey names the Telemetries with a selector that select a
// workload in ns with labels ("" for none): part of its group keys, since
// they shape both its inbound and outbound listeners.
func (s *Snapshot) telemetryKey(ns string, labels map[string]string) string {
	var keys []string
	for _, t := range s.tmByNS[ns] {
		if len(t.Selector) > 0 && LabelsMatch(t.Selector, labels) {
			keys = append(keys, "tm:"+t.Key())
		}
	}
	return strings.Join(keys, ",")
}

func sameTelemetry(a, b *Telemetry) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && proto.Equal(a.Spec, b.Spec)
}

// builtinProviders are the extension providers Istio's default MeshConfig
// defines (pkg/config/mesh DefaultMeshConfig), which a mesh config's own
// providers of the same name replace: "envoy" logs to /dev/stdout in the
// mesh config's format.
var builtinProviders = []string{"prometheus", "stackdriver", "envoy"}

// TelemetryProvider returns the extension provider a Telemetry or
// defaultProviders names, as Istio's fetchProvider finds it (the name
// compared without case), else Istio's built-in provider of that name;
// nil for none.
func (m Mesh) TelemetryProvider(name string) *meshv1alpha1.MeshConfig_ExtensionProvider {
	if m.ExtensionProviders != nil {
		for _, p := range m.ExtensionProviders.List {
			if strings.EqualFold(p.GetName(), name) {
				return p
			}
		}
	}
	switch i := slices.IndexFunc(builtinProviders, func(b string) bool { return strings.EqualFold(b, name) }); i {
	case 0:
		return &meshv1alpha1.MeshConfig_ExtensionProvider{Name: "prometheus", Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_Prometheus{Prometheus: &meshv1alpha1.MeshConfig_ExtensionProvider_PrometheusMetricsProvider{}}}
	case 1:
		return &meshv1alpha1.MeshConfig_ExtensionProvider{Name: "stackdriver", Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_Stackdriver{Stackdriver: &meshv1alpha1.MeshConfig_ExtensionProvider_StackdriverProvider{}}}
	case 2:
		return &meshv1alpha1.MeshConfig_ExtensionProvider{Name: "envoy", Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLog{
			EnvoyFileAccessLog: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider{Path: "/dev/stdout"}}}
	}
	return nil
}

// TracingSpec is what decides one side's (client or server) tracing, as
// Istio's model.TracingSpec: the provider spans go to (nil: none, tracing
// off), the sampling and custom tags a Telemetry sets (nil: the mesh
// config's), whether Istio's own tags are added, whether the request id
// decides sampling, and whether span reporting is off.
type TracingSpec struct {
	Provider                     *meshv1alpha1.MeshConfig_ExtensionProvider
	RandomSamplingPercentage     *float64
	CustomTags                   map[string]*telemetry.Tracing_CustomTag
	EnableIstioTags              bool
	UseRequestIDForTraceSampling bool
	DisableContextPropagation    bool
	Disabled                     bool
}

// TracingConfig is a workload's tracing from its Telemetries and the
// mesh's defaultProviders.tracing (Istio's Telemetries.Tracing): the client
// side (outbound, gateways) and the server side (inbound).
type TracingConfig struct {
	Client, Server TracingSpec
}

// TelemetryTracing merges the tracing of tels (TelemetriesFor's order)
// over the mesh's default provider as Istio does; nil when neither sets
// any (the mesh config's own tracing then applies).
func TelemetryTracing(m Mesh, tels []*Telemetry) *TracingConfig {
	var entries []*telemetry.Tracing
	for _, t := range tels {
		entries = append(entries, t.Spec.GetTracing()...)
	}
	if len(entries) == 0 && m.Tracing.DefaultProvider == "" {
		return nil
	}
	client := TracingSpec{UseRequestIDForTraceSampling: true, EnableIstioTags: true}
	server := client
	if m.Tracing.DefaultProvider != "" {
		p := m.TelemetryProvider(m.Tracing.DefaultProvider)
		client.Provider, server.Provider = p, p
	}
	for _, e := range entries {
		if e == nil {
			continue
		}
		specs := []*TracingSpec{&client, &server}
		switch e.GetMatch().GetMode() {
		case telemetry.WorkloadMode_CLIENT:
			specs = specs[:1]
		case telemetry.WorkloadMode_SERVER:
			specs = specs[1:]
		}
		for _, s := range specs {
			if ps := e.GetProviders(); len(ps) > 0 {
				s.Provider = m.TelemetryProvider(ps[0].GetName())
			}
			if e.DisableSpanReporting != nil {
				s.Disabled = e.DisableSpanReporting.GetValue()
			}
			if e.CustomTags != nil {
				s.CustomTags = e.CustomTags
			}
			if e.RandomSamplingPercentage != nil {
				v := e.RandomSamplingPercentage.GetValue()
				s.RandomSamplingPercentage = &v
			}
			if e.UseRequestIdForTraceSampling != nil {
				s.UseRequestIDForTraceSampling = e.UseRequestIdForTraceSampling.GetValue()
			}
			if e.EnableIstioTags != nil {
				s.EnableIstioTags = e.EnableIstioTags.GetValue()
			}
			if e.DisableContextPropagation != nil {
				s.DisableContextPropagation = e.DisableContextPropagation.GetValue()
			}
		}
	}
	if client.Provider == nil {
		client.Disabled = true
	}
	if server.Provider == nil {
		server.Disabled = true
	}
	return &TracingConfig{Client: client, Server: server}
}

// LoggingConfig is one access log provider a workload's side logs to
// (Istio's LoggingConfig): the provider, the CEL filter expression of the
// Telemetry entry that named it ("" for none), and whether an entry
// disabled it.
type LoggingConfig struct {
	Provider *meshv1alpha1.MeshConfig_ExtensionProvider
	Filter   string
	Disabled bool
}

// TelemetryAccessLogs merges the access logging of tels (TelemetriesFor's
// order) over the mesh's defaultProviders.accessLogging for one side
// (server: inbound) as Istio's AccessLogging and mergeLogs do, sorted by
// provider name; nil when neither sets any (the mesh config's
// accessLogFile then applies). A provider name no extension provider has
// is left out, as Istio leaves it.
func TelemetryAccessLogs(m Mesh, tels []*Telemetry, server bool) []LoggingConfig {
	mode := telemetry.WorkloadMode_CLIENT
	if server {
		mode = telemetry.WorkloadMode_SERVER
	}
	var defaults []string
	if m.AccessLog.DefaultProviders != "" {
		defaults = strings.Split(m.AccessLog.DefaultProviders, ",")
	}
	var logs [][]*telemetry.AccessLogging
	for _, t := range tels {
		if l := t.Spec.GetAccessLogging(); len(l) > 0 {
			logs = append(logs, l)
		}
	}
	if len(logs) == 0 && len(defaults) == 0 {
		return nil
	}
	type spec struct {
		filter   string
		disabled bool
	}
	providers := map[string]spec{}
	if len(logs) == 0 {
		for _, d := range defaults {
			providers[d] = spec{}
		}
	} else {
		names := defaults
		filters := map[string]spec{}
		for _, l := range logs {
			var set []string
			for _, e := range l {
				if !matchMode(e.GetMatch(), mode) {
					continue
				}
				for _, p := range e.GetProviders() {
					if !slices.Contains(set, p.GetName()) {
						set = append(set, p.GetName())
					}
					filters[p.GetName()] = spec{filter: e.GetFilter().GetExpression()}
				}
			}
			if len(set) > 0 {
				names = set
			}
		}
		parent := defaults
		for _, l := range logs {
			for _, e := range l {
				ps := providerNames(e.GetProviders())
				if len(ps) == 0 {
					ps = parent
				}
				parent = ps
				for _, p := range ps {
					if !slices.Contains(names, p) || !matchMode(e.GetMatch(), mode) {
						continue
					}
					if e.GetDisabled().GetValue() {
						providers[p] = spec{disabled: true}
						continue
					}
					providers[p] = filters[p]
				}
			}
		}
	}
	var out []LoggingConfig
	for name, s := range providers {
		p := m.TelemetryProvider(name)
		if p == nil {
			continue
		}
		out = append(out, LoggingConfig{Provider: p, Filter: s.filter, Disabled: s.disabled})
	}
	slices.SortFunc(out, func(a, b LoggingConfig) int { return strings.Compare(a.Provider.GetName(), b.Provider.GetName()) })
	return out
}

func matchMode(sel *telemetry.AccessLogging_LogSelector, mode telemetry.WorkloadMode) bool {
	return sel == nil || sel.GetMode() == telemetry.WorkloadMode_CLIENT_AND_SERVER || sel.GetMode() == mode
}

func providerNames(ps []*telemetry.ProviderRef) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.GetName())
	}
	return out
}
