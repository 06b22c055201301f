package xds

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmesh/vmesh/xds/gen"
)

// metrics are the xds package's Prometheus metrics.
type metrics struct {
	connected       *prometheus.GaugeVec
	pushes          *prometheus.CounterVec
	pushSeconds     *prometheus.HistogramVec
	nacks           *prometheus.CounterVec
	generations     prometheus.Counter
	generateSeconds prometheus.Histogram
	groups          prometheus.Gauge
	modelSeconds    prometheus.Histogram
	debouncedEvents prometheus.Histogram
	inboundRefused  prometheus.Counter
	rolloutHeld     *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "vmesh", "xds"
	m := &metrics{
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "connected_proxies",
			Help: "xDS streams connected, by proxy kind.",
		}, []string{"kind"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "pushes_total",
			Help: "xDS responses sent, by type (LDS, RDS, CDS, EDS).",
		}, []string{"type"}),
		pushSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "push_latency_seconds",
			Help:    "Time from the first Store change of a push to the response being queued, by type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "nacks_total",
			Help: "xDS responses rejected by proxies, by type.",
		}, []string{"type"}),
		generations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "generations_total",
			Help: "Config generations, one per proxy group and change.",
		}),
		generateSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "generate_seconds",
			Help:    "Time to generate and serialise one group's config.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		groups: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "proxy_groups",
			Help: "Proxy groups with generated config.",
		}),
		modelSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "model_build_seconds",
			Help:    "Time to build the model snapshot from the Store.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		debouncedEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "debounced_changes",
			Help:    "Store objects changed per push after debouncing.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		inboundRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "inbound_listeners_refused_total",
			Help: "Server listener names left unanswered because the proxy's group had made the most it may (4096).",
		}),
		rolloutHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "rollout_held",
			Help: "1 for the git commit the staged rollout holds (a canary rejected it or an endpoint turned unhealthy during its bake), by commit.",
		}, []string{"commit"}),
	}
	// Every series with a known label present (at 0) from the start.
	for _, k := range kindNames() {
		m.connected.WithLabelValues(string(k))
	}
	m.rolloutHeld.WithLabelValues("").Set(0)
	for _, t := range gen.TypeURLs() {
		m.pushes.WithLabelValues(shortType(t))
		m.pushSeconds.WithLabelValues(shortType(t))
		m.nacks.WithLabelValues(shortType(t))
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.connected, m.pushes, m.pushSeconds, m.nacks, m.generations, m.generateSeconds, m.groups, m.modelSeconds, m.debouncedEvents, m.inboundRefused, m.rolloutHeld} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("xds: registering metrics: %w", err)
		}
	}
	return m, nil
}
