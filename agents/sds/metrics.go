package sds

import "github.com/prometheus/client_golang/prometheus"

// metrics are the SDS server's Prometheus metrics.
type metrics struct {
	updates   prometheus.Counter
	responses *prometheus.CounterVec
	streams   prometheus.Gauge
	creds     *prometheus.GaugeVec
}

// setCredentials sets the credential gauge from the folders' states and
// the names asked for that none serves.
func (m *metrics) setCredentials(states []CredentialState, missing []string) {
	served, refused := 0, 0
	for _, st := range states {
		if st.Error != "" {
			refused++
		} else {
			served++
		}
	}
	m.creds.WithLabelValues("served").Set(float64(served))
	m.creds.WithLabelValues("refused").Set(float64(refused))
	m.creds.WithLabelValues("missing").Set(float64(len(missing)))
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
		creds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "sds", Name: "credentials",
			Help: "File credentials: served, refused (invalid; a last good version may still serve), missing (asked for by Envoy, held by no folder).",
		}, []string{"state"}),
	}
	if reg != nil {
		reg.MustRegister(m.updates, m.responses, m.streams, m.creds)
	}
	m.setCredentials(nil, nil)
	for _, p := range []string{"sotw", "delta"} {
		m.responses.WithLabelValues(p)
	}
	return m
}
