package testenv

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Prometheus is a Prometheus server (Debian's prometheus package) on a
// loopback port, its storage in a temporary directory.
type Prometheus struct {
	// URL is the server's base address, http://127.0.0.1:PORT.
	URL string
}

// PrometheusBinary returns /usr/bin/prometheus, else `prometheus` on PATH,
// else "".
func PrometheusBinary() string {
	for _, p := range []string{"/usr/bin/prometheus", "prometheus"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	return ""
}

// StartPrometheus runs the real Prometheus with config (the text of a
// prometheus.yml) until the test ends, and waits until it is ready
// (/-/ready). Its port is one the kernel found free; a server that
// could not bind it (another process took it in between) is started
// again on another. With CI=true a missing binary fails the test, else it
// skips.
func StartPrometheus(t testing.TB, config string) *Prometheus {
	t.Helper()
	bin := PrometheusBinary()
	if bin == "" {
		Missing(t, "prometheus not found at /usr/bin/prometheus or on PATH (Debian package prometheus)")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatalf("testenv: prometheus config: %v", err)
	}
	var lastLog []byte
	for try := 1; try <= 3; try++ {
		addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		logPath := filepath.Join(dir, fmt.Sprintf("prometheus-%d.log", try))
		ready, out := runPrometheus(t, bin, cfg, filepath.Join(dir, fmt.Sprintf("data-%d", try)), addr, logPath)
		if ready {
			return &Prometheus{URL: "http://" + addr}
		}
		lastLog = out
		if !bytes.Contains(out, []byte("address already in use")) {
			break
		}
	}
	t.Fatalf("testenv: prometheus did not start:\n%s", tail(lastLog, 4000))
	return nil
}

// runPrometheus starts one server and waits until it is ready (true) or
// has exited (false, with its log).
func runPrometheus(t testing.TB, bin, cfg, data, addr, logPath string) (bool, []byte) {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("testenv: prometheus log: %v", err)
	}
	cmd := exec.Command(bin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+data,
		"--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("testenv: start prometheus: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := client.Get("http://" + addr + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Cleanup(stop)
				return true, nil
			}
		}
		select {
		case <-done:
			out, _ := os.ReadFile(logPath)
			return false, out
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			out, _ := os.ReadFile(logPath)
			t.Fatalf("testenv: prometheus not ready within 30s:\n%s", tail(out, 4000))
		}
	}
}

// PrometheusTarget is one scrape target of PrometheusScrapeConfig.
type PrometheusTarget struct {
	// Addr is host:port; the metrics are read from /metrics.
	Addr string
	// Labels are put on every series of the target.
	Labels map[string]string
}

// PrometheusScrapeConfig returns a prometheus.yml that scrapes the
// targets every interval (its scrape timeout the same).
func PrometheusScrapeConfig(interval time.Duration, targets ...PrometheusTarget) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n", promDuration(interval), promDuration(interval), promDuration(interval))
	b.WriteString("scrape_configs:\n- job_name: apps\n  static_configs:\n")
	for _, tg := range targets {
		fmt.Fprintf(&b, "  - targets: [%q]\n", tg.Addr)
		if len(tg.Labels) > 0 {
			b.WriteString("    labels:\n")
			for _, k := range slices.Sorted(maps.Keys(tg.Labels)) {
				fmt.Fprintf(&b, "      %s: %q\n", k, tg.Labels[k])
			}
		}
	}
	return b.String()
}

// promDuration is d in Prometheus's duration syntax (whole milliseconds).
func promDuration(d time.Duration) string {
	return fmt.Sprintf("%dms", d.Milliseconds())
}
