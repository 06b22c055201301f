// Package envoy supervises the VM's Envoy sidecar: it starts Envoy with the
// agent's bootstrap when a binary is configured or found on PATH, restarts
// it with backoff when it exits, and on shutdown drains its listeners
// through the admin endpoint before stopping it (SIGTERM, then SIGKILL after
// a grace period). A VM without Envoy (proxyless gRPC only) runs no
// supervisor at all: see Find.
package envoy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/internal/retry"
)

// DefaultBinary is the name looked up on PATH.
const DefaultBinary = "envoy"

// Defaults for Config.
const (
	DefaultDrain      = 5 * time.Second
	DefaultGrace      = 5 * time.Second
	DefaultRestartMin = time.Second
	DefaultRestartMax = 30 * time.Second
)

// Find resolves the Envoy binary: binary itself when set (an error if it is
// not an executable file), else "envoy" on PATH; it returns "" without an
// error when no Envoy is installed.
func Find(binary string) (string, error) {
	if binary != "" {
		p, err := exec.LookPath(binary)
		if err != nil {
			return "", fmt.Errorf("envoy: binary %q: %w", binary, err)
		}
		return p, nil
	}
	p, err := exec.LookPath(DefaultBinary)
	if errors.Is(err, exec.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("envoy: %w", err)
	}
	return p, nil
}

// Config configures a Supervisor.
type Config struct {
	// Binary is the resolved path of the Envoy executable (see Find).
	Binary string
	// Bootstrap is the path of the bootstrap file passed with -c.
	Bootstrap string
	// AdminAddr is the admin endpoint's host:port (the bootstrap's admin
	// address), used to drain listeners at shutdown.
	AdminAddr string
	// Args are appended to Envoy's command line.
	Args []string
	// Drain is how long listeners drain before Envoy is stopped; it is also
	// passed as --drain-time-s.
	Drain time.Duration
	// Grace is how long Envoy may take to exit after SIGTERM before SIGKILL.
	Grace time.Duration
	// RestartMin and RestartMax bound the restart backoff; the backoff
	// resets once Envoy has run for RestartMax.
	RestartMin, RestartMax time.Duration
	// Stdout and Stderr receive Envoy's output; nil means the agent's.
	Stdout, Stderr io.Writer
	// Credential, when set, is the user and group Envoy runs as (with
	// traffic capture, the proxy UID/GID the capture rules exclude).
	Credential *syscall.Credential
}

// Supervisor runs one Envoy process at a time.
type Supervisor struct {
	cfg Config
	log *slog.Logger
	met *metrics
}

// New checks cfg and returns a Supervisor. Metrics are registered on reg
// when it is not nil.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Supervisor, error) {
	if cfg.Binary == "" || cfg.Bootstrap == "" {
		return nil, errors.New("envoy: binary and bootstrap are required")
	}
	if _, _, err := net.SplitHostPort(cfg.AdminAddr); err != nil {
		return nil, fmt.Errorf("envoy: admin address %q: %w", cfg.AdminAddr, err)
	}
	if cfg.Drain <= 0 {
		cfg.Drain = DefaultDrain
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.RestartMin <= 0 {
		cfg.RestartMin = DefaultRestartMin
	}
	if cfg.RestartMax < cfg.RestartMin {
		cfg.RestartMax = max(DefaultRestartMax, cfg.RestartMin)
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Supervisor{cfg: cfg, log: logger, met: newMetrics(reg)}, nil
}

// Command returns Envoy's command line (without the binary).
func (s *Supervisor) Command() []string {
	drain := int64((s.cfg.Drain + time.Second - 1) / time.Second)
	return append([]string{
		"-c", s.cfg.Bootstrap,
		"--drain-time-s", strconv.FormatInt(drain, 10),
		"--drain-strategy", "immediate",
		"--disable-hot-restart",
	}, s.cfg.Args...)
}

// Run keeps Envoy running until ctx is done, then drains and stops it. It
// returns an error only when Envoy cannot be started at all.
func (s *Supervisor) Run(ctx context.Context) error {
	backoff := retry.New(s.cfg.RestartMin, s.cfg.RestartMax)
	for {
		cmd := exec.Command(s.cfg.Binary, s.Command()...)
		cmd.Stdout, cmd.Stderr = s.cfg.Stdout, s.cfg.Stderr
		// Own process group, so stopping reaches Envoy's children too and a
		// terminal's ^C reaches only the agent, which then drains Envoy.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cfg.Credential}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("envoy: start %s: %w", s.cfg.Binary, err)
		}
		started := time.Now()
		s.met.starts.Inc()
		s.met.running.Set(1)
		s.log.Info("envoy started", "pid", cmd.Process.Pid, "binary", s.cfg.Binary)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-ctx.Done():
			s.stop(cmd, exited)
			s.met.running.Set(0)
			s.met.exits.WithLabelValues("stop").Inc()
			return nil
		case err := <-exited:
			s.met.running.Set(0)
			s.met.exits.WithLabelValues("crash").Inc()
			if time.Since(started) >= s.cfg.RestartMax {
				backoff.Reset()
			}
			wait := backoff.Next()
			s.log.Warn("envoy exited; restarting", "error", err, "ran", time.Since(started).Round(time.Millisecond), "restart_in", wait)
			if !retry.Sleep(ctx, wait) {
				return nil
			}
		}
	}
}

// stop drains Envoy's listeners, waits the drain time (or until Envoy
// exits), then sends SIGTERM and, after the grace period, SIGKILL.
func (s *Supervisor) stop(cmd *exec.Cmd, exited <-chan error) {
	pid := cmd.Process.Pid
	if err := s.drain(); err != nil {
		s.log.Warn("draining envoy listeners failed; stopping it now", "error", err)
	} else {
		s.log.Info("draining envoy listeners", "for", s.cfg.Drain)
		t := time.NewTimer(s.cfg.Drain)
		select {
		case <-exited:
			t.Stop()
			return
		case <-t.C:
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t := time.NewTimer(s.cfg.Grace)
	defer t.Stop()
	select {
	case <-exited:
		s.log.Info("envoy stopped", "pid", pid)
	case <-t.C:
		s.log.Warn("envoy ignored SIGTERM; killing it", "pid", pid, "grace", s.cfg.Grace)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-exited
	}
}

// drain asks Envoy's admin endpoint to drain every listener gracefully.
func (s *Supervisor) drain() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.cfg.AdminAddr+"/drain_listeners?graceful", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("drain_listeners: status %d", resp.StatusCode)
	}
	return nil
}
