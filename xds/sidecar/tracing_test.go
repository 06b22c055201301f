package sidecar_test

import (
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/sidecar"
)

const tracingYAML = meshFieldsYAML + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: zipkin, namespace: istio-system}
spec:
  hosts: [zipkin.istio-system.svc.cluster.local]
  ports: [{number: 9411, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.9.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: otel, namespace: observability}
spec:
  hosts: [otel-collector.observability.svc.cluster.local]
  ports: [{number: 4317, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.9.0.2}]
`

// tracingOf returns the tracing blocks of the HTTP connection managers of
// the outbound listener of port 9080 and of virtualInbound's chains.
func tracingOf(t *testing.T, v *model.View, listener string) []*hcmv3.HttpConnectionManager_Tracing {
	t.Helper()
	ls, err := sidecar.OutboundListeners(v)
	if err != nil {
		t.Fatal(err)
	}
	in, err := sidecar.InboundListeners(v)
	if err != nil {
		t.Fatal(err)
	}
	var out []*hcmv3.HttpConnectionManager_Tracing
	found := false
	for _, l := range append(ls, in...) {
		if l.GetName() != listener {
			continue
		}
		found = true
		for _, fc := range append([]*listenerv3.FilterChain{l.GetDefaultFilterChain()}, l.GetFilterChains()...) {
			for _, f := range fc.GetFilters() {
				h := &hcmv3.HttpConnectionManager{}
				if f.GetName() == sidecar.HCMFilterName && f.GetTypedConfig().UnmarshalTo(h) == nil {
					out = append(out, h.GetTracing())
				}
			}
		}
	}
	if !found || len(out) == 0 {
		t.Fatalf("listener %s with HTTP connection managers not found", listener)
	}
	return out
}

func TestTracingMeshConfig(t *testing.T) {
	// Istio's default: enableTracing on, no provider: sampling 100/100/1
	// and Istio's tags (canonical service from the workload's labels).
	w := productpage()
	w.Labels = map[string]string{"app": "productpage", "service.istio.io/canonical-name": "pp"}
	for _, name := range []string{"0.0.0.0_9080", sidecar.VirtualInboundListener} {
		for _, tr := range tracingOf(t, meshView(t, "", tracingYAML, w), name) {
			if tr == nil {
				t.Fatalf("%s: no tracing block with enableTracing on", name)
			}
			if tr.GetRandomSampling().GetValue() != 1 || tr.GetClientSampling().GetValue() != 100 || tr.GetOverallSampling().GetValue() != 100 || tr.GetProvider() != nil {
				t.Errorf("%s: default tracing %v", name, tr)
			}
			tags := map[string]string{}
			for _, c := range tr.GetCustomTags() {
				tags[c.GetTag()] = c.GetLiteral().GetValue()
			}
			if len(tr.GetCustomTags()) != 9 || tags["istio.canonical_service"] != "pp" || tags["istio.namespace"] != "shop" || tags["istio.canonical_revision"] != "latest" {
				t.Errorf("%s: tags %v", name, tr.GetCustomTags())
			}
		}
	}
	// Off.
	for _, tr := range tracingOf(t, meshView(t, "enableTracing: false\n", tracingYAML, productpage()), "0.0.0.0_9080") {
		if tr != nil {
			t.Errorf("enableTracing false: tracing %v", tr)
		}
	}
	// defaultConfig.tracing: sampling, a literal tag, no Istio tags.
	mesh := "defaultConfig:\n  tracing:\n    sampling: 25\n    enableIstioTags: false\n    customTags:\n      team: {literal: {value: shop}}\n"
	for _, tr := range tracingOf(t, meshView(t, mesh, tracingYAML, productpage()), "0.0.0.0_9080") {
		if tr.GetRandomSampling().GetValue() != 25 || len(tr.GetCustomTags()) != 1 || tr.GetCustomTags()[0].GetLiteral().GetValue() != "shop" {
			t.Errorf("defaultConfig.tracing: %v", tr)
		}
	}
}

func TestTracingProviders(t *testing.T) {
	zipkin := `extensionProviders:
- name: zipkin
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
- name: otel
  opentelemetry: {service: otel-collector.observability.svc.cluster.local, port: 4317}
- name: missing
  zipkin: {service: nowhere.example.com, port: 9411}
defaultProviders:
  tracing: [PROVIDER]
`
	mesh := func(p string) string { return strings.Replace(zipkin, "PROVIDER", p, 1) }
	// Zipkin: the collector is the service's outbound cluster, spans as
	// Istio 1.29+ sends them (collector_service, JSON v2, 128-bit ids).
	for _, tr := range tracingOf(t, meshView(t, mesh("zipkin"), tracingYAML, productpage()), "0.0.0.0_9080") {
		zc := &tracev3.ZipkinConfig{}
		if tr.GetProvider().GetName() != "envoy.tracers.zipkin" || tr.GetProvider().GetTypedConfig().UnmarshalTo(zc) != nil {
			t.Fatalf("zipkin provider: %v", tr)
		}
		if zc.GetCollectorService().GetHttpUri().GetCluster() != "outbound|9411||zipkin.istio-system.svc.cluster.local" ||
			zc.GetCollectorService().GetHttpUri().GetUri() != "http://zipkin.istio-system.svc.cluster.local/api/v2/spans" ||
			!zc.GetTraceId_128Bit() || zc.GetCollectorEndpointVersion() != tracev3.ZipkinConfig_HTTP_JSON {
			t.Errorf("zipkin config: %v", zc)
		}
		if tr.GetRandomSampling().GetValue() != 1 || len(tr.GetCustomTags()) != 9 {
			t.Errorf("zipkin sampling and tags: %v", tr)
		}
	}
	// OpenTelemetry over gRPC, the service name the Envoy node's cluster.
	w := productpage()
	w.WorkloadName = "productpage-v1"
	for _, tr := range tracingOf(t, meshView(t, mesh("otel"), tracingYAML, w), sidecar.VirtualInboundListener) {
		oc := &tracev3.OpenTelemetryConfig{}
		if tr.GetProvider().GetName() != "envoy.tracers.opentelemetry" || tr.GetProvider().GetTypedConfig().UnmarshalTo(oc) != nil {
			t.Fatalf("otel provider: %v", tr)
		}
		if oc.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "outbound|4317||otel-collector.observability.svc.cluster.local" ||
			oc.GetServiceName() != "productpage-v1.shop" {
			t.Errorf("otel config: %v", oc)
		}
	}
	// A provider whose service no config defines: no tracing (as Istio).
	for _, tr := range tracingOf(t, meshView(t, mesh("missing"), tracingYAML, productpage()), "0.0.0.0_9080") {
		if tr != nil {
			t.Errorf("provider without a service: %v", tr)
		}
	}
}
