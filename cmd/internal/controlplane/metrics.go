package controlplane

import (
	"fmt"
	"regexp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/buildinfo"
	"github.com/vmesh/vmesh/writers/autoregister"
	"github.com/vmesh/vmesh/writers/sharedstate"
)

// newBuildInfoMetric is vmesh_build_info{version,revision,dirty,goversion} 1.
func newBuildInfoMetric(bi buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "vmesh", Name: "build_info",
		Help: "Always 1; the labels name the build: version, VCS revision, dirty work tree, Go version.",
	}, []string{"version", "revision", "dirty", "goversion"})
	g.WithLabelValues(bi.Version, bi.Revision, fmt.Sprint(bi.Dirty), bi.GoVersion).Set(1)
	return g
}

// newGitMetrics are the git source's fetch metrics, read at scrape time;
// zero without a git source, so they exist from the start.
func newGitMetrics(git func() *filestore.GitSource) []prometheus.Collector {
	status := func() filestore.FetchStatus {
		if g := git(); g != nil {
			return g.FetchStatus()
		}
		return filestore.FetchStatus{}
	}
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "git", Name: "fetch_failures_total",
			Help: "Git fetches that failed or timed out (the last good commit keeps serving).",
		}, func() float64 { return float64(status().Failures) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "git", Name: "fetch_failing",
			Help: "1 while the last git fetch failed (the reason is in /ready and /debug/config), else 0.",
		}, func() float64 {
			if status().LastError != "" {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "git", Name: "fetch_stalls_total",
			Help: "Git fetches cut for receiving nothing for the stall timeout (then retried with backoff).",
		}, func() float64 { return float64(status().Stalls) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "git", Name: "fetch_stalled",
			Help: "1 while the last git fetch was cut for receiving nothing (the remote is in /debug/config), else 0.",
		}, func() float64 {
			if status().Stalled {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "git", Name: "fetch_running_seconds",
			Help: "How long the git fetch under way has run; 0 when none is.",
		}, func() float64 { return status().Running.Seconds() }),
	}
}

// newStateMetrics are the shared state's metrics, read at scrape time;
// zero without a shared state, so they exist from the start.
func newStateMetrics(state func() *sharedstate.State) []prometheus.Collector {
	var out []prometheus.Collector
	for _, kind := range []string{sharedstate.UnreadableRegistration, sharedstate.UnreadableRevocation, sharedstate.UnreadableReplica} {
		out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "vmesh", Subsystem: "shared_state", Name: "unreadable_records",
			Help:        "Records in the shared state this replica refuses and skips now (unreadable, unsigned or forged, not bound to a live replica, invalid, future-dated), by kind (registration, revocation, replica); listed in /debug/replicas.",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, func() float64 {
			if st := state(); st != nil {
				return float64(st.Unreadable(kind))
			}
			return 0
		}), prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "vmesh", Subsystem: "shared_state", Name: "refused_records_total",
			Help:        "Records in the shared state this replica refused since it started, by kind (registration, revocation, replica): each refused value once.",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, func() float64 {
			if st := state(); st != nil {
				return float64(st.RefusedTotal(kind))
			}
			return 0
		}))
	}
	return out
}

// newRegistrationMetrics are the registrar's metrics, read at scrape time.
func newRegistrationMetrics(r *autoregister.Registrar) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "vmesh", Subsystem: "registrations", Name: "ignored_health_reports_total",
		Help: "Agents' health reports ignored because the config-defined WorkloadEntry they name is not health-checked (annotation proxy.istio.io/health-checks-enabled).",
	}, func() float64 { return float64(r.IgnoredHealthReports()) })
}

// namingRegisterer records the name of every metric registered through it,
// so the documented list can be checked against what the server exposes,
// including vectors that have no series yet.
type namingRegisterer struct {
	prometheus.Registerer
	mu    sync.Mutex
	names map[string]bool
}

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *namingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range ch {
		if m := fqNameRE.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *namingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// MetricNames lists every vmesh metric the server has registered, sorted.
func (cp *ControlPlane) MetricNames() []string {
	cp.metricNames.mu.Lock()
	defer cp.metricNames.mu.Unlock()
	var out []string
	for n := range cp.metricNames.names {
		if len(n) > 6 && n[:6] == "vmesh_" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
