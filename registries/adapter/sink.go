package adapter

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vmesh/vmesh/filestore"
)

// Status is what a registry entry reports about itself in
// /debug/registries.
type Status struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Target string `json:"target"`
	// Connected is true while the registry answers (a static file: while it
	// can be read).
	Connected bool `json:"connected"`
	// LastSync is when the last complete set was handed to the Store.
	LastSync        time.Time `json:"lastSync,omitzero"`
	Syncs           int64     `json:"syncs"`
	Objects         int       `json:"objects"`
	ServiceEntries  int       `json:"serviceEntries"`
	WorkloadEntries int       `json:"workloadEntries"`
	// Skipped counts malformed records skipped since start.
	Skipped       int64     `json:"skipped"`
	LastError     string    `json:"lastError,omitempty"`
	LastErrorTime time.Time `json:"lastErrorTime,omitzero"`
}

// Sink hands one registry entry's complete set to the Store and keeps its
// Status and metrics. It is safe for concurrent use.
type Sink struct {
	store   *filestore.Store
	meta    Meta
	metrics *Metrics

	log     *slog.Logger
	created time.Time
	synced  chan struct{} // closed by the first complete set
	once    sync.Once

	mu     sync.Mutex
	status Status
}

// NewSink returns the Sink for the registry entry meta; target names what
// it reads (an address or a file) for the status. metrics and logger may be
// nil.
func NewSink(store *filestore.Store, meta Meta, target string, metrics *Metrics, logger *slog.Logger) *Sink {
	if metrics == nil {
		metrics, _ = NewMetrics(nil)
	}
	if logger == nil {
		logger = slog.Default()
	}
	s := &Sink{store: store, meta: meta, metrics: metrics, log: logger.With("registry", meta.Name), created: time.Now(),
		synced: make(chan struct{}), status: Status{Name: meta.Name, Type: meta.Type, Target: target}}
	s.log.Info("waiting for the registry's first complete sync", "type", meta.Type, "target", target)
	metrics.connected.WithLabelValues(meta.Name, meta.Type).Set(0)
	metrics.errors.WithLabelValues(meta.Name) // present at 0 from the start
	return s
}

// ExpectSkips declares the reasons the adapter may Skip a record for, so
// that their counters are present (at 0) from the start.
func (s *Sink) ExpectSkips(reasons ...string) {
	if s == nil {
		return
	}
	for _, r := range reasons {
		s.metrics.skipped.WithLabelValues(s.meta.Name, r)
	}
}

// Synced is closed once the registry's first complete set is in the Store.
func (s *Sink) Synced() <-chan struct{} { return s.synced }

// Meta returns the entry's object metadata.
func (s *Sink) Meta() Meta { return s.meta }

// Replace hands the complete current set to the Store.
func (s *Sink) Replace(objs []*filestore.Object) error {
	if err := s.store.Replace(s.meta.Source(), objs); err != nil {
		err = fmt.Errorf("registry %s: %w", s.meta.Name, err)
		s.Error(err)
		return err
	}
	var ses, wes int
	for _, o := range objs {
		switch o.Kind {
		case filestore.KindServiceEntry:
			ses++
		case filestore.KindWorkloadEntry:
			wes++
		}
	}
	now := time.Now()
	s.mu.Lock()
	if s.status.Syncs == 0 {
		s.log.Info("first sync complete", "serviceEntries", ses, "workloadEntries", wes, "took", now.Sub(s.created).Round(time.Millisecond))
	}
	s.status.LastSync = now
	s.status.Syncs++
	s.status.Objects = len(objs)
	s.status.ServiceEntries, s.status.WorkloadEntries = ses, wes
	s.mu.Unlock()
	s.once.Do(func() { close(s.synced) })
	s.metrics.syncs.WithLabelValues(s.meta.Name).Inc()
	s.metrics.lastSync.WithLabelValues(s.meta.Name).Set(float64(now.UnixNano()) / 1e9)
	s.metrics.objects.WithLabelValues(s.meta.Name, string(filestore.KindServiceEntry)).Set(float64(ses))
	s.metrics.objects.WithLabelValues(s.meta.Name, string(filestore.KindWorkloadEntry)).Set(float64(wes))
	return nil
}

// SetConnected records whether the registry answers.
func (s *Sink) SetConnected(up bool) {
	s.mu.Lock()
	s.status.Connected = up
	s.mu.Unlock()
	v := 0.0
	if up {
		v = 1
	}
	s.metrics.connected.WithLabelValues(s.meta.Name, s.meta.Type).Set(v)
}

// Error records an error talking to the registry. The last known set keeps
// serving.
func (s *Sink) Error(err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	s.status.LastError = err.Error()
	s.status.LastErrorTime = time.Now()
	s.mu.Unlock()
	s.metrics.errors.WithLabelValues(s.meta.Name).Inc()
}

// Skip counts a malformed record that was left out of the set.
func (s *Sink) Skip(reason string) {
	s.mu.Lock()
	s.status.Skipped++
	s.mu.Unlock()
	s.metrics.skipped.WithLabelValues(s.meta.Name, reason).Inc()
}

// ConfigErrors reports problems found in the registry's input (e.g. bad
// entries of a static file, by line) on the Store's source status, which
// /debug/config and `vmesh status` show.
func (s *Sink) ConfigErrors(revision string, errs []filestore.ConfigError) {
	s.store.SetStatus(s.meta.Source(), revision, errs)
}

// Status returns the entry's current status.
func (s *Sink) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}
