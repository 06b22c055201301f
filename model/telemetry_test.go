package model_test

import (
	"slices"
	"testing"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	telemetry "istio.io/api/telemetry/v1alpha1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

func tm(ns, name string, sel map[string]string, spec *telemetry.Telemetry) *store.Object {
	if sel != nil {
		spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
	}
	return secObj(store.KindTelemetry, ns, name, spec)
}

func providers(names ...string) []*telemetry.ProviderRef {
	var out []*telemetry.ProviderRef
	for _, n := range names {
		out = append(out, &telemetry.ProviderRef{Name: n})
	}
	return out
}

// Telemetries apply as Istio's applicableTelemetries resolves them: the
// root namespace's namespace-wide one, the workload namespace's, then the
// selector ones of the workload's namespace; targetRefs ones apply to
// none. A selector Telemetry splits proxy groups (outbound too).
func TestTelemetriesFor(t *testing.T) {
	target := tm("shop", "gw", nil, &telemetry.Telemetry{TargetRefs: []*typev1beta1.PolicyTargetReference{{Kind: "Service", Name: "cart"}}})
	s := build(t,
		tm("istio-system", "mesh-default", nil, &telemetry.Telemetry{}),
		tm("istio-system", "root-cart", map[string]string{"app": "cart"}, &telemetry.Telemetry{}),
		tm("shop", "a-ns", nil, &telemetry.Telemetry{}),
		tm("shop", "b-ns", nil, &telemetry.Telemetry{}),
		tm("shop", "cart", map[string]string{"app": "cart"}, &telemetry.Telemetry{}),
		target,
	)
	keys := func(l []*model.Telemetry) []string {
		var out []string
		for _, x := range l {
			out = append(out, x.Key())
		}
		return out
	}
	if got, want := keys(s.TelemetriesFor("shop", map[string]string{"app": "cart"})), []string{"istio-system/mesh-default", "shop/a-ns", "shop/cart"}; !slices.Equal(got, want) {
		t.Errorf("cart: %v, want %v", got, want)
	}
	if got, want := keys(s.TelemetriesFor("istio-system", map[string]string{"app": "cart"})), []string{"istio-system/mesh-default", "istio-system/root-cart"}; !slices.Equal(got, want) {
		t.Errorf("root namespace workload: %v, want %v", got, want)
	}
	cart := model.Workload{Kind: model.KindSidecar, Namespace: "shop", Labels: map[string]string{"app": "cart"}}
	web := model.Workload{Kind: model.KindSidecar, Namespace: "shop", Labels: map[string]string{"app": "web"}}
	if model.OutboundKey(s, cart) == model.OutboundKey(s, web) || model.ViewKey(s, cart) == model.ViewKey(s, web) {
		t.Error("a selector Telemetry does not split the group keys")
	}
}

// Tracing merges as Istio's Telemetries.Tracing: later Telemetries
// override field by field, a match mode picks a side, and with no
// provider the side is disabled.
func TestTelemetryTracing(t *testing.T) {
	m := model.DefaultMesh()
	if model.TelemetryTracing(m, nil) != nil {
		t.Fatal("no Telemetry, no default provider: want nil (the mesh config's tracing)")
	}
	m.ExtensionProviders = &model.ExtensionProviders{List: []*meshv1alpha1.MeshConfig_ExtensionProvider{{Name: "zipkin"}, {Name: "otel"}}}
	m.Tracing.DefaultProvider = "zipkin"
	tels := []*model.Telemetry{
		{Spec: &telemetry.Telemetry{Tracing: []*telemetry.Tracing{{RandomSamplingPercentage: wrapperspb.Double(10),
			CustomTags: map[string]*telemetry.Tracing_CustomTag{"team": {Type: &telemetry.Tracing_CustomTag_Literal{Literal: &telemetry.Tracing_Literal{Value: "a"}}}}}}}},
		{Spec: &telemetry.Telemetry{Tracing: []*telemetry.Tracing{{Match: &telemetry.Tracing_TracingSelector{Mode: telemetry.WorkloadMode_SERVER},
			Providers: providers("OTEL"), DisableSpanReporting: wrapperspb.Bool(true)}}}},
	}
	c := model.TelemetryTracing(m, tels)
	if c.Client.Provider.GetName() != "zipkin" || c.Client.Disabled || *c.Client.RandomSamplingPercentage != 10 || len(c.Client.CustomTags) != 1 || !c.Client.EnableIstioTags {
		t.Errorf("client %+v", c.Client)
	}
	if c.Server.Provider.GetName() != "otel" || !c.Server.Disabled || *c.Server.RandomSamplingPercentage != 10 {
		t.Errorf("server %+v", c.Server)
	}
	m.Tracing.DefaultProvider = ""
	if c := model.TelemetryTracing(m, tels[:1]); !c.Client.Disabled || c.Client.Provider != nil {
		t.Errorf("no provider anywhere: %+v, want disabled", c.Client)
	}
}

// Access logging merges as Istio's mergeLogs: a Telemetry's providers
// replace the defaults, a later entry without providers disables its
// parent's, a match mode picks a side, the filter goes with the provider,
// and the built-in "envoy" provider exists without a mesh config.
func TestTelemetryAccessLogs(t *testing.T) {
	m := model.DefaultMesh()
	if model.TelemetryAccessLogs(m, nil, false) != nil {
		t.Fatal("no Telemetry, no default provider: want nil (accessLogFile)")
	}
	mesh := &model.Telemetry{Spec: &telemetry.Telemetry{AccessLogging: []*telemetry.AccessLogging{{Providers: providers("envoy"),
		Filter: &telemetry.AccessLogging_Filter{Expression: "response.code >= 400"}}}}}
	got := model.TelemetryAccessLogs(m, []*model.Telemetry{mesh}, false)
	if len(got) != 1 || got[0].Provider.GetEnvoyFileAccessLog().GetPath() != "/dev/stdout" || got[0].Filter != "response.code >= 400" || got[0].Disabled {
		t.Errorf("mesh-wide envoy: %+v", got)
	}
	off := &model.Telemetry{Spec: &telemetry.Telemetry{AccessLogging: []*telemetry.AccessLogging{{Disabled: wrapperspb.Bool(true),
		Match: &telemetry.AccessLogging_LogSelector{Mode: telemetry.WorkloadMode_SERVER}}}}}
	if got := model.TelemetryAccessLogs(m, []*model.Telemetry{mesh, off}, true); len(got) != 1 || !got[0].Disabled {
		t.Errorf("server side disabled: %+v", got)
	}
	if got := model.TelemetryAccessLogs(m, []*model.Telemetry{mesh, off}, false); len(got) != 1 || got[0].Disabled {
		t.Errorf("client side stays on: %+v", got)
	}
	m.AccessLog.DefaultProviders = "envoy"
	if got := model.TelemetryAccessLogs(m, nil, true); len(got) != 1 || got[0].Provider.GetName() != "envoy" || got[0].Filter != "" {
		t.Errorf("defaultProviders.accessLogging: %+v", got)
	}
}
