package controlplane

import (
	"regexp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

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
