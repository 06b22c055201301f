package envoy

import "github.com/prometheus/client_golang/prometheus"

// metrics are the Envoy supervisor's Prometheus metrics.
type metrics struct {
	starts  prometheus.Counter
	exits   *prometheus.CounterVec
	running prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		starts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "envoy", Name: "starts_total",
			Help: "Envoy processes started by the agent.",
		}),
		exits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "envoy", Name: "exits_total",
			Help: "Envoy process exits by cause (crash: on its own; stop: asked to by the agent).",
		}, []string{"cause"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "envoy", Name: "running",
			Help: "1 while the supervised Envoy process runs.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.starts, m.exits, m.running)
	}
	for _, c := range []string{"crash", "stop"} {
		m.exits.WithLabelValues(c)
	}
	return m
}

// RegisterIdleMetrics registers the supervisor's metrics for an agent that
// runs no Envoy, so its metrics port lists the same series either way.
func RegisterIdleMetrics(reg prometheus.Registerer) { newMetrics(reg) }
