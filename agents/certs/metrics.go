package certs

import "github.com/prometheus/client_golang/prometheus"

// metrics are the certificate manager's Prometheus metrics.
type metrics struct {
	fetches *prometheus.CounterVec
	expiry  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh",
			Subsystem: "certs",
			Name:      "fetches_total",
			Help:      "Certificate requests to the CA by authentication (token, certificate) and result (ok, error).",
		}, []string{"auth", "result"}),
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vmesh",
			Subsystem: "certs",
			Name:      "expiry_timestamp_seconds",
			Help:      "Unix time at which the current workload certificate expires.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.fetches, m.expiry)
	}
	// Every series exists from the start (the agent's port lists them all).
	for _, auth := range []string{"token", "certificate"} {
		for _, r := range []string{"ok", "error"} {
			m.fetches.WithLabelValues(auth, r)
		}
	}
	return m
}
