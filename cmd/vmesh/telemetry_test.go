package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// telemetryMesh is a config folder's mesh.yaml with a provider of each
// kind the Telemetry below names: envoyHttpAls (an access log service
// vmesh's proxies do not write to), datadog (a tracer they do not have)
// and zipkin (applied).
const telemetryMesh = `extensionProviders:
- name: als-http
  envoyHttpAls:
    service: als.istio-system.svc.cluster.local
    port: 9000
- name: datadog
  datadog:
    service: datadog-agent.datadog.svc.cluster.local
    port: 8126
- name: zipkin
  zipkin:
    service: zipkin.istio-system.svc.cluster.local
    port: 9411
- name: otel
  envoyOtelAls:
    service: observability/opentelemetry-collector.observability.svc.cluster.local
    port: 4317
`

// telemetryEveryField is one Telemetry with every field vmesh does not
// apply (line numbers in the comments), besides ones it applies, and one
// with targetRefs, which vmesh ignores whole.
const telemetryEveryField = `apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata:
  name: mesh-default
  namespace: istio-system
spec:
  accessLogging:
  - providers:
    - name: envoy
    - name: als-http # 10: an envoyHttpAls provider
    - name: nowhere # 11: no extensionProviders entry
    - name: otel # 12: its service is no ServiceEntry's
    filter:
      expression: response.code >= 400
  tracing:
  - providers:
    - name: datadog # 17: a datadog provider
    randomSamplingPercentage: 10
    useRequestIdForTraceSampling: false
  metrics:
  - providers: # 21
    - name: prometheus
    reportingInterval: 10s # 23
    overrides:
    - match:
        metric: REQUEST_COUNT
        mode: CLIENT
      disabled: true # 28
    - tagOverrides:
        request_host: # 30
          value: request.host
        response_code: # 32
          operation: REMOVE
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata:
  name: edge
  namespace: istio-system
spec:
  targetRefs: # 41
  - kind: Gateway
    group: gateway.networking.k8s.io
    name: edge
  accessLogging:
  - providers:
    - name: envoy
`

// vmesh analyze names every Telemetry field vmesh does not apply, each at
// its file:line and field with VM1023, and nothing else as VM1023: the
// providers of kinds its proxies do not write to or trace with, one no
// extension provider defines, one whose service no ServiceEntry defines
// (an info without --server: a registry may define it), every metrics field (providers,
// reportingInterval, a disabled metric, each tag override) and targetRefs
// (the Telemetry ignored whole). The applied fields (the envoy provider,
// the filter, sampling, useRequestIdForTraceSampling) are not named.
func TestAnalyzeNamesEveryTelemetryFieldNotApplied(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"mesh.yaml": telemetryMesh, "telemetry.yaml": telemetryEveryField} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "telemetry.yaml")
	want := []string{
		fmt.Sprintf("%s:10: Telemetry/istio-system/mesh-default: accessLogging[0].providers[1]: warning VM1023: ", file),
		fmt.Sprintf("%s:11: Telemetry/istio-system/mesh-default: accessLogging[0].providers[2]: warning VM1023: ", file),
		fmt.Sprintf("%s:12: Telemetry/istio-system/mesh-default: accessLogging[0].providers[3]: info VM1023: ", file),
		fmt.Sprintf("%s:17: Telemetry/istio-system/mesh-default: tracing[0].providers[0]: warning VM1023: ", file),
		fmt.Sprintf("%s:21: Telemetry/istio-system/mesh-default: metrics[0].providers: warning VM1023: ", file),
		fmt.Sprintf("%s:23: Telemetry/istio-system/mesh-default: metrics[0].reportingInterval: warning VM1023: ", file),
		fmt.Sprintf("%s:28: Telemetry/istio-system/mesh-default: metrics[0].overrides[0].disabled: warning VM1023: ", file),
		fmt.Sprintf("%s:30: Telemetry/istio-system/mesh-default: metrics[0].overrides[1].tagOverrides.request_host: warning VM1023: ", file),
		fmt.Sprintf("%s:32: Telemetry/istio-system/mesh-default: metrics[0].overrides[1].tagOverrides.response_code: warning VM1023: ", file),
		fmt.Sprintf("%s:41: Telemetry/istio-system/edge: targetRefs: warning VM1023: ", file),
	}
	out, code := runVMesh(t, "analyze", dir)
	if code != 1 {
		t.Errorf("analyze: exit %d, want 1 (warnings)", code)
	}
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, " VM1023: ") {
			continue
		}
		i := strings.Index(line, " VM1023: ")
		got = append(got, line[:i+len(" VM1023: ")])
		if len(line) == i+len(" VM1023: ") {
			t.Errorf("a warning without a message: %s", line)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("vmesh analyze's VM1023 warnings:\n%s\nwant:\n%s\nwhole output:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), out)
	}
}
