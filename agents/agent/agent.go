// Package agent is the per-VM agent behind `vmesh agent --bundle DIR`: it
// reads the onboarding bundle, keeps the workload certificate (agents/certs)
// and writes it for proxyless gRPC applications together with their xDS
// bootstrap, serves it to Envoy over SDS (agents/sds), proxies Envoy's ADS
// stream to the control plane (agents/xdsproxy), writes Envoy's bootstrap
// and supervises Envoy when one is installed (agents/envoy), and runs the
// workload's readiness probe, reporting health to the control plane
// (agents/health). Without Envoy the agent keeps an xDS stream of its own so
// the control plane sees the VM connected and hears its health.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vmesh/vmesh/internal/atomicfile"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/vmesh/vmesh/agents/bootstrap"
	"github.com/vmesh/vmesh/agents/certs"
	"github.com/vmesh/vmesh/agents/envoy"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/agents/sds"
	"github.com/vmesh/vmesh/agents/xdsproxy"
	"github.com/vmesh/vmesh/ca/bundle"
)

// Default locations.
const (
	DefaultOutDir    = "/var/lib/vmesh/agent"
	DefaultSocketDir = "/var/run/vmesh"
)

// File and socket names inside OutDir and SocketDir.
const (
	GRPCBootstrapFile  = "grpc-bootstrap.json"
	EnvoyBootstrapFile = "envoy-bootstrap.json"
	XDSSocketFile      = "xds.sock"
	SDSSocketFile      = "sds.sock"
)

// Config configures the agent. Only BundleDir is required.
type Config struct {
	// BundleDir holds the onboarding bundle written by `vmesh vm bundle`.
	BundleDir string
	// OutDir receives cert-chain.pem, key.pem, root-cert.pem,
	// grpc-bootstrap.json (point GRPC_XDS_BOOTSTRAP at it) and
	// envoy-bootstrap.json; default DefaultOutDir.
	OutDir string
	// SocketDir holds xds.sock and sds.sock; default DefaultSocketDir.
	SocketDir string
	// WorkloadName names the workload; default the host name.
	WorkloadName string
	// IPs are the VM's addresses; default the local address used to reach
	// the control plane.
	IPs []string
	// CertTTL is the requested certificate lifetime; 0 = the CA's default.
	CertTTL time.Duration

	// EnvoyBinary is Envoy's path; empty looks for "envoy" on PATH.
	EnvoyBinary string
	// DisableEnvoy runs no Envoy even when one is installed.
	DisableEnvoy bool
	// EnvoyAdminPort is Envoy's admin port on 127.0.0.1; default 15000.
	EnvoyAdminPort uint32
	// EnvoySotW makes Envoy use state-of-the-world ADS instead of delta.
	EnvoySotW bool
	// EnvoyArgs are extra Envoy command-line arguments.
	EnvoyArgs []string
	// EnvoyDrain is how long Envoy drains at shutdown; default 5 s.
	EnvoyDrain time.Duration

	// Probe is the workload's readiness probe (from its WorkloadGroup, see
	// health.FromIstio); nil reports the workload healthy while the agent
	// runs.
	Probe *health.Probe
	// ProbeHost is the host probed when the probe names none; default
	// 127.0.0.1.
	ProbeHost string

	// RetryMin and RetryMax bound reconnect backoffs (CA, node stream);
	// zero values take the parts' defaults.
	RetryMin, RetryMax time.Duration
}

// Agent is a configured agent; Run runs it.
type Agent struct {
	cfg    Config
	bundle *bundle.Bundle
	node   bootstrap.Node
	log    *slog.Logger
	reg    prometheus.Registerer
	met    *metrics
	ready  chan struct{}
}

// New reads the bundle and checks the configuration. Metrics of the agent
// and its parts are registered on reg when it is not nil.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Agent, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if cfg.BundleDir == "" {
		return nil, errors.New("agent: no bundle directory")
	}
	b, err := bundle.Read(cfg.BundleDir)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if cfg.OutDir == "" {
		cfg.OutDir = DefaultOutDir
	}
	if cfg.SocketDir == "" {
		cfg.SocketDir = DefaultSocketDir
	}
	if cfg.WorkloadName == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("agent: workload name: %w", err)
		}
		cfg.WorkloadName = strings.ToLower(strings.SplitN(h, ".", 2)[0])
	}
	if len(cfg.IPs) == 0 {
		ip, err := localIP(b.DiscoveryAddress)
		if err != nil {
			return nil, fmt.Errorf("agent: finding the VM's address: %w", err)
		}
		cfg.IPs = []string{ip}
	}
	if cfg.Probe != nil {
		if err := cfg.Probe.Validate(); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	node := bootstrap.Node{
		Namespace: b.Namespace, ServiceAccount: b.ServiceAccount, WorkloadName: cfg.WorkloadName,
		Labels: b.Labels, IPs: cfg.IPs, WorkloadGroup: b.WorkloadGroup,
	}
	if err := node.Validate(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return &Agent{cfg: cfg, bundle: b, node: node, log: logger, reg: reg, met: newMetrics(reg), ready: make(chan struct{})}, nil
}

// Run is New followed by Run: the whole of `vmesh agent`.
func Run(ctx context.Context, cfg Config, logger *slog.Logger, reg prometheus.Registerer) error {
	a, err := New(cfg, logger, reg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// Node returns the identity the agent presents to the control plane.
func (a *Agent) Node() bootstrap.Node { return a.node }

// Ready is closed once the first certificate and every file are written and
// the sockets are listening.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// XDSSocket is the Unix socket Envoy's ADS stream connects to.
func (a *Agent) XDSSocket() string { return filepath.Join(a.cfg.SocketDir, XDSSocketFile) }

// SDSSocket is the Unix socket of the SDS server.
func (a *Agent) SDSSocket() string { return filepath.Join(a.cfg.SocketDir, SDSSocketFile) }

// GRPCBootstrap is the grpc-go xDS bootstrap file (GRPC_XDS_BOOTSTRAP).
func (a *Agent) GRPCBootstrap() string { return filepath.Join(a.cfg.OutDir, GRPCBootstrapFile) }

// EnvoyBootstrap is the Envoy bootstrap file (envoy -c).
func (a *Agent) EnvoyBootstrap() string { return filepath.Join(a.cfg.OutDir, EnvoyBootstrapFile) }

// CertDir holds cert-chain.pem, key.pem and root-cert.pem.
func (a *Agent) CertDir() string { return a.cfg.OutDir }

// Run runs the agent, once, until ctx is done (the caller cancels it on SIGTERM);
// Envoy, when supervised, is drained and stopped before Run returns. It
// returns an error when a part cannot start or fails for good.
func (a *Agent) Run(ctx context.Context) error {
	envoyBin := ""
	if !a.cfg.DisableEnvoy {
		var err error
		if envoyBin, err = envoy.Find(a.cfg.EnvoyBinary); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	cm, err := certs.New(certs.Config{
		Address: a.bundle.DiscoveryAddress, RootsPEM: a.bundle.RootCerts, Token: a.bundle.Token,
		TTL: a.cfg.CertTTL, OutDir: a.cfg.OutDir, RetryMin: a.cfg.RetryMin, RetryMax: a.cfg.RetryMax,
	}, a.log.With("part", "certs"), a.reg)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	proxy, err := xdsproxy.New(xdsproxy.Config{
		Upstream: a.bundle.DiscoveryAddress, TLS: cm.ClientTLSConfig, RetryMin: a.cfg.RetryMin, RetryMax: a.cfg.RetryMax,
	}, a.log.With("part", "xdsproxy"), a.reg)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	secrets := sds.New(a.log.With("part", "sds"), a.reg)
	var prober *health.Prober
	if a.cfg.Probe != nil {
		if prober, err = health.NewProber(*a.cfg.Probe, a.cfg.ProbeHost, proxy, a.log.With("part", "health"), a.reg); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		// Not ready until the probe says so.
		_ = proxy.Report(ctx, health.Status{Healthy: false, Message: "readiness probe has not run yet"})
	} else {
		_ = proxy.Report(ctx, health.Status{Healthy: true})
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	// fail stops the parts already started and returns err.
	fail := func(err error) error {
		cancel()
		return errors.Join(err, g.Wait())
	}
	g.Go(func() error { return cm.Run(ctx) })
	select {
	case <-ctx.Done():
		return g.Wait()
	case <-cm.Ready():
	}
	var ids []string
	for _, u := range cm.Current().Leaf.URIs {
		ids = append(ids, u.String())
	}
	a.log.Info("agent has its certificate", "identity", strings.Join(ids, ","), "node", a.node.ID())

	// SDS follows every rotation.
	sub, unsub := cm.Subscribe()
	g.Go(func() error {
		defer unsub()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-sub:
				kp := cm.Current()
				if err := secrets.Update(kp.ChainPEM, kp.KeyPEM, kp.RootsPEM); err != nil {
					return fmt.Errorf("agent: %w", err)
				}
			}
		}
	})
	if err := a.writeBootstraps(); err != nil {
		return fail(err)
	}
	xdsLis, err := sds.ListenUnix(a.XDSSocket())
	if err != nil {
		return fail(fmt.Errorf("agent: xDS socket: %w", err))
	}
	g.Go(func() error { return proxy.Serve(ctx, xdsLis) })
	g.Go(func() error { return secrets.Serve(ctx, a.SDSSocket()) })
	if prober != nil {
		g.Go(func() error { return prober.Run(ctx) })
	}
	if envoyBin != "" {
		sup, err := envoy.New(envoy.Config{
			Binary: envoyBin, Bootstrap: a.EnvoyBootstrap(), AdminAddr: net.JoinHostPort("127.0.0.1", fmt.Sprint(a.adminPort())),
			Args: a.cfg.EnvoyArgs, Drain: a.cfg.EnvoyDrain,
		}, a.log.With("part", "envoy"), a.reg)
		if err != nil {
			return fail(fmt.Errorf("agent: %w", err))
		}
		g.Go(func() error { return sup.Run(ctx) })
	} else {
		a.log.Info("no Envoy: serving proxyless gRPC applications only; keeping the agent's own xDS stream")
		node, err := a.node.Envoy(bootstrap.GeneratorGRPC)
		if err != nil {
			return fail(err)
		}
		g.Go(func() error { return proxy.RunNodeStream(ctx, node) })
	}
	a.met.ready.Set(1)
	close(a.ready)
	// systemd (Type=notify) hears READY=1 once the certificate is written and
	// the xDS and SDS sockets serve, STOPPING=1 when the agent winds down.
	a.notify(daemon.SdNotifyReady)
	err = g.Wait()
	a.notify(daemon.SdNotifyStopping)
	a.met.ready.Set(0)
	return err
}

// notify tells systemd the agent's state when it runs under a Type=notify
// unit ($NOTIFY_SOCKET set); elsewhere it does nothing.
func (a *Agent) notify(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		a.log.Warn("sd_notify failed", "state", state, "error", err)
	}
}

func (a *Agent) adminPort() uint32 {
	if a.cfg.EnvoyAdminPort != 0 {
		return a.cfg.EnvoyAdminPort
	}
	return bootstrap.DefaultAdminPort
}

// writeBootstraps writes the grpc-go and Envoy bootstrap files.
func (a *Agent) writeBootstraps() error {
	gb, err := bootstrap.GRPC(bootstrap.GRPCConfig{Node: a.node, ServerURI: a.bundle.DiscoveryAddress, CertDir: a.cfg.OutDir,
		CertFile: certs.CertChainFile, KeyFile: certs.KeyFile, RootFile: certs.RootCertFile})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := atomicfile.Write(a.GRPCBootstrap(), gb, 0o644); err != nil {
		return fmt.Errorf("agent: write %s: %w", a.GRPCBootstrap(), err)
	}
	eb, err := bootstrap.Envoy(bootstrap.EnvoyConfig{Node: a.node, XDSSocket: a.XDSSocket(), SDSSocket: a.SDSSocket(), AdminPort: a.adminPort(), SotW: a.cfg.EnvoySotW})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	ej, err := bootstrap.EnvoyJSON(eb)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := atomicfile.Write(a.EnvoyBootstrap(), ej, 0o644); err != nil {
		return fmt.Errorf("agent: write %s: %w", a.EnvoyBootstrap(), err)
	}
	return nil
}

// localIP returns the local address the kernel would use to reach addr
// (no packet is sent).
func localIP(addr string) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}
