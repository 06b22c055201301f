package filestore

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmesh/vmesh/store"
)

// Collector exports the Store's state as Prometheus metrics, read from the
// current snapshot at scrape time.
type Collector struct {
	store      *store.Store
	warningsOf func(*store.Snapshot) []store.ConfigError
	revision   *prometheus.Desc
	objects    *prometheus.Desc
	errors     *prometheus.Desc
	commit     *prometheus.Desc
	conflicts  *prometheus.Desc
	warnings   *prometheus.Desc
}

// NewCollector returns a Collector for the store, whose warnings for a
// snapshot warnings gives; register it on a Registerer.
func NewCollector(st *store.Store, warnings func(*store.Snapshot) []store.ConfigError) *Collector {
	return &Collector{
		store:      st,
		warningsOf: warnings,
		revision:   prometheus.NewDesc("vmesh_config_revision", "Store revision: effective config changes since start.", nil, nil),
		objects:    prometheus.NewDesc("vmesh_config_objects", "Objects each source currently provides.", []string{"source"}, nil),
		errors:     prometheus.NewDesc("vmesh_config_errors", "Config errors each source currently reports.", []string{"source"}, nil),
		commit:     prometheus.NewDesc("vmesh_config_source_info", "Each source's current revision (git commit) as a label; value 1.", []string{"source", "revision"}, nil),
		conflicts:  prometheus.NewDesc("vmesh_config_conflicts", "Objects defined by more than one source.", nil, nil),
		warnings:   prometheus.NewDesc("vmesh_config_warnings", "Config warnings (accepted, not or not fully enforced; the analysis) by source and code.", []string{"source", "code"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.revision
	ch <- c.objects
	ch <- c.errors
	ch <- c.commit
	ch <- c.conflicts
	ch <- c.warnings
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.store.Snapshot()
	ch <- prometheus.MustNewConstMetric(c.revision, prometheus.CounterValue, float64(snap.Revision))
	ch <- prometheus.MustNewConstMetric(c.conflicts, prometheus.GaugeValue, float64(len(snap.Conflicts)))
	for _, st := range snap.Sources {
		ch <- prometheus.MustNewConstMetric(c.objects, prometheus.GaugeValue, float64(st.Objects), st.Source)
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.GaugeValue, float64(len(st.Errors)), st.Source)
		ch <- prometheus.MustNewConstMetric(c.commit, prometheus.GaugeValue, 1, st.Source, st.Revision)
	}
	// Every source has a series per code, at zero when it has none, so an
	// alert on one code sees it from the start.
	type sourceCode struct{ source, code string }
	counts := map[sourceCode]int{}
	for _, st := range snap.Sources {
		for _, wc := range store.WarningCodes {
			if !wc.Info {
				counts[sourceCode{st.Source, wc.Code}] += 0
			}
		}
	}
	for _, w := range c.warningsOf(snap) {
		if w.Severity == store.SeverityWarning {
			counts[sourceCode{w.Source, w.Code}]++
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.warnings, prometheus.GaugeValue, float64(n), k.source, k.code)
	}
}
