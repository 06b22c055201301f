package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Status is the workload's health as reported to the control plane.
type Status struct {
	Healthy bool
	// Message says why the workload is unhealthy.
	Message string
}

// Reporter carries health changes to the control plane.
type Reporter interface {
	Report(ctx context.Context, s Status) error
}

// ReporterFunc adapts a function to Reporter.
type ReporterFunc func(ctx context.Context, s Status) error

// Report calls f.
func (f ReporterFunc) Report(ctx context.Context, s Status) error { return f(ctx, s) }

// Prober runs a Probe periodically and reports health changes: the workload
// starts unhealthy until SuccessThreshold consecutive successes, and turns
// unhealthy after FailureThreshold consecutive failures. Its probe can be
// replaced while it runs (SetProbe): the agent takes it from the
// WorkloadGroup the control plane serves, which may change.
type Prober struct {
	host string
	// execUser allows exec probes and runs them (nil: not run).
	execUser *ExecUser
	rep      Reporter
	log      *slog.Logger
	met      *metrics
	// changed is signalled (buffered, never blocks) when the probe changes.
	changed chan struct{}

	mu    sync.Mutex
	probe *Probe // nil: nothing to probe
	last  *Status
}

// ProberOption is a VM-local setting of a Prober.
type ProberOption func(*Prober)

// WithExecUser allows exec probes, run as u (LookupExecUser). Without it
// (or with u nil) an exec probe is never run: the workload is reported
// unhealthy with ExecDisabledReason.
func WithExecUser(u *ExecUser) ProberOption {
	return func(p *Prober) { p.execUser = u }
}

// NewProber checks p and returns a Prober that probes defaultHost when the
// probe names no host. With p nil it probes nothing until SetProbe gives
// it a probe. Metrics are registered on reg when it is not nil.
func NewProber(p *Probe, defaultHost string, rep Reporter, logger *slog.Logger, reg prometheus.Registerer, opts ...ProberOption) (*Prober, error) {
	if rep == nil {
		return nil, fmt.Errorf("health: no reporter")
	}
	if logger == nil {
		logger = slog.Default()
	}
	if defaultHost == "" {
		defaultHost = "127.0.0.1"
	}
	pr := &Prober{host: defaultHost, rep: rep, log: logger, met: newMetrics(reg), changed: make(chan struct{}, 1)}
	for _, o := range opts {
		o(pr)
	}
	// Not SetProbe: that signals a change, and a nil probe's change
	// reports the workload healthy before anything has said so (the
	// agent waits for its WorkloadGroup first).
	if p != nil {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		d := p.withDefaults()
		pr.probe = &d
	}
	return pr, nil
}

// SetProbe replaces the probe; nil stops probing, and the workload is then
// reported healthy (nothing says otherwise, as for a VM without a probe).
// The health state is kept across a change, and the counts of
// consecutive results start again.
func (p *Prober) SetProbe(probe *Probe) error {
	var next *Probe
	if probe != nil {
		if err := probe.Validate(); err != nil {
			return err
		}
		d := probe.withDefaults()
		next = &d
	}
	p.mu.Lock()
	same := (p.probe == nil && next == nil) || (p.probe != nil && next != nil && reflect.DeepEqual(*p.probe, *next))
	p.probe = next
	p.mu.Unlock()
	// No probe again still signals: the workload is then reported
	// healthy once, if the prober has not said so yet.
	if !same || next == nil {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
	return nil
}

// HasProbe reports whether the prober has a probe to run.
func (p *Prober) HasProbe() bool { return p.current() != nil }

// current returns the probe in use, or nil.
func (p *Prober) current() *Probe {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probe
}

// Last returns the last reported status, or nil before the first report.
func (p *Prober) Last() *Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		return nil
	}
	s := *p.last
	return &s
}

// Run probes until ctx is done.
func (p *Prober) Run(ctx context.Context) error {
	var succ, fail int
	var state *bool
	probe := p.current()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	t.Stop()
	schedule := func(d time.Duration) {
		t.Stop()
		select {
		case <-t.C:
		default:
		}
		t.Reset(d)
	}
	if probe != nil {
		schedule(probe.InitialDelay)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.changed:
			probe = p.current()
			succ, fail = 0, 0
			if probe == nil {
				t.Stop()
				p.log.Info("readiness probe removed")
				if state == nil || !*state {
					h := true
					state = &h
					p.report(ctx, Status{Healthy: true}, nil)
				}
				continue
			}
			p.log.Info("readiness probe set", "probe", probe.String())
			if probe.Exec != nil && p.execUser == nil {
				p.log.Warn("exec readiness probe not run: the workload stays not ready", "reason", ExecDisabledReason)
			}
			if state == nil {
				schedule(probe.InitialDelay)
			} else {
				schedule(0)
			}
			continue
		case <-t.C:
		}
		err := probe.Check(ctx, CheckOptions{DefaultHost: p.host, ExecUser: p.execUser})
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			p.met.checks.WithLabelValues("success").Inc()
			succ, fail = succ+1, 0
		} else {
			p.met.checks.WithLabelValues("failure").Inc()
			succ, fail = 0, fail+1
		}
		var next *Status
		switch {
		case err == nil && succ >= probe.SuccessThreshold && (state == nil || !*state):
			next = &Status{Healthy: true}
		case err != nil && (state == nil || (*state && fail >= probe.FailureThreshold)):
			// Not ready until proven ready; once ready, only after
			// FailureThreshold failures in a row.
			next = &Status{Healthy: false, Message: err.Error()}
		case errors.Is(err, ErrExecDisabled) && (*state || p.lastMessage() != ExecDisabledReason):
			// Not a flaky workload but this VM's configuration: said at
			// once, and said even when the workload was already unhealthy
			// for another reason.
			next = &Status{Healthy: false, Message: ExecDisabledReason}
		}
		if next != nil {
			h := next.Healthy
			state = &h
			p.report(ctx, *next, err)
		}
		schedule(probe.Period)
	}
}

// lastMessage is the reason of the last report ("" before any).
func (p *Prober) lastMessage() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		return ""
	}
	return p.last.Message
}

// report records and reports s; cause is the probe's error behind it, whose
// output (an exec probe's) goes to the local log only, never into s.
func (p *Prober) report(ctx context.Context, s Status, cause error) {
	p.mu.Lock()
	p.last = &s
	p.mu.Unlock()
	if s.Healthy {
		p.met.healthy.Set(1)
	} else {
		p.met.healthy.Set(0)
	}
	args := []any{"healthy", s.Healthy, "reason", s.Message}
	var ee *ExecError
	if errors.As(cause, &ee) && len(ee.Output) > 0 {
		args = append(args, "probe_output", string(ee.Output))
	}
	p.log.Info("workload health changed", args...)
	if err := p.rep.Report(ctx, s); err != nil {
		p.met.reports.WithLabelValues("error").Inc()
		p.log.Warn("reporting health", "error", err)
		return
	}
	p.met.reports.WithLabelValues("ok").Inc()
}
