package registries

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/registries/consul"
	"github.com/vmesh/vmesh/registries/static"
	"github.com/vmesh/vmesh/registries/zookeeper"
	"github.com/vmesh/vmesh/store"
)

// Options are the Runner's dependencies.
type Options struct {
	// Logger nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the vmesh_registries_* metrics; nil registers none.
	Registerer prometheus.Registerer
}

// adapterRunner is what every adapter is: a lifetime.
type adapterRunner interface {
	Run(ctx context.Context) error
}

var (
	_ adapterRunner = (*consul.Adapter)(nil)
	_ adapterRunner = (*zookeeper.Adapter)(nil)
	_ adapterRunner = (*static.Adapter)(nil)
)

type entry struct {
	spec    Spec
	sink    *adapter.Sink
	adapter adapterRunner
}

// Runner runs a set of registry adapters, each a Store source
// "registry:<name>" of class ClassRegistry.
type Runner struct {
	entries []entry
	log     *slog.Logger
}

// NewRunner validates specs and builds their adapters.
func NewRunner(store *store.Store, specs []Spec, opts Options) (*Runner, error) {
	if err := Validate(specs); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	metrics, err := adapter.NewMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Runner{log: log}
	for _, s := range specs {
		s = s.withDefaults()
		t, _ := registryTypeNamed(s.Type, false) // Validate knows every type
		sink := adapter.NewSink(store, adapter.Meta{Type: s.Type, Name: s.Name, Namespace: s.Namespace}, t.target(s), metrics, log)
		a, err := t.start(s, sink, log)
		if err != nil {
			return nil, fmt.Errorf("registry %s: %w", s.Name, err)
		}
		r.entries = append(r.entries, entry{spec: s, sink: sink, adapter: a})
	}
	return r, nil
}

// Run runs every adapter until ctx is done. An adapter that stops with an
// error is logged and reported in its status; the others keep running.
// Run returns the adapters' errors, joined, once all have stopped.
func (r *Runner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(r.entries))
	for i, e := range r.entries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.adapter.Run(ctx); err != nil {
				err = fmt.Errorf("registry %s: %w", e.spec.Name, err)
				e.sink.Error(err)
				r.log.Error("registry adapter stopped", "registry", e.spec.Name, "error", err)
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WaitSynced waits until every entry's first complete set is in the Store,
// or ctx ends. It returns the names of the entries that have not synced
// (none when it returns because all did).
func (r *Runner) WaitSynced(ctx context.Context) []string {
	for _, e := range r.entries {
		select {
		case <-e.sink.Synced():
		case <-ctx.Done():
		}
	}
	var late []string
	for _, e := range r.entries {
		select {
		case <-e.sink.Synced():
		default:
			late = append(late, e.spec.Name)
		}
	}
	return late
}

// Status returns every entry's status, in configuration order.
func (r *Runner) Status() []adapter.Status {
	out := make([]adapter.Status, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, e.sink.Status())
	}
	return out
}

// ServeHTTP serves /debug/registries: the entries' status as JSON.
func (r *Runner) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(struct {
		Registries []adapter.Status `json:"registries"`
	}{r.Status()})
}

var _ http.Handler = (*Runner)(nil)
