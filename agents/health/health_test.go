package health_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/agents/health"
)

// app is a local HTTP workload whose readiness endpoint can be switched.
type app struct {
	srv    *httptest.Server
	ready  atomic.Bool
	header atomic.Value
}

func newApp(t *testing.T) *app {
	a := &app{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.header.Store(r.Header.Get("X-Probe"))
		switch {
		case r.URL.Path == "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case r.URL.Path != "/ready":
			http.NotFound(w, r)
		case a.ready.Load():
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *app) port(t *testing.T) int {
	u, _ := url.Parse(a.srv.URL)
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHTTPProbe(t *testing.T) {
	a := newApp(t)
	ctx := context.Background()
	p := health.Probe{HTTP: &health.HTTPGet{Port: a.port(t), Path: "/ready", Header: http.Header{"X-Probe": {"yes"}}}}
	if err := p.Check(ctx, health.CheckOptions{DefaultHost: "127.0.0.1"}); err == nil {
		t.Fatal("503 counted as ready")
	}
	a.ready.Store(true)
	if err := p.Check(ctx, health.CheckOptions{DefaultHost: "127.0.0.1"}); err != nil {
		t.Fatalf("200: %v", err)
	}
	if got := a.header.Load(); got != "yes" {
		t.Fatalf("probe header %v, want yes", got)
	}
	if err := (health.Probe{HTTP: &health.HTTPGet{Port: a.port(t), Path: "redirect"}}).Check(ctx, health.CheckOptions{DefaultHost: "127.0.0.1"}); err != nil {
		t.Fatalf("a 302 is ready (Kubernetes semantics): %v", err)
	}
	if err := (health.Probe{HTTP: &health.HTTPGet{Port: a.port(t), Path: "/missing"}}).Check(ctx, health.CheckOptions{DefaultHost: "127.0.0.1"}); err == nil {
		t.Fatal("404 counted as ready")
	}
	a.srv.Close()
	if err := p.Check(ctx, health.CheckOptions{DefaultHost: "127.0.0.1"}); err == nil {
		t.Fatal("a closed port counted as ready")
	}
}

func TestTCPProbe(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	p := health.Probe{TCP: &health.TCPSocket{Host: "127.0.0.1", Port: port}}
	if err := p.Check(context.Background(), health.CheckOptions{DefaultHost: "ignored.invalid"}); err != nil {
		t.Fatalf("open port: %v", err)
	}
	lis.Close()
	if err := p.Check(context.Background(), health.CheckOptions{DefaultHost: ""}); err == nil {
		t.Fatal("closed port counted as ready")
	}
}

func TestFromIstio(t *testing.T) {
	p, err := health.FromIstio(&networkingv1alpha3.ReadinessProbe{
		PeriodSeconds: 5, FailureThreshold: 2, TimeoutSeconds: 2,
		HealthCheckMethod: &networkingv1alpha3.ReadinessProbe_HttpGet{HttpGet: &networkingv1alpha3.HTTPHealthCheckConfig{
			Path: "/healthz", Port: 8080, Scheme: "HTTPS", HttpHeaders: []*networkingv1alpha3.HTTPHeader{{Name: "X-A", Value: "b"}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.HTTP == nil || p.HTTP.Port != 8080 || p.HTTP.Path != "/healthz" || p.HTTP.Scheme != "https" || p.HTTP.Header.Get("X-A") != "b" ||
		p.Period != 5*time.Second || p.Timeout != 2*time.Second || p.FailureThreshold != 2 {
		t.Fatalf("converted %+v (http %+v)", p, p.HTTP)
	}
	if _, err := health.FromIstio(&networkingv1alpha3.ReadinessProbe{HealthCheckMethod: &networkingv1alpha3.ReadinessProbe_TcpSocket{TcpSocket: &networkingv1alpha3.TCPHealthCheckConfig{}}}); err == nil {
		t.Fatal("TCP probe without a port accepted")
	}
	if _, err := health.FromIstio(&networkingv1alpha3.ReadinessProbe{}); err == nil {
		t.Fatal("probe without a method accepted")
	}
	e, err := health.FromIstio(&networkingv1alpha3.ReadinessProbe{HealthCheckMethod: &networkingv1alpha3.ReadinessProbe_Exec{Exec: &networkingv1alpha3.ExecHealthCheckConfig{Command: []string{"true"}}}})
	if err != nil || e.Exec == nil || e.Exec.Command[0] != "true" {
		t.Fatalf("exec: %+v, %v", e, err)
	}
}

// TestProberReportsTransitions: the workload starts unhealthy, turns
// healthy when the probe passes, and unhealthy again only after
// FailureThreshold failures in a row; nothing is reported without a change.
func TestProberReportsTransitions(t *testing.T) {
	a := newApp(t)
	pr, reports := runProber(t, &health.Probe{
		HTTP: &health.HTTPGet{Port: a.port(t), Path: "/ready"}, Period: 20 * time.Millisecond, FailureThreshold: 3,
	})
	next := func() health.Status { t.Helper(); return nextReport(t, reports) }
	if s := next(); s.Healthy || s.Message == "" {
		t.Fatalf("first report %+v, want unhealthy with a reason", s)
	}
	a.ready.Store(true)
	if s := next(); !s.Healthy {
		t.Fatalf("after the app is ready: %+v", s)
	}
	a.ready.Store(false)
	failedAt := time.Now()
	if s := next(); s.Healthy {
		t.Fatalf("after the app fails: %+v", s)
	}
	if d := time.Since(failedAt); d < 40*time.Millisecond {
		t.Fatalf("unhealthy after %s: sooner than 3 failures 20ms apart", d)
	}
	select {
	case s := <-reports:
		t.Fatalf("report without a change: %+v", s)
	case <-time.After(100 * time.Millisecond):
	}
	if l := pr.Last(); l == nil || l.Healthy {
		t.Fatalf("Last = %+v", l)
	}
}

func TestParseProbe(t *testing.T) {
	p, err := health.ParseProbe([]byte(`
periodSeconds: 3
failureThreshold: 2
httpGet:
  path: /ready
  port: 8080
  httpHeaders:
  - name: X-Check
    value: "1"
`))
	if err != nil {
		t.Fatal(err)
	}
	if p.HTTP == nil || p.HTTP.Port != 8080 || p.HTTP.Path != "/ready" || p.HTTP.Header.Get("X-Check") != "1" || p.Period != 3*time.Second || p.FailureThreshold != 2 {
		t.Fatalf("parsed %+v (http %+v)", p, p.HTTP)
	}
	if _, err := health.ParseProbe([]byte(`{"exec": {"command": ["/bin/true"]}, "timeoutSeconds": 2}`)); err != nil {
		t.Fatalf("JSON exec probe: %v", err)
	}
	for _, bad := range []string{"httpGet: {port: 0}", "nosuchField: 1", "tcpSocket: [1]"} {
		if _, err := health.ParseProbe([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// TestGRPCProbe: a WorkloadGroup's grpc probe (the quickstart's) asks the
// workload's gRPC health service with grpc-go's health client: SERVING is
// ready, NOT_SERVING and an unknown service are not, nor is nothing
// listening.
func TestGRPCProbe(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := grpchealth.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	port := lis.Addr().(*net.TCPAddr).Port

	p, err := health.ParseProbe([]byte("periodSeconds: 5\ngrpc:\n  port: " + strconv.Itoa(port) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.GRPC == nil || p.GRPC.Port != port || p.Period != 5*time.Second {
		t.Fatalf("parsed %+v", p)
	}
	ctx := context.Background()
	if err := p.Check(ctx, health.CheckOptions{DefaultHost: "127.0.0.1"}); err != nil {
		t.Fatalf("SERVING: %v", err)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := p.Check(ctx, health.CheckOptions{DefaultHost: "127.0.0.1"}); err == nil {
		t.Fatal("NOT_SERVING passed")
	}
	named := health.Probe{GRPC: &health.GRPC{Port: port, Service: "greeter"}}
	if err := named.Check(ctx, health.CheckOptions{DefaultHost: "127.0.0.1"}); err == nil {
		t.Fatal("an unknown service passed")
	}
	hs.SetServingStatus("greeter", healthpb.HealthCheckResponse_SERVING)
	if err := named.Check(ctx, health.CheckOptions{DefaultHost: "127.0.0.1"}); err != nil {
		t.Fatalf("named service SERVING: %v", err)
	}
	srv.Stop()
	if err := p.Check(ctx, health.CheckOptions{DefaultHost: "127.0.0.1"}); err == nil {
		t.Fatal("a stopped server passed")
	}
	if err := (health.Probe{GRPC: &health.GRPC{}}).Validate(); err == nil {
		t.Fatal("port 0 accepted")
	}
}

// TestProberFollowsSetProbe: a prober without a probe reports nothing; a
// probe given later runs (a closed port: unhealthy), a probe that passes
// replaces it (healthy), and removing the probe leaves the workload
// healthy after a failing one.
func TestProberFollowsSetProbe(t *testing.T) {
	a := newApp(t)
	a.ready.Store(true)
	pr, reports := runProber(t, nil)
	next := func() health.Status { t.Helper(); return nextReport(t, reports) }
	closed := closedPort(t)
	if err := pr.SetProbe(&health.Probe{TCP: &health.TCPSocket{Port: closed}, Period: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if s := next(); s.Healthy {
		t.Fatalf("closed port probed healthy: %+v", s)
	}
	if err := pr.SetProbe(&health.Probe{HTTP: &health.HTTPGet{Port: a.port(t), Path: "/ready"}, Period: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if s := next(); !s.Healthy {
		t.Fatalf("new passing probe: %+v", s)
	}
	if err := pr.SetProbe(&health.Probe{TCP: &health.TCPSocket{Port: closed}, Period: 20 * time.Millisecond, FailureThreshold: 1}); err != nil {
		t.Fatal(err)
	}
	if s := next(); s.Healthy {
		t.Fatalf("failing probe again: %+v", s)
	}
	if err := pr.SetProbe(nil); err != nil {
		t.Fatal(err)
	}
	if s := next(); !s.Healthy {
		t.Fatalf("probe removed: %+v, want healthy", s)
	}
	if err := pr.SetProbe(&health.Probe{}); err == nil {
		t.Fatal("a probe without a method was accepted")
	}
}

// runProber runs a prober of p (nil: none yet) on loopback until the test
// ends, and returns it with the channel of its reports.
func runProber(t *testing.T, p *health.Probe) (*health.Prober, <-chan health.Status) {
	t.Helper()
	reports := make(chan health.Status, 16)
	pr, err := health.NewProber(p, "127.0.0.1", health.ReporterFunc(func(_ context.Context, s health.Status) error {
		reports <- s
		return nil
	}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return pr, reports
}

// nextReport waits for the next report on reports.
func nextReport(t *testing.T, reports <-chan health.Status) health.Status {
	t.Helper()
	select {
	case s := <-reports:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no report")
		return health.Status{}
	}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}
