package filestore

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/store"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// statsFilterMissing says why no metrics field of a Telemetry applies.
const statsFilterMissing = "Istio's metrics (istio_requests_total, ...) come from its stats filter (istio.stats), which upstream Envoy does not have: vmesh's Envoy proxies export Envoy's own statistics, which this does not change"

// telemetryWarnings names what of a Telemetry vmesh does not apply, read
// alone (VM1023): targetRefs (the Telemetry is ignored) and every metrics
// field. The providers its entries name are checked against the mesh
// config by the analysis (model/analysis). What proxyless gRPC ignores is
// an info (VM1101): grpc-go takes no access log, tracing or metrics
// settings from xDS or its bootstrap; its OpenTelemetry and CSM
// observability plugins are set up in the application's code.
func telemetryWarnings(w *warner, t *telemetry.Telemetry) {
	if t.GetTargetRef() != nil || len(t.GetTargetRefs()) > 0 {
		field := "targetRefs"
		if t.GetTargetRef() != nil {
			field = "targetRef"
		}
		w.add(field, store.CodeTelemetryFieldNotApplied, "%s names a Kubernetes Gateway or Service, which vmesh does not have: the Telemetry is ignored (use selector)", field)
		return
	}
	for i, m := range t.GetMetrics() {
		path := at("metrics", i)
		if len(m.GetProviders()) > 0 {
			w.add(path+".providers", store.CodeTelemetryFieldNotApplied, "metrics providers are not applied: %s", statsFilterMissing)
		}
		if m.GetReportingInterval() != nil {
			w.add(path+".reportingInterval", store.CodeTelemetryFieldNotApplied, "reportingInterval is not applied: %s", statsFilterMissing)
		}
		for j, o := range m.GetOverrides() {
			opath := at(path+".overrides", j)
			if o.GetDisabled() != nil {
				w.add(opath+".disabled", store.CodeTelemetryFieldNotApplied, "disabling %s is not applied: %s", metricName(o.GetMatch()), statsFilterMissing)
			}
			for _, name := range slices.Sorted(maps.Keys(o.GetTagOverrides())) {
				op := "upserting"
				if o.GetTagOverrides()[name].GetOperation() == telemetry.MetricsOverrides_TagOverride_REMOVE {
					op = "removing"
				}
				w.add(opath+".tagOverrides."+name, store.CodeTelemetryFieldNotApplied, "%s tag %s of %s is not applied: %s", op, name, metricName(o.GetMatch()), statsFilterMissing)
			}
		}
	}
	for i, tr := range t.GetTracing() {
		var set []string
		for _, f := range []struct {
			name string
			on   bool
		}{
			{"providers", len(tr.GetProviders()) > 0}, {"randomSamplingPercentage", tr.GetRandomSamplingPercentage() != nil},
			{"customTags", len(tr.GetCustomTags()) > 0}, {"disableSpanReporting", tr.GetDisableSpanReporting() != nil},
			{"useRequestIdForTraceSampling", tr.GetUseRequestIdForTraceSampling() != nil}, {"enableIstioTags", tr.GetEnableIstioTags() != nil},
			{"disableContextPropagation", tr.GetDisableContextPropagation() != nil},
		} {
			if f.on {
				set = append(set, f.name)
			}
		}
		if len(set) > 0 {
			w.info(at("tracing", i), store.CodeProxylessIgnores, "proxyless gRPC clients and servers ignore tracing (%s): grpc-go reads no tracing settings from xDS or its bootstrap (its OpenTelemetry plugin is set up in the application's code); Envoy proxies apply it", strings.Join(set, ", "))
		}
	}
	for i, l := range t.GetAccessLogging() {
		if l.GetDisabled().GetValue() {
			continue // nothing to ignore
		}
		w.info(at("accessLogging", i), store.CodeProxylessIgnores, "proxyless gRPC clients and servers ignore access logging: grpc-go has no access log it takes from xDS or its bootstrap; Envoy proxies apply it")
	}
	for i := range t.GetMetrics() {
		w.info(at("metrics", i), store.CodeProxylessIgnores, "proxyless gRPC clients and servers ignore metrics settings: grpc-go's metrics (its OpenTelemetry and CSM observability plugins) are set up in the application's code, not from xDS or its bootstrap")
	}
}

// metricName names the metrics an override's match selects.
func metricName(m *telemetry.MetricSelector) string {
	switch {
	case m.GetCustomMetric() != "":
		return "metric " + m.GetCustomMetric()
	case m.GetMetricMatch() == nil || m.GetMetric() == telemetry.MetricSelector_ALL_METRICS:
		return "all metrics"
	}
	return fmt.Sprintf("metric %s", m.GetMetric())
}
