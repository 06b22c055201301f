package xdsproxy

import "github.com/prometheus/client_golang/prometheus"

// metrics are the xDS proxy's Prometheus metrics.
type metrics struct {
	streams  *prometheus.GaugeVec
	messages *prometheus.CounterVec
	upstream *prometheus.CounterVec
	health   *prometheus.CounterVec
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
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.messages, m.upstream, m.health)
	}
	return m
}
