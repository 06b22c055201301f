package adapter

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the registries' Prometheus metrics, one series per registry
// entry (label "registry").
type Metrics struct {
	connected *prometheus.GaugeVec
	objects   *prometheus.GaugeVec
	syncs     *prometheus.CounterVec
	lastSync  *prometheus.GaugeVec
	errors    *prometheus.CounterVec
	skipped   *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg; a nil reg
// leaves them unregistered (still usable).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns, sub = "vmesh", "registries"
	m := &Metrics{
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "connected",
			Help: "1 while the registry answers, 0 while it is unreachable (the last known set keeps serving)."},
			[]string{"registry", "type"}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "objects",
			Help: "Generated objects the registry currently hands to the Store, by kind."},
			[]string{"registry", "kind"}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "syncs_total",
			Help: "Sets (the first, complete) and changes handed to the Store."}, []string{"registry"}),
		lastSync: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "last_sync_timestamp_seconds",
			Help: "Unix time of the last set handed to the Store."}, []string{"registry"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "errors_total",
			Help: "Errors talking to the registry or reading its file."}, []string{"registry"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "skipped_entries_total",
			Help: "Registry records skipped because they are malformed (e.g. a bad Dubbo provider URL), by reason."},
			[]string{"registry", "reason"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.connected, m.objects, m.syncs, m.lastSync, m.errors, m.skipped} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registries: register metrics: %w", err)
		}
	}
	return m, nil
}
