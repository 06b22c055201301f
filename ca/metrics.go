package ca

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	issued     *prometheus.CounterVec
	rejected   *prometheus.CounterVec
	tokens     prometheus.Counter
	rootExpiry prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "ca", Name: "certificates_issued_total",
			Help: "Workload certificates issued through CreateCertificate, by how the caller authenticated (token, certificate).",
		}, []string{"auth"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "ca", Name: "certificates_rejected_total",
			Help: "CreateCertificate requests rejected, by reason.",
		}, []string{"reason"}),
		tokens: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "ca", Name: "tokens_created_total",
			Help: "Bootstrap tokens minted.",
		}),
		rootExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "ca", Name: "root_expiry_timestamp_seconds",
			Help: "Unix time at which the CA's current root certificate expires.",
		}),
	}
	// Every series with a known label present (at 0) from the start.
	for _, a := range []AuthMethod{AuthToken, AuthCertificate} {
		m.issued.WithLabelValues(string(a))
	}
	for _, r := range allReasons() {
		m.rejected.WithLabelValues(string(r))
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.issued, m.rejected, m.tokens, m.rootExpiry} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}
