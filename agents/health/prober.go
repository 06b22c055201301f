package health

import (
	"context"
	"fmt"
	"log/slog"
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
// unhealthy after FailureThreshold consecutive failures.
type Prober struct {
	probe Probe
	host  string
	rep   Reporter
	log   *slog.Logger
	met   *metrics

	mu   sync.Mutex
	last *Status
}

// NewProber checks p and returns a Prober that probes defaultHost when the
// probe names no host. Metrics are registered on reg when it is not nil.
func NewProber(p Probe, defaultHost string, rep Reporter, logger *slog.Logger, reg prometheus.Registerer) (*Prober, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if rep == nil {
		return nil, fmt.Errorf("health: no reporter")
	}
	if logger == nil {
		logger = slog.Default()
	}
	if defaultHost == "" {
		defaultHost = "127.0.0.1"
	}
	return &Prober{probe: p.withDefaults(), host: defaultHost, rep: rep, log: logger, met: newMetrics(reg)}, nil
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
	t := time.NewTimer(p.probe.InitialDelay)
	defer t.Stop()
	var succ, fail int
	var state *bool
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := p.probe.Check(ctx, p.host)
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
		case err == nil && succ >= p.probe.SuccessThreshold && (state == nil || !*state):
			next = &Status{Healthy: true}
		case err != nil && (state == nil || (*state && fail >= p.probe.FailureThreshold)):
			// Not ready until proven ready; once ready, only after
			// FailureThreshold failures in a row.
			next = &Status{Healthy: false, Message: err.Error()}
		}
		if next != nil {
			h := next.Healthy
			state = &h
			p.report(ctx, *next)
		}
		t.Reset(p.probe.Period)
	}
}

func (p *Prober) report(ctx context.Context, s Status) {
	p.mu.Lock()
	p.last = &s
	p.mu.Unlock()
	if s.Healthy {
		p.met.healthy.Set(1)
	} else {
		p.met.healthy.Set(0)
	}
	p.log.Info("workload health changed", "healthy", s.Healthy, "reason", s.Message)
	if err := p.rep.Report(ctx, s); err != nil {
		p.met.reports.WithLabelValues("error").Inc()
		p.log.Warn("reporting health", "error", err)
		return
	}
	p.met.reports.WithLabelValues("ok").Inc()
}
