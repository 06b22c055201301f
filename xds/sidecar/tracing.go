package sidecar

import (
	"fmt"
	"net/url"
	"sort"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	uuidv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/request_id/uuid/v3"
	envdetectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/tracers/opentelemetry/resource_detectors/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	tracingv3 "github.com/envoyproxy/go-control-plane/envoy/type/tracing/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	telemetryv1alpha1 "istio.io/api/telemetry/v1alpha1"

	"github.com/vmesh/vmesh/model"
)

// Envoy's tracer names (Istio's envoyZipkin, envoyOpenTelemetry).
const (
	zipkinTracer = "envoy.tracers.zipkin"
	otelTracer   = "envoy.tracers.opentelemetry"
)

// defaultTraceSampling is Istio's PILOT_TRACE_SAMPLING default: the
// percentage of requests traced when nothing sets one.
const defaultTraceSampling = 1.0

// Trace is what tracing sets on one HTTP connection manager: its tracing
// block (nil for none) and, when a Telemetry's useRequestIdForTraceSampling
// is false where tracing applies, that request ids do not decide sampling
// (Istio's UUIDRequestIDExtensionContext).
type Trace struct {
	Tracing             *hcmv3.HttpConnectionManager_Tracing
	NoRequestIDSampling bool
}

// apply sets the trace on h, whose istioHCM request id extension lets
// request ids decide sampling.
func (t Trace) apply(h *hcmv3.HttpConnectionManager) *hcmv3.HttpConnectionManager {
	h.Tracing = t.Tracing
	if t.NoRequestIDSampling {
		h.RequestIdExtension = &hcmv3.RequestIDExtension{TypedConfig: mustAny(&uuidv3.UuidRequestIdConfig{UseRequestIdForTraceSampling: wrapperspb.Bool(false)})}
	}
	return h
}

// Tracing is the trace of a router's HTTP connection managers (Istio's
// client spec, with upstream spans).
func Tracing(v *model.View) Trace { return hcmTracing(v, false) }

// TracingCollector is the host of the service a router's tracer sends
// spans to ("" for none): a router, which has the clusters of the services
// its routes name only, adds that service's.
func TracingCollector(v *model.View) string {
	spec := tracingSpec(v, false)
	if spec == nil || spec.Disabled || spec.Provider == nil {
		return ""
	}
	var service string
	var port uint32
	switch pr := spec.Provider.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Zipkin:
		service, port = pr.Zipkin.GetService(), pr.Zipkin.GetPort()
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Opentelemetry:
		service, port = pr.Opentelemetry.GetService(), pr.Opentelemetry.GetPort()
	default:
		return ""
	}
	host, _, err := ProviderCluster(v, service, port)
	if err != nil {
		return ""
	}
	return host
}

// hcmTracing returns the trace of one of the proxy's HTTP connection
// managers, as Istio's configureTracing sets it; server is the inbound side
// (Istio's server spec), else outbound or gateway (client spec).
func hcmTracing(v *model.View, server bool) Trace {
	spec := tracingSpec(v, server)
	t := tracingBlock(v, spec)
	// Istio's request id extension follows the spec only where a
	// Telemetry's tracing applies (a provider, span reporting on).
	return Trace{Tracing: t, NoRequestIDSampling: t != nil && spec != nil && !spec.UseRequestIDForTraceSampling}
}

// tracingBlock is the tracing block of the side spec is of (nil: the mesh
// config's own tracing), nil for none.
func tracingBlock(v *model.View, spec *model.TracingSpec) *hcmv3.HttpConnectionManager_Tracing {
	m := v.Mesh()
	if spec == nil {
		// No provider anywhere: Istio's "legacy" mesh config tracing, which
		// samples and tags but sends spans to the tracer of the
		// bootstrap (vmesh's agents write none).
		if m.Tracing.Disabled {
			return nil
		}
		t := &hcmv3.HttpConnectionManager_Tracing{}
		setSampling(t, proxySampling(m.Tracing.Proxy))
		t.CustomTags = customTags(v, m.Tracing.Proxy, nil, m.Tracing.Proxy.GetEnableIstioTags() == nil || m.Tracing.Proxy.GetEnableIstioTags().GetValue())
		if n := m.Tracing.Proxy.GetMaxPathTagLength(); n != 0 {
			t.MaxPathTagLength = wrapperspb.UInt32(n)
		}
		return t
	}
	if spec.Disabled || spec.Provider == nil {
		return nil
	}
	t, custom, err := providerTracing(v, spec.Provider)
	if err != nil {
		// Istio logs and leaves tracing out. filestore warns about a
		// provider of another kind; a service no config defines is not
		// reported yet.
		return nil
	}
	sampling := proxySampling(m.Tracing.Proxy)
	switch {
	case custom:
		sampling = 100 // the provider's sampler decides
	case spec.RandomSamplingPercentage != nil:
		sampling = *spec.RandomSamplingPercentage
	}
	setSampling(t, sampling)
	t.CustomTags = customTags(v, m.Tracing.Proxy, spec.CustomTags, spec.EnableIstioTags)
	if t.MaxPathTagLength == nil && m.Tracing.Proxy.GetMaxPathTagLength() != 0 {
		t.MaxPathTagLength = wrapperspb.UInt32(m.Tracing.Proxy.GetMaxPathTagLength())
	}
	t.NoContextPropagation = spec.DisableContextPropagation
	return t
}

// tracingSpec is the spec of one side of the proxy, as Istio's
// Telemetries.Tracing resolves it: the Telemetries that apply to the
// workload (root namespace, namespace, selector) over the mesh's
// defaultProviders.tracing; nil when neither sets any tracing (the mesh
// config's own tracing applies).
func tracingSpec(v *model.View, server bool) *model.TracingSpec {
	cfg := model.TelemetryTracing(v.Mesh(), v.Telemetries())
	if cfg == nil {
		return nil
	}
	if server && v.Workload().Kind != model.KindRouter {
		return &cfg.Server
	}
	return &cfg.Client
}

// proxySampling is defaultConfig.tracing.sampling (above 100: 1), else
// Istio's default.
func proxySampling(t *meshv1alpha1.Tracing) float64 {
	s := t.GetSampling()
	if s == 0 {
		return defaultTraceSampling
	}
	if s > 100 {
		return 1
	}
	return s
}

func setSampling(t *hcmv3.HttpConnectionManager_Tracing, random float64) {
	t.ClientSampling = &typev3.Percent{Value: 100}
	t.OverallSampling = &typev3.Percent{Value: 100}
	t.RandomSampling = &typev3.Percent{Value: random}
}

// providerTracing is the tracing block of a zipkin or opentelemetry
// extension provider (Istio's configureFromProviderConfig for a proxy of
// Istio 1.29 or later); custom reports a provider sampler. Its collector
// is the provider service's outbound cluster, which the proxy has as it
// has every visible service's.
func providerTracing(v *model.View, p *meshv1alpha1.MeshConfig_ExtensionProvider) (t *hcmv3.HttpConnectionManager_Tracing, custom bool, err error) {
	t = &hcmv3.HttpConnectionManager_Tracing{}
	if v.Workload().Kind == model.KindRouter {
		t.SpawnUpstreamSpan = wrapperspb.Bool(true)
	}
	var maxTag uint32
	switch pr := p.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Zipkin:
		z := pr.Zipkin
		host, cluster, err := ProviderCluster(v, z.GetService(), z.GetPort())
		if err != nil {
			return nil, false, err
		}
		path := z.GetPath()
		if path == "" {
			path = "/api/v2/spans"
		}
		timeout := z.GetTimeout()
		if timeout == nil {
			timeout = durationpb.New(5 * time.Second)
		}
		hs := &corev3.HttpService{HttpUri: &corev3.HttpUri{Uri: "http://" + host + path,
			HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster}, Timeout: timeout}}
		if hs2 := httpHeaders(z.GetHeaders()); len(hs2) > 0 {
			hs.RequestHeadersToAdd = hs2
		}
		tco := tracev3.ZipkinConfig_USE_B3
		if z.GetTraceContextOption() == meshv1alpha1.MeshConfig_ExtensionProvider_ZipkinTracingProvider_USE_B3_WITH_W3C_PROPAGATION {
			tco = tracev3.ZipkinConfig_USE_B3_WITH_W3C_PROPAGATION
		}
		zc := &tracev3.ZipkinConfig{
			CollectorEndpointVersion: tracev3.ZipkinConfig_HTTP_JSON,
			TraceId_128Bit:           !z.GetEnable_64BitTraceId(),
			SharedSpanContext:        wrapperspb.Bool(false),
			CollectorService:         hs,
			TraceContextOption:       tco,
		}
		maxTag = z.GetMaxTagLength()
		t.Provider = &tracev3.Tracing_Http{Name: zipkinTracer, ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: mustAny(zc)}}
	case *meshv1alpha1.MeshConfig_ExtensionProvider_Opentelemetry:
		o := pr.Opentelemetry
		host, cluster, err := ProviderCluster(v, o.GetService(), o.GetPort())
		if err != nil {
			return nil, false, err
		}
		w := v.Workload()
		oc := &tracev3.OpenTelemetryConfig{ServiceName: w.WorkloadName + "." + w.Namespace}
		if h := o.GetHttp(); h != nil {
			uri, err := url.JoinPath(host, h.GetPath())
			if err != nil {
				return nil, false, fmt.Errorf("otlp/http traces endpoint: %w", err)
			}
			oc.HttpService = &corev3.HttpService{HttpUri: &corev3.HttpUri{Uri: uri,
				HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster}, Timeout: h.GetTimeout()},
				RequestHeadersToAdd: httpHeaders(h.GetHeaders())}
		} else {
			var md []*corev3.HeaderValue
			for _, h := range o.GetGrpc().GetInitialMetadata() {
				md = append(md, &corev3.HeaderValue{Key: h.GetName(), Value: h.GetValue()})
			}
			oc.GrpcService = &corev3.GrpcService{
				TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: host}},
				Timeout:         o.GetGrpc().GetTimeout(), InitialMetadata: md,
			}
		}
		// Resource detectors, in Istio's order.
		if o.GetResourceDetectors().GetEnvironment() != nil {
			oc.ResourceDetectors = append(oc.ResourceDetectors, &corev3.TypedExtensionConfig{Name: "envoy.tracers.opentelemetry.resource_detectors.environment",
				TypedConfig: mustAny(&envdetectorv3.EnvironmentResourceDetectorConfig{})})
		}
		if o.GetResourceDetectors().GetDynatrace() != nil {
			oc.ResourceDetectors = append(oc.ResourceDetectors, &corev3.TypedExtensionConfig{Name: "envoy.tracers.opentelemetry.resource_detectors.dynatrace",
				TypedConfig: mustAny(&envdetectorv3.DynatraceResourceDetectorConfig{})})
		}
		// A provider sampler (Dynatrace) is not sent (filestore warns):
		// the sampling is the mesh's or the Telemetry's, not Istio's 100%
		// for the sampler to decide.
		maxTag = o.GetMaxTagLength()
		t.Provider = &tracev3.Tracing_Http{Name: otelTracer, ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: mustAny(oc)}}
	default:
		return nil, false, fmt.Errorf("extension provider %q: vmesh traces to zipkin and opentelemetry providers only", p.GetName())
	}
	if maxTag != 0 {
		t.MaxPathTagLength = wrapperspb.UInt32(maxTag)
	}
	return t, custom, nil
}

// ProviderCluster is the host and outbound cluster of an extension
// provider's service ("host" or "namespace/host") and port, as Istio's
// LookupCluster finds them.
func ProviderCluster(v *model.View, service string, port uint32) (host, cluster string, err error) {
	if port == 0 || port > 65535 {
		return "", "", fmt.Errorf("provider service %s: port must be in the range [1, 65535], found: %d", service, port)
	}
	h := service
	if _, after, ok := cutNamespace(service); ok {
		h = after
	}
	svc := v.ServiceFor(h)
	if svc == nil {
		return "", "", fmt.Errorf("provider service %s: no service defines it", service)
	}
	return svc.Hostname, model.ClusterName(port, "", svc.Hostname), nil
}

func cutNamespace(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}

func httpHeaders(hs []*meshv1alpha1.MeshConfig_ExtensionProvider_HttpHeader) []*corev3.HeaderValueOption {
	out := make([]*corev3.HeaderValueOption, 0, len(hs))
	for _, h := range hs {
		out = append(out, &corev3.HeaderValueOption{AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			Header: &corev3.HeaderValue{Key: h.GetName(), Value: h.GetValue()}})
	}
	return out
}

// customTags are Istio's tags (when istio: the workload's canonical
// revision and service, mesh, namespace and cluster, and the dry-run
// policy tags) with the Telemetry's tags, or without them the mesh
// config's defaultConfig.tracing.customTags, sorted by tag.
func customTags(v *model.View, proxy *meshv1alpha1.Tracing, telemetry map[string]*telemetryv1alpha1.Tracing_CustomTag, istio bool) []*tracingv3.CustomTag {
	var tags []*tracingv3.CustomTag
	if istio {
		tags = append(serviceTags(v.Workload()), policyTags()...)
	}
	if len(telemetry) == 0 {
		for name, ct := range proxy.GetCustomTags() {
			switch c := ct.GetType().(type) {
			case *meshv1alpha1.Tracing_CustomTag_Literal:
				tags = append(tags, literalTag(name, c.Literal.GetValue()))
			case *meshv1alpha1.Tracing_CustomTag_Header:
				tags = append(tags, &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_RequestHeader{RequestHeader: &tracingv3.CustomTag_Header{Name: c.Header.GetName(), DefaultValue: c.Header.GetDefaultValue()}}})
			case *meshv1alpha1.Tracing_CustomTag_Environment:
				tags = append(tags, &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Environment_{Environment: &tracingv3.CustomTag_Environment{Name: c.Environment.GetName(), DefaultValue: c.Environment.GetDefaultValue()}}})
			}
		}
	}
	for name, ct := range telemetry {
		switch c := ct.GetType().(type) {
		case *telemetryv1alpha1.Tracing_CustomTag_Literal:
			tags = append(tags, literalTag(name, c.Literal.GetValue()))
		case *telemetryv1alpha1.Tracing_CustomTag_Header:
			tags = append(tags, &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_RequestHeader{RequestHeader: &tracingv3.CustomTag_Header{Name: c.Header.GetName(), DefaultValue: c.Header.GetDefaultValue()}}})
		case *telemetryv1alpha1.Tracing_CustomTag_Environment:
			tags = append(tags, &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Environment_{Environment: &tracingv3.CustomTag_Environment{Name: c.Environment.GetName(), DefaultValue: c.Environment.GetDefaultValue()}}})
		case *telemetryv1alpha1.Tracing_CustomTag_Formatter:
			tags = append(tags, &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Value{Value: c.Formatter.GetValue()}})
		}
	}
	sort.SliceStable(tags, func(i, j int) bool { return tags[i].Tag < tags[j].Tag })
	return tags
}

func literalTag(name, value string) *tracingv3.CustomTag {
	return &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Literal_{Literal: &tracingv3.CustomTag_Literal{Value: value}}}
}

// serviceTags are Istio's buildServiceTags: the canonical revision and
// service from the workload's labels (latest, unknown without), the mesh
// and cluster IDs (vmesh has neither: unknown, as Istio without them) and
// the namespace.
func serviceTags(w model.Workload) []*tracingv3.CustomTag {
	rev, svc := w.Labels["service.istio.io/canonical-revision"], w.Labels["service.istio.io/canonical-name"]
	if rev == "" {
		rev = "latest"
	}
	if svc == "" {
		svc = "unknown"
	}
	ns := w.Namespace
	if ns == "" {
		ns = "default"
	}
	return []*tracingv3.CustomTag{
		literalTag("istio.canonical_revision", rev),
		literalTag("istio.canonical_service", svc),
		literalTag("istio.mesh_id", "unknown"),
		literalTag("istio.namespace", ns),
		literalTag("istio.cluster_id", "unknown"),
	}
}

// policyTags are Istio's dry-run AuthorizationPolicy tags: the shadow
// rules' results the RBAC filters leave in the request's metadata.
func policyTags() []*tracingv3.CustomTag {
	tag := func(name, key string) *tracingv3.CustomTag {
		return &tracingv3.CustomTag{Tag: name, Type: &tracingv3.CustomTag_Metadata_{Metadata: &tracingv3.CustomTag_Metadata{
			Kind: &metadatav3.MetadataKind{Kind: &metadatav3.MetadataKind_Request_{Request: &metadatav3.MetadataKind_Request{}}},
			MetadataKey: &metadatav3.MetadataKey{Key: "envoy.filters.http.rbac", Path: []*metadatav3.MetadataKey_PathSegment{
				{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: key}}}},
		}}}
	}
	return []*tracingv3.CustomTag{
		tag("istio.authorization.dry_run.allow_policy.name", "istio_dry_run_allow_shadow_effective_policy_id"),
		tag("istio.authorization.dry_run.allow_policy.result", "istio_dry_run_allow_shadow_engine_result"),
		tag("istio.authorization.dry_run.deny_policy.name", "istio_dry_run_deny_shadow_effective_policy_id"),
		tag("istio.authorization.dry_run.deny_policy.result", "istio_dry_run_deny_shadow_engine_result"),
	}
}
