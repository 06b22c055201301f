// Package health runs a workload's readiness probe (HTTP GET, TCP connect, gRPC health or
// a command, from the WorkloadGroup's probe spec) and hands every change of
// the workload's health to a Reporter, which tells the control plane.
package health

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
)

// Probe defaults, Kubernetes' and Istio's.
const (
	DefaultTimeout          = time.Second
	DefaultPeriod           = 10 * time.Second
	DefaultSuccessThreshold = 1
	DefaultFailureThreshold = 3
)

// Probe is one readiness check and its timing. Exactly one of HTTP, TCP,
// Exec and GRPC is set.
type Probe struct {
	HTTP *HTTPGet
	TCP  *TCPSocket
	Exec *Exec
	GRPC *GRPC

	InitialDelay     time.Duration
	Timeout          time.Duration
	Period           time.Duration
	SuccessThreshold int
	FailureThreshold int
}

// HTTPGet succeeds on a 2xx or 3xx answer to GET scheme://host:port/path.
type HTTPGet struct {
	// Host defaults to the prober's default host (the VM's loopback).
	Host   string
	Port   int
	Path   string
	Scheme string // "http" (default) or "https" (certificate not verified, as in Kubernetes)
	Header http.Header
}

// TCPSocket succeeds when a TCP connection to host:port opens.
type TCPSocket struct {
	Host string
	Port int
}

// Exec succeeds when the command exits with status 0. It runs only where
// the VM's agent allows exec probes (CheckOptions.ExecUser), as that
// unprivileged account, without capabilities, supplementary groups or the
// agent's environment; its output never leaves the VM.
type Exec struct {
	Command []string
}

// GRPC succeeds when the gRPC health service (grpc.health.v1.Health/Check)
// on host:port answers SERVING for Service ("" = the whole server), as
// Kubernetes' gRPC probe: plaintext, no xDS.
type GRPC struct {
	Host    string
	Port    int
	Service string
}

// FromIstio converts a WorkloadGroup readiness probe.
func FromIstio(p *networkingv1alpha3.ReadinessProbe) (Probe, error) {
	out := Probe{
		InitialDelay:     time.Duration(p.GetInitialDelaySeconds()) * time.Second,
		Timeout:          time.Duration(p.GetTimeoutSeconds()) * time.Second,
		Period:           time.Duration(p.GetPeriodSeconds()) * time.Second,
		SuccessThreshold: int(p.GetSuccessThreshold()),
		FailureThreshold: int(p.GetFailureThreshold()),
	}
	switch m := p.GetHealthCheckMethod().(type) {
	case *networkingv1alpha3.ReadinessProbe_HttpGet:
		h := &HTTPGet{Host: m.HttpGet.GetHost(), Port: int(m.HttpGet.GetPort()), Path: m.HttpGet.GetPath(), Scheme: strings.ToLower(m.HttpGet.GetScheme())}
		for _, hd := range m.HttpGet.GetHttpHeaders() {
			if h.Header == nil {
				h.Header = http.Header{}
			}
			h.Header.Add(hd.GetName(), hd.GetValue())
		}
		out.HTTP = h
	case *networkingv1alpha3.ReadinessProbe_TcpSocket:
		out.TCP = &TCPSocket{Host: m.TcpSocket.GetHost(), Port: int(m.TcpSocket.GetPort())}
	case *networkingv1alpha3.ReadinessProbe_Exec:
		out.Exec = &Exec{Command: m.Exec.GetCommand()}
	case *networkingv1alpha3.ReadinessProbe_Grpc:
		out.GRPC = &GRPC{Port: int(m.Grpc.GetPort()), Service: m.Grpc.GetService()}
	default:
		return Probe{}, errors.New("health: probe has no health check method")
	}
	return out, out.Validate()
}

// String describes the probe's method for logs: "http :8080/ready",
// "tcp :9080", "exec [cmd ...]" or "grpc :9080".
func (p Probe) String() string {
	switch {
	case p.HTTP != nil:
		return fmt.Sprintf("http %s:%d%s", p.HTTP.Host, p.HTTP.Port, p.HTTP.Path)
	case p.TCP != nil:
		return fmt.Sprintf("tcp %s:%d", p.TCP.Host, p.TCP.Port)
	case p.Exec != nil:
		return fmt.Sprintf("exec %q", p.Exec.Command)
	case p.GRPC != nil:
		return fmt.Sprintf("grpc %s:%d %s", p.GRPC.Host, p.GRPC.Port, p.GRPC.Service)
	}
	return "none"
}

// withDefaults fills zero fields.
func (p Probe) withDefaults() Probe {
	if p.Timeout <= 0 {
		p.Timeout = DefaultTimeout
	}
	if p.Period <= 0 {
		p.Period = DefaultPeriod
	}
	if p.SuccessThreshold <= 0 {
		p.SuccessThreshold = DefaultSuccessThreshold
	}
	if p.FailureThreshold <= 0 {
		p.FailureThreshold = DefaultFailureThreshold
	}
	return p
}

// Validate checks that exactly one method is set and is complete.
func (p Probe) Validate() error {
	n := 0
	if p.HTTP != nil {
		n++
		if p.HTTP.Port <= 0 || p.HTTP.Port > 65535 {
			return fmt.Errorf("health: HTTP probe port %d", p.HTTP.Port)
		}
		if s := p.HTTP.Scheme; s != "" && s != "http" && s != "https" {
			return fmt.Errorf("health: HTTP probe scheme %q", s)
		}
	}
	if p.TCP != nil {
		n++
		if p.TCP.Port <= 0 || p.TCP.Port > 65535 {
			return fmt.Errorf("health: TCP probe port %d", p.TCP.Port)
		}
	}
	if p.Exec != nil {
		n++
		if len(p.Exec.Command) == 0 {
			return errors.New("health: exec probe has no command")
		}
	}
	if p.GRPC != nil {
		n++
		if p.GRPC.Port <= 0 || p.GRPC.Port > 65535 {
			return fmt.Errorf("health: gRPC probe port %d", p.GRPC.Port)
		}
	}
	if n != 1 {
		return fmt.Errorf("health: probe has %d methods, want exactly one", n)
	}
	if p.InitialDelay < 0 || p.Timeout < 0 || p.Period < 0 || p.SuccessThreshold < 0 || p.FailureThreshold < 0 {
		return errors.New("health: negative probe timing")
	}
	return nil
}

// CheckOptions are the VM's own settings a probe runs with.
type CheckOptions struct {
	// DefaultHost is the host probed when the probe names none.
	DefaultHost string
	// ExecUser, when set, allows exec probes and is the account they run
	// as (LookupExecUser); nil: an exec probe is not run and Check returns
	// ErrExecDisabled.
	ExecUser *ExecUser
}

// Check runs the probe once and returns nil when the workload is ready.
// An exec probe's failure is an *ExecError, whose message carries no
// output of the command.
func (p Probe) Check(ctx context.Context, opts CheckOptions) error {
	p = p.withDefaults()
	if p.Exec != nil && opts.ExecUser == nil {
		return ErrExecDisabled
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	host := func(h string) string {
		if h != "" {
			return h
		}
		return opts.DefaultHost
	}
	switch {
	case p.HTTP != nil:
		return checkHTTP(ctx, p.HTTP, host(p.HTTP.Host))
	case p.TCP != nil:
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host(p.TCP.Host), strconv.Itoa(p.TCP.Port)))
		if err != nil {
			return fmt.Errorf("tcp probe: %w", err)
		}
		return c.Close()
	case p.Exec != nil:
		return runExec(ctx, p.Exec, opts.ExecUser, p.Timeout)
	case p.GRPC != nil:
		return checkGRPC(ctx, p.GRPC, host(p.GRPC.Host))
	}
	return errors.New("health: probe has no method")
}

func checkHTTP(ctx context.Context, h *HTTPGet, host string) error {
	scheme := h.Scheme
	if scheme == "" {
		scheme = "http"
	}
	path := h.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	url := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(h.Port)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("http probe: %w", err)
	}
	for k, vs := range h.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if hv := h.Header.Get("Host"); hv != "" {
		req.Host = hv
	}
	req.Header.Set("User-Agent", "vmesh-probe")
	tr := &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // Kubernetes semantics: probes do not verify.
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		return fmt.Errorf("http probe: %w", err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("http probe %s: status %d", url, resp.StatusCode)
	}
	return nil
}

// checkGRPC asks the gRPC health service, with grpc-go's health client.
func checkGRPC(ctx context.Context, g *GRPC, host string) error {
	target := net.JoinHostPort(host, strconv.Itoa(g.Port))
	cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent("vmesh-probe"))
	if err != nil {
		return fmt.Errorf("grpc probe %s: %w", target, err)
	}
	defer cc.Close()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: g.Service})
	if err != nil {
		return fmt.Errorf("grpc probe %s: %w", target, err)
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("grpc probe %s service %q: %s", target, g.Service, st)
	}
	return nil
}

// ParseProbe reads a WorkloadGroup readiness probe written as YAML or JSON
// in Istio's form (the spec.probe of a WorkloadGroup: httpGet, tcpSocket,
// exec or grpc, periodSeconds, ...), e.g. the file behind `vmesh agent --probe`.
func ParseProbe(data []byte) (Probe, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return Probe{}, fmt.Errorf("health: probe: %w", err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		return Probe{}, fmt.Errorf("health: probe: %w", err)
	}
	rp := &networkingv1alpha3.ReadinessProbe{}
	if err := protojson.Unmarshal(js, rp); err != nil {
		return Probe{}, fmt.Errorf("health: probe: %w", err)
	}
	return FromIstio(rp)
}
