package xdsproxy

import "github.com/prometheus/client_golang/prometheus"

// metrics are the xDS proxy's Prometheus metrics.
type metrics struct {
	streams  *prometheus.GaugeVec
	messages *prometheus.CounterVec
	upstream *prometheus.CounterVec
	health   *prometheus.CounterVec
	// nameTables counts name tables received by verdict (ack, nack).
	nameTables *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "xdsproxy", Name: "streams",
			Help: "Open proxied ADS streams by protocol (sotw, delta, node).",
		}, []string{"protocol"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "xdsproxy", Name: "messages_total",
			Help: "Messages forwarded by direction (upstream, downstream).",
		}, []string{"direction"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "xdsproxy", Name: "upstream_connects_total",
			Help: "Streams opened to the control plane by result (ok, error).",
		}, []string{"result"}),
		health: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "xdsproxy", Name: "health_reports_total",
			Help: "Health reports sent to the control plane by status (healthy, unhealthy).",
		}, []string{"status"}),
		nameTables: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "xdsproxy", Name: "name_tables_total",
			Help: "Name tables (NDS) received on the agent's stream by verdict (ack, nack).",
		}, []string{"verdict"}),
	}
	// Every label value exists from the start, so each documented series
	// is listed before its first event.
	for _, p := range []string{"sotw", "delta", "node"} {
		m.streams.WithLabelValues(p)
	}
	for _, d := range []string{"upstream", "downstream"} {
		m.messages.WithLabelValues(d)
	}
	for _, r := range []string{"ok", "error"} {
		m.upstream.WithLabelValues(r)
	}
	for _, st := range []string{"healthy", "unhealthy"} {
		m.health.WithLabelValues(st)
	}
	for _, v := range []string{"ack", "nack"} {
		m.nameTables.WithLabelValues(v)
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.messages, m.upstream, m.health, m.nameTables)
	}
	return m
}
