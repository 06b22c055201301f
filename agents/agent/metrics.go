package agent

import "github.com/prometheus/client_golang/prometheus"

// metrics are the agent's own Prometheus metrics; its parts register
// theirs (vmesh_certs_*, vmesh_sds_*, vmesh_xdsproxy_*, vmesh_health_*,
// vmesh_envoy_*) on the same registerer.
type metrics struct {
	ready   prometheus.Gauge
	capture prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "agent", Name: "ready",
			Help: "1 once the agent has a certificate and has written its files and opened its sockets.",
		}),
		capture: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "agent", Name: "capture_installed",
			Help: "1 while the agent's traffic capture rules are installed.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.ready, m.capture)
	}
	return m
}
