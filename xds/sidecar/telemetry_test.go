package sidecar_test

import (
	"testing"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	uuidv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/request_id/uuid/v3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/sidecar"
)

const telemetryProviders = `extensionProviders:
- name: zipkin
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
`

// A mesh-wide Telemetry turns Zipkin tracing on with its sampling and
// tags; a namespace one turns span reporting off for the server side.
func TestTelemetryTracing(t *testing.T) {
	cfg := tracingYAML + `---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  tracing:
  - providers: [{name: zipkin}]
    randomSamplingPercentage: 42
    customTags:
      team: {literal: {value: shop}}
      agent: {header: {name: user-agent, defaultValue: none}}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: shop, namespace: shop}
spec:
  tracing:
  - match: {mode: SERVER}
    disableSpanReporting: true
`
	v := meshView(t, telemetryProviders, cfg, productpage())
	for _, tr := range tracingOf(t, v, "0.0.0.0_9080") {
		if tr.GetProvider().GetName() != "envoy.tracers.zipkin" || tr.GetRandomSampling().GetValue() != 42 || len(tr.GetCustomTags()) != 11 {
			t.Errorf("client side: %v", tr)
		}
	}
	for _, tr := range tracingOf(t, v, sidecar.VirtualInboundListener) {
		if tr != nil {
			t.Errorf("server side with span reporting off: %v", tr)
		}
	}
}

// logsOf returns the access logs of the HTTP connection managers of a
// listener, and the listener's own.
func logsOf(t *testing.T, v *model.View, listener string) (hcm, own []*accesslogv3.AccessLog) {
	t.Helper()
	ls, err := sidecar.OutboundListeners(v)
	if err != nil {
		t.Fatal(err)
	}
	in, err := sidecar.InboundListeners(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range append(ls, in...) {
		if l.GetName() != listener {
			continue
		}
		for _, fc := range append([]*listenerv3.FilterChain{l.GetDefaultFilterChain()}, l.GetFilterChains()...) {
			for _, f := range fc.GetFilters() {
				h := &hcmv3.HttpConnectionManager{}
				if f.GetName() == sidecar.HCMFilterName && f.GetTypedConfig().UnmarshalTo(h) == nil {
					hcm = append(hcm, h.GetAccessLog()...)
				}
			}
		}
		return hcm, l.GetAccessLog()
	}
	t.Fatalf("no listener %s", listener)
	return nil, nil
}

// Access logs from a Telemetry: the built-in envoy provider (stdout, the
// mesh config's format) with the entry's CEL filter; the capture
// listeners' log adds NR to it; a workload Telemetry disables the server
// side of the workloads it selects.
func TestTelemetryAccessLogs(t *testing.T) {
	cfg := tracingYAML + `---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  accessLogging:
  - providers: [{name: envoy}]
    filter: {expression: "response.code >= 400"}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: quiet, namespace: shop}
spec:
  selector: {matchLabels: {app: quiet}}
  accessLogging:
  - match: {mode: SERVER}
    disabled: true
`
	hcm, _ := logsOf(t, meshView(t, "", cfg, productpage()), "0.0.0.0_9080")
	if len(hcm) == 0 {
		t.Fatal("no access log on the outbound HCM")
	}
	for _, al := range hcm {
		f, cel := &filev3.FileAccessLog{}, &celv3.ExpressionFilter{}
		if al.GetTypedConfig().UnmarshalTo(f) != nil || f.GetPath() != "/dev/stdout" ||
			al.GetFilter().GetExtensionFilter().GetTypedConfig().UnmarshalTo(cel) != nil || cel.GetExpression() != "response.code >= 400" {
			t.Errorf("access log %v", al)
		}
	}
	_, own := logsOf(t, meshView(t, "", cfg, productpage()), sidecar.VirtualInboundListener)
	if len(own) != 1 || len(own[0].GetFilter().GetAndFilter().GetFilters()) != 2 ||
		own[0].GetFilter().GetAndFilter().GetFilters()[0].GetResponseFlagFilter().GetFlags()[0] != "NR" {
		t.Errorf("virtualInbound's own log %v", own)
	}
	quiet := productpage()
	quiet.Labels = map[string]string{"app": "quiet"}
	if hcm, own := logsOf(t, meshView(t, "", cfg, quiet), sidecar.VirtualInboundListener); len(hcm)+len(own) != 0 {
		t.Errorf("server side disabled: %v %v", hcm, own)
	}
	if hcm, _ := logsOf(t, meshView(t, "", cfg, quiet), "0.0.0.0_9080"); len(hcm) == 0 {
		t.Error("client side of the quiet workload logs nothing")
	}
}

// hcmsOf returns the HTTP connection managers of a listener.
func hcmsOf(t *testing.T, v *model.View, listener string) []*hcmv3.HttpConnectionManager {
	t.Helper()
	ls, err := sidecar.OutboundListeners(v)
	if err != nil {
		t.Fatal(err)
	}
	in, err := sidecar.InboundListeners(v)
	if err != nil {
		t.Fatal(err)
	}
	var out []*hcmv3.HttpConnectionManager
	for _, l := range append(ls, in...) {
		if l.GetName() != listener {
			continue
		}
		for _, fc := range append([]*listenerv3.FilterChain{l.GetDefaultFilterChain()}, l.GetFilterChains()...) {
			for _, f := range fc.GetFilters() {
				h := &hcmv3.HttpConnectionManager{}
				if f.GetName() == sidecar.HCMFilterName && f.GetTypedConfig().UnmarshalTo(h) == nil {
					out = append(out, h)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no HTTP connection manager on listener %s", listener)
	}
	return out
}

// useRequestIdForTraceSampling false, where a Telemetry's tracing applies
// (here the client side), makes request ids not decide sampling (the UUID
// request id extension says so, as Istio's); the server side, whose span
// reporting is off, keeps Istio's default (they do).
func TestTelemetryRequestIDSampling(t *testing.T) {
	cfg := tracingYAML + `---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  tracing:
  - providers: [{name: zipkin}]
    useRequestIdForTraceSampling: false
  - match: {mode: SERVER}
    disableSpanReporting: true
`
	v := meshView(t, telemetryProviders, cfg, productpage())
	sampling := func(h *hcmv3.HttpConnectionManager) bool {
		u := &uuidv3.UuidRequestIdConfig{}
		if err := h.GetRequestIdExtension().GetTypedConfig().UnmarshalTo(u); err != nil {
			t.Fatal(err)
		}
		return u.GetUseRequestIdForTraceSampling().GetValue()
	}
	for _, h := range hcmsOf(t, v, "0.0.0.0_9080") {
		if h.GetTracing() == nil || sampling(h) {
			t.Errorf("client side: tracing %v, request ids decide sampling %v; want tracing, false", h.GetTracing(), sampling(h))
		}
	}
	for _, h := range hcmsOf(t, v, sidecar.VirtualInboundListener) {
		if h.GetTracing() != nil || !sampling(h) {
			t.Errorf("server side: tracing %v, request ids decide sampling %v; want none, true", h.GetTracing(), sampling(h))
		}
	}
}
