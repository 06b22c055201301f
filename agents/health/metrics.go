package health

import "github.com/prometheus/client_golang/prometheus"

// metrics are the prober's Prometheus metrics.
type metrics struct {
	checks  *prometheus.CounterVec
	healthy prometheus.Gauge
	reports *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "health", Name: "checks_total",
			Help: "Readiness probe runs by result (success, failure).",
		}, []string{"result"}),
		healthy: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "health", Name: "healthy",
			Help: "1 while the workload's readiness probe reports healthy, 0 otherwise.",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "health", Name: "reports_total",
			Help: "Health changes handed to the reporter by result (ok, error).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.checks, m.healthy, m.reports)
	}
	for _, r := range []string{"success", "failure"} {
		m.checks.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.reports.WithLabelValues(r)
	}
	return m
}

// RegisterIdleMetrics registers the prober's metrics for an agent that
// runs no probe (the workload counts as healthy), so its metrics port
// lists the same series either way.
func RegisterIdleMetrics(reg prometheus.Registerer) {
	newMetrics(reg).healthy.Set(1)
}
