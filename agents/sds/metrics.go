package sds

import "github.com/prometheus/client_golang/prometheus"

// metrics are the SDS server's Prometheus metrics.
type metrics struct {
	updates   prometheus.Counter
	responses *prometheus.CounterVec
	streams   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		updates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "sds", Name: "updates_total",
			Help: "Certificate pairs installed into the SDS server.",
		}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "sds", Name: "responses_total",
			Help: "SDS responses sent, by protocol (sotw, delta).",
		}, []string{"protocol"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "sds", Name: "streams",
			Help: "Open SDS streams.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.updates, m.responses, m.streams)
	}
	for _, p := range []string{"sotw", "delta"} {
		m.responses.WithLabelValues(p)
	}
	return m
}
