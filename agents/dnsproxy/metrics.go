package dnsproxy

import "github.com/prometheus/client_golang/prometheus"

// metrics are the DNS proxy's Prometheus metrics.
type metrics struct {
	requests         *prometheus.CounterVec
	upstreamFailures prometheus.Counter
	upstreamSeconds  prometheus.Histogram
	hosts            prometheus.Gauge
	updates          prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "dnsproxy", Name: "requests_total",
			Help: "DNS queries by protocol (udp, tcp) and answer (mesh: from the name table; forwarded: by an upstream resolver; error).",
		}, []string{"protocol", "answer"}),
		upstreamFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "dnsproxy", Name: "upstream_failures_total",
			Help: "Forwarded DNS queries no upstream resolver answered.",
		}),
		upstreamSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "vmesh", Subsystem: "dnsproxy", Name: "upstream_request_duration_seconds",
			Help: "Time an upstream resolver took to answer.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		hosts: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "dnsproxy", Name: "hosts",
			Help: "Hosts in the current name table.",
		}),
		updates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "dnsproxy", Name: "table_updates_total",
			Help: "Name tables received from the control plane.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.upstreamFailures, m.upstreamSeconds, m.hosts, m.updates)
	}
	for _, p := range []string{"udp", "tcp"} {
		for _, a := range []string{"mesh", "forwarded", "error"} {
			m.requests.WithLabelValues(p, a)
		}
	}
	return m
}

// RegisterIdleMetrics registers the proxy's metrics for an agent that runs
// no DNS proxy, so its metrics port lists the same series either way.
func RegisterIdleMetrics(reg prometheus.Registerer) { newMetrics(reg) }
