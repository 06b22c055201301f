package controlplane

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/cmd/internal/httpguard"
	"github.com/vmesh/vmesh/store"
)

// The HTTP port's timeouts. Ordinary requests are read and answered within
// a minute (pprof's CPU profile, 30 s by default, fits; it refuses to run
// longer than the write timeout); the console's live-update streams set
// their own deadlines. An idle keep-alive connection is closed after
// httpIdleTimeout, so idle clients do not hold the connection cap.
const (
	httpReadHeaderTimeout = 10 * time.Second
	httpReadTimeout       = time.Minute
	httpWriteTimeout      = time.Minute
	httpIdleTimeout       = 2 * time.Minute
)

// routeMux is the HTTP port's ServeMux; it remembers every pattern served,
// so that a test can try each one (see ControlPlane.HTTPPaths).
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func newRouteMux() *routeMux { return &routeMux{ServeMux: http.NewServeMux()} }

// Handle registers h for pattern.
func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc registers f for pattern.
func (m *routeMux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(f))
}

// HTTPPaths returns every pattern the HTTP port serves, sorted.
func (cp *ControlPlane) HTTPPaths() []string {
	out := slices.Clone(cp.mux.patterns)
	slices.Sort(out)
	return out
}

// httpToken reads Config.HTTP.TokenFile; "" without one.
func (c Config) httpToken() (string, error) {
	if c.HTTP.TokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.HTTP.TokenFile)
	if err != nil {
		return "", fmt.Errorf("http token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("http token file %s is empty", c.HTTP.TokenFile)
	}
	return tok, nil
}

// webhookSecret is Config.Git.WebhookSecret, or the content of
// Config.Git.WebhookSecretFile when that is set (both set is an error).
func (c Config) webhookSecret() (string, error) {
	g := c.Git
	if g.WebhookSecretFile == "" {
		return g.WebhookSecret, nil
	}
	if g.WebhookSecret != "" {
		return "", errors.New("git: webhookSecret and webhookSecretFile are both set: keep one")
	}
	b, err := os.ReadFile(g.WebhookSecretFile)
	if err != nil {
		return "", fmt.Errorf("git webhook secret file: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("git webhook secret file %s is empty", g.WebhookSecretFile)
	}
	return secret, nil
}

// openPath reports whether a path is served without the HTTP token:
// probes, the version, and the git webhook when it checks its own secret.
func (cp *ControlPlane) openPath(path string) bool {
	switch path {
	case "/ready", "/version":
		return true
	case "/webhook/git":
		return cp.cfg.Git.WebhookSecret != ""
	}
	return false
}

// httpServer returns the HTTP port's server: the Host and token guard
// around the routes, with the port's timeouts.
func (cp *ControlPlane) httpServer() *http.Server {
	guarded := httpguard.Guard(cp.mux, httpguard.Options{
		AllowedHosts: cp.cfg.HTTP.AllowedHosts,
		Token:        cp.httpToken,
		Open:         cp.openPath,
		Refused:      func(reason string) { cp.httpRefused.WithLabelValues(reason).Inc() },
		HostFlag:     "--http-allowed-host (http.allowedHosts)",
		TokenFlag:    "--http-token-file (http.tokenFile)",
	})
	return &http.Server{
		Handler:           guarded,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
	}
}

// newHTTPMetrics are the HTTP port's metrics: the requests its guard and
// limits refused, by reason, and the connections it holds.
func (cp *ControlPlane) newHTTPMetrics() []prometheus.Collector {
	cp.httpRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "vmesh", Subsystem: "http", Name: "refused_total",
		Help: "Requests the HTTP port refused, by reason: host (a Host that is not one of its names: 421), token (401), event_streams (too many console streams open: 503).",
	}, []string{"reason"})
	for _, r := range []string{httpguard.ReasonHost, httpguard.ReasonToken, reasonEventStreams} {
		cp.httpRefused.WithLabelValues(r)
	}
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "vmesh", Subsystem: "http", Name: "connections",
		Help: "Connections the HTTP port holds open; at http.maxConnections new ones wait.",
	}, func() float64 {
		if l, ok := cp.httpLis.(*httpguard.Limited); ok {
			return float64(l.Open())
		}
		return 0
	})
	return []prometheus.Collector{cp.httpRefused, open}
}

// reasonEventStreams labels the console streams refused at the cap.
const reasonEventStreams = "event_streams"

// loopbackOnly reports whether a listener accepts loopback connections only.
func loopbackOnly(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// warnOpenHTTP logs, and shows as warning VM1020 of the source "http", an
// HTTP port bound beyond loopback with no token: /debug, /ui and /metrics
// are then open to every host that reaches it.
func (cp *ControlPlane) warnOpenHTTP() {
	if cp.httpToken != "" || loopbackOnly(cp.httpLis.Addr()) {
		return
	}
	msg := fmt.Sprintf("the HTTP port %s listens beyond loopback with no token: /debug/*, /ui/ and /metrics are open to every host that reaches it; set --http-token-file (http.tokenFile), or bind --http-addr to loopback and use an SSH tunnel", cp.HTTPAddr())
	cp.log.Warn(msg, "code", store.CodeHTTPPortUnauthenticated)
	cp.store.SetStatus(store.Source{Name: "http", Class: store.ClassConfig}, "", []store.ConfigError{{
		Field: "httpAddr", Severity: store.SeverityWarning, Code: store.CodeHTTPPortUnauthenticated, Message: msg,
	}})
}
