package envoy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/agents/envoy"
	"github.com/vmesh/vmesh/agents/internal/agenttest"
	"github.com/vmesh/vmesh/internal/retry"
)

// fakeEnvoy writes a shell script that behaves like a process under
// supervision: it logs "start <args>" to log, exits 1 at once while the
// file crash exists, and otherwise runs until SIGTERM (logging "term") or,
// with ignoreTerm, until SIGKILL.
func fakeEnvoy(t *testing.T, dir string, ignoreTerm bool) (bin, log, crash string) {
	t.Helper()
	bin, log, crash = filepath.Join(dir, "envoy"), filepath.Join(dir, "log"), filepath.Join(dir, "crash")
	onTerm := `echo term >> "` + log + `"; exit 0`
	if ignoreTerm {
		onTerm = `echo ignored >> "` + log + `"`
	}
	script := fmt.Sprintf(`#!/bin/sh
echo "start $*" >> %[1]q
if [ -e %[2]q ]; then exit 1; fi
trap '%[3]s' TERM
while :; do sleep 0.02; done
`, log, crash, onTerm)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log, crash
}

func lines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// admin is a fake Envoy admin endpoint recording drain requests.
type admin struct {
	mu     sync.Mutex
	drains []string
	srv    *httptest.Server
}

func newAdmin(t *testing.T) *admin {
	a := &admin{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.drains = append(a.drains, r.Method+" "+r.URL.String())
		a.mu.Unlock()
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *admin) addr() string { return strings.TrimPrefix(a.srv.URL, "http://") }

func (a *admin) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.drains...)
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	if p, err := envoy.Find(""); p != "" || err != nil {
		t.Fatalf("no envoy on PATH: Find = %q, %v; want \"\", nil (proxyless-only VM)", p, err)
	}
	if _, err := envoy.Find(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a configured binary that does not exist was accepted")
	}
	bin, _, _ := fakeEnvoy(t, dir, false)
	if p, err := envoy.Find(""); p != bin || err != nil {
		t.Fatalf("Find on PATH = %q, %v; want %s", p, err, bin)
	}
}

// TestDrainsThenStops: on shutdown the supervisor asks the admin endpoint to
// drain, waits the drain time, then sends SIGTERM.
func TestDrainsThenStops(t *testing.T) {
	dir := t.TempDir()
	bin, log, _ := fakeEnvoy(t, dir, false)
	a := newAdmin(t)
	reg := prometheus.NewRegistry()
	s, err := envoy.New(envoy.Config{Binary: bin, Bootstrap: "/etc/vmesh/envoy.json", Stderr: io.Discard, AdminAddr: a.addr(), Drain: 200 * time.Millisecond, Grace: 2 * time.Second}, agenttest.Logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "envoy to start", func() bool { return len(lines(t, log)) == 1 })
	if got := lines(t, log)[0]; !strings.Contains(got, "-c_/etc/vmesh/envoy.json") || !strings.Contains(got, "--drain-time-s_1") {
		t.Fatalf("command line %q", got)
	}
	stopAt := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if d := time.Since(stopAt); d < 200*time.Millisecond {
		t.Fatalf("stopped after %s, before the 200ms drain", d)
	}
	if c := a.calls(); len(c) != 1 || c[0] != "POST /drain_listeners?graceful" {
		t.Fatalf("admin calls %v, want one graceful drain", c)
	}
	if l := lines(t, log); len(l) != 2 || l[1] != "term" {
		t.Fatalf("log %v, want start then term", l)
	}
	if v := metric(t, reg, "vmesh_envoy_running"); v != 0 {
		t.Fatalf("running gauge %v after stop", v)
	}
	if v := metric(t, reg, "vmesh_envoy_exits_total"); v != 1 {
		t.Fatalf("exits %v, want 1", v)
	}
}

// metric sums every series of a metric.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestRestartsWithBackoff: a crashing Envoy is restarted, with growing
// delays, and runs normally once it stops crashing.
func TestRestartsWithBackoff(t *testing.T) {
	dir := t.TempDir()
	bin, log, crash := fakeEnvoy(t, dir, false)
	if err := os.WriteFile(crash, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a := newAdmin(t)
	reg := prometheus.NewRegistry()
	s, err := envoy.New(envoy.Config{Binary: bin, Bootstrap: "b.json", Stderr: io.Discard, AdminAddr: a.addr(), Drain: 10 * time.Millisecond,
		RestartMin: 50 * time.Millisecond, RestartMax: time.Second}, agenttest.Logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	start := time.Now()
	// Count exits, not starts: a start logged before the crash file is
	// removed may still find it gone and keep running.
	waitFor(t, "three crashes", func() bool { return metric(t, reg, "vmesh_envoy_exits_total") >= 3 })
	// Delays 50ms then 100ms between the three starts, each within ±20 %
	// (retry.Jitter): at least 120ms in all.
	if d := time.Since(start); d < time.Duration(float64(150*time.Millisecond)*(1-retry.Jitter)) {
		t.Fatalf("three starts within %s: no backoff", d)
	}
	if err := os.Remove(crash); err != nil {
		t.Fatal(err)
	}
	// Let any start still in its backoff happen (the backoff is at most
	// 400ms by now), then expect no more.
	time.Sleep(time.Second)
	if metric(t, reg, "vmesh_envoy_running") != 1 {
		t.Fatal("envoy not running after it stopped crashing")
	}
	n := len(lines(t, log))
	time.Sleep(300 * time.Millisecond)
	if got := len(lines(t, log)); got != n {
		t.Fatalf("restarted while healthy: %d starts, then %d", n, got)
	}
	if c := metric(t, reg, "vmesh_envoy_exits_total"); c < 3 {
		t.Fatalf("exits %v, want >= 3 crashes", c)
	}
}

// TestKillsAfterGrace: an Envoy that ignores SIGTERM is killed after the
// grace period, and a failing admin endpoint does not block shutdown.
func TestKillsAfterGrace(t *testing.T) {
	dir := t.TempDir()
	bin, log, _ := fakeEnvoy(t, dir, true)
	s, err := envoy.New(envoy.Config{Binary: bin, Bootstrap: "b.json", Stderr: io.Discard, AdminAddr: "127.0.0.1:1", Grace: 300 * time.Millisecond}, agenttest.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "envoy to start", func() bool { return len(lines(t, log)) == 1 })
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return: the process was not killed")
	}
	if l := lines(t, log); len(l) < 2 || l[1] != "ignored" {
		t.Fatalf("log %v: SIGTERM was not sent first", l)
	}
}
