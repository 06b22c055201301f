// Package agent is the per-VM agent behind `vmesh agent --bundle DIR`: it
// reads the onboarding bundle, keeps the workload certificate (agents/certs)
// and writes it for proxyless gRPC applications together with their xDS
// bootstrap, serves it to Envoy over SDS (agents/sds), proxies Envoy's ADS
// stream to the control plane (agents/xdsproxy), writes Envoy's bootstrap
// and supervises Envoy when one is installed (agents/envoy), and runs the
// workload's readiness probe, reporting health to the control plane
// (agents/health). Its own xDS stream, with or without Envoy, registers the
// VM, carries the health reports and receives the DNS name table, which the
// DNS proxy answers from (agents/dnsproxy); traffic capture
// (agents/capture) sends the VM's traffic to Envoy and its DNS to the
// proxy; the status port serves readiness, metrics and the name table.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vmesh/vmesh/internal/atomicfile"
	"github.com/vmesh/vmesh/internal/meshlabels"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/vmesh/vmesh/agents/bootstrap"
	"github.com/vmesh/vmesh/agents/capture"
	"github.com/vmesh/vmesh/agents/certs"
	"github.com/vmesh/vmesh/agents/dnsproxy"
	"github.com/vmesh/vmesh/agents/envoy"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/agents/sds"
	"github.com/vmesh/vmesh/agents/xdsproxy"
	"github.com/vmesh/vmesh/ca/bundle"
	networking "istio.io/api/networking/v1alpha3"
)

// Default locations.
const (
	DefaultOutDir    = "/var/lib/vmesh/agent"
	DefaultSocketDir = "/var/run/vmesh"
	// DefaultCredentialsDir is where `vmesh agent` looks for file
	// credentials (Config.CredentialsDir).
	DefaultCredentialsDir = "/etc/vmesh/credentials"
)

// File and socket names inside OutDir and SocketDir.
const (
	GRPCBootstrapFile = "grpc-bootstrap.json"
	// GRPCMTLSBootstrapFile is the proxyless bootstrap that goes to the
	// control plane directly, over mTLS with the agent's certificate
	// (grpc-go, grpc-java and grpc-python read "tls" channel credentials;
	// grpc-node does not).
	GRPCMTLSBootstrapFile = "grpc-bootstrap-mtls.json"
	EnvoyBootstrapFile    = "envoy-bootstrap.json"
	XDSSocketFile         = "xds.sock"
	SDSSocketFile         = "sds.sock"
)

// Config configures the agent. Only BundleDir is required.
type Config struct {
	// BundleDir holds the onboarding bundle written by `vmesh vm bundle`.
	BundleDir string
	// OutDir receives cert-chain.pem, key.pem, root-cert.pem,
	// grpc-bootstrap.json (point GRPC_XDS_BOOTSTRAP at it: xDS through the
	// agent's xds.sock), grpc-bootstrap-mtls.json (xDS to the control
	// plane directly) and envoy-bootstrap.json; default DefaultOutDir.
	OutDir string
	// SocketDir holds xds.sock and sds.sock; default DefaultSocketDir.
	SocketDir string
	// WorkloadName names the workload; default the host name.
	WorkloadName string
	// WorkloadEntry, when set, names the WorkloadEntry (in the bundle's
	// namespace), defined in the control plane's config with
	// proxy.istio.io/health-checks-enabled, whose health this agent's
	// reports decide (Istio's WORKLOAD_ENTRY); for a VM that is not
	// auto-registered.
	WorkloadEntry string
	// IPs are the VM's addresses; default the local address used to reach
	// the control plane.
	IPs []string
	// DiscoveryAddresses, when set, replace the bundle's discovery and
	// failover addresses: the control plane's replicas (host:port of their
	// secure ports), tried in order.
	DiscoveryAddresses []string
	// CertTTL is the requested certificate lifetime; 0 = the CA's default.
	CertTTL time.Duration

	// EnvoyBinary is Envoy's path; empty looks for "envoy" on PATH.
	EnvoyBinary string
	// DisableEnvoy runs no Envoy even when one is installed.
	DisableEnvoy bool
	// Gateway makes the VM a gateway (also when its bundle says so,
	// bundle.Bundle.Gateway): Envoy runs in router mode (node id
	// "router~…", serving the Gateways whose selector matches the VM's
	// labels), the traffic is not captured (the gateway's own listeners
	// take it), and Envoy answers readiness on port 15021 through the
	// agent's status port, as Istio's gateways do. It needs Envoy and
	// StatusAddr.
	Gateway bool
	// EnvoyAdminPort is Envoy's admin port on 127.0.0.1; default 15000.
	EnvoyAdminPort uint32
	// EnvoySotW makes Envoy use state-of-the-world ADS instead of delta.
	EnvoySotW bool
	// EnvoyArgs are extra Envoy command-line arguments.
	EnvoyArgs []string
	// EnvoyDrain is how long Envoy drains at shutdown; default 5 s.
	EnvoyDrain time.Duration
	// CredentialsDir, when set, holds file credentials (one folder per
	// credentialName with tls.crt, tls.key, ca.crt), served to Envoy over
	// SDS and re-read when they change (agents/sds; `vmesh agent` uses
	// DefaultCredentialsDir). Their private keys never leave the VM.
	CredentialsDir string
	// CertFileDirs are the directories the agent may read certificate
	// files from for its Envoy (a Gateway server's serverCertificate,
	// privateKey, caCertificates: Istio's "file-cert:"/"file-root:" SDS
	// names; agents/sds, files.go): a file whose real path is in none of
	// them is refused, so config authors cannot make the agent serve any
	// file of the VM. `vmesh agent` allows the credentials directory by
	// default; none: no certificate file is read.
	CertFileDirs []string

	// Probe, when set, is the workload's readiness probe, overriding the
	// one of the WorkloadGroup the VM registers under (which the control
	// plane serves to the agent and the agent follows). With neither, the
	// workload is reported healthy while the agent runs.
	Probe *health.Probe
	// ProbeHost is the host probed when the probe names none; default
	// 127.0.0.1.
	ProbeHost string
	// ExecProbeUser, when set, allows exec probes and names the local,
	// unprivileged account they run as (health.LookupExecUser: not root,
	// not UID 0; New refuses otherwise). Only the VM's own configuration
	// sets it, never the control plane. Without it an exec probe is not
	// run and the workload is reported not ready with
	// health.ExecDisabledReason; an exec Probe is refused.
	ExecProbeUser string

	// RetryMin and RetryMax bound reconnect backoffs (CA, node stream);
	// zero values take the parts' defaults.
	RetryMin, RetryMax time.Duration

	// DNSAddr, when set, runs the DNS proxy (agents/dnsproxy) there, UDP
	// and TCP, answering from the name table the agent's stream receives
	// (`vmesh agent` uses 127.0.0.1:15053).
	DNSAddr string
	// ResolvConf is the resolver configuration the DNS proxy forwards
	// other names to; default /etc/resolv.conf.
	ResolvConf string
	// DNSUpstreams, when set, replace resolv.conf's nameservers
	// (host:port).
	DNSUpstreams []string

	// Capture, when set, installs traffic capture (agents/capture) once the
	// DNS proxy listens, before the agent connects to the control plane and
	// before Envoy starts, replacing in place what an earlier run left; it
	// stays when Run returns (captured traffic fails while the agent is
	// down; `vmesh agent cleanup` removes it). The agent adds the control
	// plane's addresses (all of DiscoveryAddresses or the bundle's) to its
	// ExcludeOutboundIPRanges and points its DNS capture at DNSAddr's port
	// and at the resolv.conf nameservers (no DNS capture without DNSAddr).
	Capture *capture.Config

	// StatusAddr, when set, serves the agent's HTTP port there:
	// /healthz/ready, /stats/prometheus and /debug/ndsz (`vmesh agent` uses
	// 127.0.0.1:15020).
	StatusAddr string
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
	// execUser runs exec probes (Config.ExecProbeUser); nil: not run.
	execUser *health.ExecUser

	// parts are the running parts, once Run started them (the HTTP port
	// reads them).
	parts atomic.Pointer[parts]
	// statusAddr is the HTTP port's address once it listens.
	statusAddr atomic.Pointer[string]
}

// parts are what the HTTP port looks at.
type parts struct {
	certs   *certs.Manager
	proxy   *xdsproxy.Proxy
	prober  *health.Prober
	dns     *dnsproxy.Proxy
	envoy   bool
	capture *capture.Capture
	secrets *sds.Server
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
	// Every path the agent writes into a file is absolute, whatever the
	// working directory of the reader.
	for _, d := range []*string{&cfg.OutDir, &cfg.SocketDir} {
		abs, err := filepath.Abs(*d)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		*d = abs
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
	var execUser *health.ExecUser
	if cfg.ExecProbeUser != "" {
		if execUser, err = health.LookupExecUser(cfg.ExecProbeUser); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	} else if cfg.Probe != nil && cfg.Probe.Exec != nil {
		return nil, errors.New("agent: the probe is an exec probe but " + health.ExecDisabledReason)
	}
	node := bootstrap.Node{
		Namespace: b.Namespace, ServiceAccount: b.ServiceAccount, WorkloadName: cfg.WorkloadName,
		Labels: b.Labels, IPs: cfg.IPs, WorkloadGroup: b.WorkloadGroup, WorkloadEntry: cfg.WorkloadEntry,
		Locality: bootstrap.LocalityFromLabels(b.Labels), ExtraMetadata: nodeMetadata(b.ProxyMetadata, logger),
		Gateway: cfg.Gateway || b.Gateway,
	}
	if node.Gateway {
		switch {
		case cfg.DisableEnvoy:
			return nil, errors.New("agent: a gateway VM runs Envoy (router mode): drop --no-envoy")
		case cfg.StatusAddr == "":
			return nil, errors.New("agent: a gateway's Envoy answers readiness on 15021 through the agent's status port: set --status-addr")
		}
	}
	if err := node.Validate(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return &Agent{cfg: cfg, bundle: b, node: node, log: logger, reg: reg, met: newMetrics(reg), ready: make(chan struct{}), execUser: execUser}, nil
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

// XDSSocket is the Unix socket of the agent's xDS proxy: Envoy's ADS
// stream and proxyless applications' (grpc-bootstrap.json) connect to it,
// without TLS; the agent carries each stream to the control plane over
// mTLS.
func (a *Agent) XDSSocket() string { return filepath.Join(a.cfg.SocketDir, XDSSocketFile) }

// SDSSocket is the Unix socket of the SDS server.
func (a *Agent) SDSSocket() string { return filepath.Join(a.cfg.SocketDir, SDSSocketFile) }

// GRPCBootstrap is the proxyless xDS bootstrap file (GRPC_XDS_BOOTSTRAP)
// of every gRPC language: xDS through the agent's xDS socket.
func (a *Agent) GRPCBootstrap() string { return filepath.Join(a.cfg.OutDir, GRPCBootstrapFile) }

// GRPCMTLSBootstrap is the proxyless bootstrap that reaches the control
// plane directly over mTLS.
func (a *Agent) GRPCMTLSBootstrap() string { return filepath.Join(a.cfg.OutDir, GRPCMTLSBootstrapFile) }

// EnvoyBootstrap is the Envoy bootstrap file (envoy -c).
func (a *Agent) EnvoyBootstrap() string { return filepath.Join(a.cfg.OutDir, EnvoyBootstrapFile) }

// CertDir holds cert-chain.pem, key.pem and root-cert.pem.
func (a *Agent) CertDir() string { return a.cfg.OutDir }

// Run runs the agent, once, until ctx is done (the caller cancels it on SIGTERM);
// Envoy, when supervised, is drained and stopped before Run returns. The
// traffic capture stays when Run returns, whatever the reason: while the
// agent and Envoy are down, captured traffic fails instead of bypassing
// them; `vmesh agent cleanup` (capture.Remove) takes it away. It returns an
// error when a part cannot start or fails for good, a
// *refusal.PermanentError when the control plane refused the VM for good
// (a revoked identity among others, noticed at the latest when a renewal
// of the certificate is refused).
func (a *Agent) Run(ctx context.Context) (err error) {
	envoyBin := ""
	if !a.cfg.DisableEnvoy {
		if envoyBin, err = envoy.Find(a.cfg.EnvoyBinary); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	if a.node.Gateway {
		if envoyBin == "" {
			return errors.New("agent: a gateway VM runs Envoy (router mode), and none is installed: install it or name it with --envoy")
		}
		if a.cfg.Capture != nil {
			a.log.Info("gateway: traffic is not captured; the gateway's listeners take it")
			a.cfg.Capture = nil
		}
	}
	// With capture, Envoy runs as the proxy user, whose traffic the rules
	// let through; it must read its bootstrap and reach the sockets.
	var envoyCred *syscall.Credential
	if a.cfg.Capture != nil && envoyBin != "" {
		envoyCred = &syscall.Credential{Uid: firstOr(a.cfg.Capture.ProxyUIDs, capture.DefaultProxyUID), Gid: firstOr(a.cfg.Capture.ProxyGIDs, capture.DefaultProxyGID)}
	}
	if err := prepareOutDir(a.cfg.OutDir, envoyCred, a.log); err != nil {
		return err
	}
	cm, err := certs.New(certs.Config{
		Address: a.discovery()[0], Failover: a.discovery()[1:], RootsPEM: a.bundle.RootCerts, Token: a.bundle.Token,
		TTL: a.cfg.CertTTL, OutDir: a.cfg.OutDir, RetryMin: a.cfg.RetryMin, RetryMax: a.cfg.RetryMax,
	}, a.log.With("part", "certs"), a.reg)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	var dns *dnsproxy.Proxy
	if a.cfg.DNSAddr == "" {
		dnsproxy.RegisterIdleMetrics(a.reg)
	} else {
		mark := uint32(0)
		if a.cfg.Capture != nil {
			mark = a.cfg.Capture.Mark
			if mark == 0 {
				mark = capture.DefaultMark
			}
		}
		dns, err = dnsproxy.New(dnsproxy.Config{Addr: a.cfg.DNSAddr, ResolvConf: a.cfg.ResolvConf, Upstreams: a.cfg.DNSUpstreams,
			Namespace: a.node.Namespace, Mark: mark}, a.log.With("part", "dnsproxy"), a.reg)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	pcfg := xdsproxy.Config{Upstream: a.discovery()[0], Upstreams: a.discovery()[1:], TLS: cm.ClientTLSConfig, RetryMin: a.cfg.RetryMin, RetryMax: a.cfg.RetryMax,
		OnUnauthenticated: a.renewOnRejection(cm)}
	if dns != nil {
		pcfg.NameTable = dns.Update
	}
	// The prober exists before the node stream, which calls
	// OnWorkloadGroup, starts.
	var prober *health.Prober
	if a.node.WorkloadGroup != "" {
		pcfg.WorkloadGroup = a.node.WorkloadGroup
		pcfg.OnWorkloadGroup = func(wg *networking.WorkloadGroup) { a.takeGroupProbe(wg, prober) }
	}
	proxy, err := xdsproxy.New(pcfg, a.log.With("part", "xdsproxy"), a.reg)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	secrets := sds.New(a.log.With("part", "sds"), a.reg)
	// Its Envoy's streams tell the control plane which file credentials
	// the VM holds (none without a credentials directory), so a config
	// naming one it lacks is warned about.
	secrets.OnHeld(func(held []string) { _ = proxy.ReportCredentials(held) })
	if a.cfg.CredentialsDir == "" {
		_ = proxy.ReportCredentials(nil)
	}
	if err := secrets.AllowFileDirs(a.cfg.CertFileDirs); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	prober, err = health.NewProber(a.cfg.Probe, a.cfg.ProbeHost, proxy, a.log.With("part", "health"), a.reg, health.WithExecUser(a.execUser))
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	switch {
	case a.cfg.Probe != nil:
		// Not ready until the probe says so.
		_ = proxy.Report(ctx, health.Status{Healthy: false, Message: "readiness probe has not run yet"})
	case a.node.WorkloadGroup != "":
		// The group's probe, if it has one, decides; until the control
		// plane has served the group, the VM is not known ready.
		_ = proxy.Report(ctx, health.Status{Healthy: false, Message: "waiting for WorkloadGroup " + a.node.WorkloadGroup + " from the control plane"})
	default:
		_ = proxy.Report(ctx, health.Status{Healthy: true})
	}
	ps := &parts{certs: cm, proxy: proxy, prober: prober, dns: dns, envoy: envoyBin != "", secrets: secrets}
	a.parts.Store(ps)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	// fail stops the parts already started and returns err.
	fail := func(err error) error {
		cancel()
		return errors.Join(err, g.Wait())
	}
	if a.cfg.StatusAddr != "" {
		lis, err := net.Listen("tcp", a.cfg.StatusAddr)
		if err != nil {
			return fmt.Errorf("agent: status port: %w", err)
		}
		addr := lis.Addr().String()
		a.statusAddr.Store(&addr)
		g.Go(func() error { return a.serveStatus(ctx, lis) })
	}
	// The DNS proxy first: when an earlier run left the capture in place,
	// the VM's DNS (the agent's own lookups of the control plane included)
	// goes to it, and it needs nothing from the control plane to forward
	// other names to the VM's resolvers (its own queries carry the mark the
	// capture lets through).
	if dns != nil {
		g.Go(func() error { return dns.Run(ctx) })
		select {
		case <-dns.Listening():
		case <-ctx.Done():
			return fail(nil)
		}
	}
	// Then the capture, replaced in place (it may be an earlier run's), so
	// that it excludes the control plane's addresses as they are now
	// before the agent connects to it.
	if a.cfg.Capture != nil {
		if err := capture.Permitted(envoyBin != ""); err != nil {
			return fail(fmt.Errorf("agent: %w", err))
		}
		cc, err := a.captureConfig(ctx, dns)
		if err != nil {
			return fail(err)
		}
		c, err := capture.Install(ctx, cc, a.log.With("part", "capture"))
		if err != nil {
			return fail(fmt.Errorf("agent: %w", err))
		}
		ps2 := *ps
		ps2.capture = c
		ps = &ps2
		a.parts.Store(ps)
		a.met.capture.Set(1)
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
	// With capture, Envoy runs as the proxy user: its sockets are the
	// proxy group's.
	sockGID := -1
	if envoyCred != nil {
		sockGID = int(envoyCred.Gid)
		secrets.SetSocketGroup(sockGID)
	}
	xdsLis, err := sds.ListenUnixGroup(a.XDSSocket(), sockGID)
	if err != nil {
		return fail(fmt.Errorf("agent: xDS socket: %w", err))
	}
	g.Go(func() error { return proxy.Serve(ctx, xdsLis) })
	g.Go(func() error { return secrets.Serve(ctx, a.SDSSocket()) })
	if a.cfg.CredentialsDir != "" {
		g.Go(func() error { return secrets.ServeCredentials(ctx, a.cfg.CredentialsDir) })
	}
	if len(a.cfg.CertFileDirs) > 0 {
		g.Go(func() error { return secrets.WatchFiles(ctx) })
	}
	g.Go(func() error { return prober.Run(ctx) })
	// The agent's own stream registers the VM, reports its health and
	// receives the name table, with or without Envoy. With Envoy, its node
	// labels the VM's entry for automatic mTLS.
	agentNode := a.node
	if envoyBin != "" {
		agentNode.Labels = maps.Clone(agentNode.Labels)
		if agentNode.Labels == nil {
			agentNode.Labels = map[string]string{}
		}
		agentNode.Labels[meshlabels.TLSModeLabel] = meshlabels.TLSModeIstio
	}
	node, err := agentNode.Agent()
	if err != nil {
		return fail(err)
	}
	g.Go(func() error { return proxy.RunNodeStream(ctx, node) })
	if envoyBin != "" {
		if envoyCred != nil {
			// sds.sock is made as xds.sock is, in the same directory.
			if err := checkEnvoyAccess(envoyCred, a.EnvoyBootstrap(), a.XDSSocket(), a.log); err != nil {
				return fail(err)
			}
		}
		ecfg := envoy.Config{
			Binary: envoyBin, Bootstrap: a.EnvoyBootstrap(), AdminAddr: net.JoinHostPort("127.0.0.1", fmt.Sprint(a.adminPort())),
			Args: a.cfg.EnvoyArgs, Drain: a.cfg.EnvoyDrain,
			// Envoy's own traffic must not be captured again.
			Credential: envoyCred,
		}
		sup, err := envoy.New(ecfg, a.log.With("part", "envoy"), a.reg)
		if err != nil {
			return fail(fmt.Errorf("agent: %w", err))
		}
		g.Go(func() error { return sup.Run(ctx) })
	} else {
		envoy.RegisterIdleMetrics(a.reg)
		a.log.Info("no Envoy: serving proxyless gRPC applications only")
	}
	a.met.ready.Set(1)
	close(a.ready)
	// systemd (Type=notify) hears READY=1 once the certificate is written and
	// the xDS and SDS sockets serve, STOPPING=1 when the agent winds down.
	a.notify(daemon.SdNotifyReady)
	err = g.Wait()
	a.notify(daemon.SdNotifyStopping)
	a.met.ready.Set(0)
	if ps.capture != nil {
		a.log.Info("traffic capture left in place: captured traffic fails until the agent runs again; `vmesh agent cleanup` removes it")
	}
	return err
}

// renewOnRejectionEvery bounds how often a refused stream makes the agent
// renew its certificate early.
const renewOnRejectionEvery = time.Minute

// renewOnRejection returns the xdsproxy's OnUnauthenticated: the control
// plane no longer accepts the certificate (revoked, expired), so the agent
// renews it at once rather than at its renewal time, at most once a
// renewOnRejectionEvery. A renewal refused for good ends certs.Run, and
// with it the agent, with the refusal (exit 78).
func (a *Agent) renewOnRejection(cm *certs.Manager) func(error) {
	var last atomic.Int64
	return func(err error) {
		now := time.Now().UnixNano()
		if prev := last.Load(); prev != 0 && time.Duration(now-prev) < renewOnRejectionEvery || !last.CompareAndSwap(prev, now) {
			return
		}
		a.log.Warn("the control plane refused the workload certificate; renewing it now", "error", err)
		cm.Renew()
	}
}

func firstOr(ids []uint32, def uint32) uint32 {
	if len(ids) > 0 {
		return ids[0]
	}
	return def
}

// discovery lists the control plane's replicas: Config.DiscoveryAddresses,
// else the bundle's discovery address and failover addresses.
func (a *Agent) discovery() []string {
	if len(a.cfg.DiscoveryAddresses) > 0 {
		return a.cfg.DiscoveryAddresses
	}
	return a.bundle.DiscoveryAddresses()
}

// captureConfig completes the capture settings: the control plane's
// addresses (every replica the agent may fail over to, names resolved now)
// are never captured, DNS goes to the DNS proxy's port and only for the
// resolv.conf nameservers.
func (a *Agent) captureConfig(ctx context.Context, dns *dnsproxy.Proxy) (capture.Config, error) {
	c := *a.cfg.Capture
	c.ExcludeOutboundIPRanges = slices.Clone(c.ExcludeOutboundIPRanges)
	for _, addr := range a.discovery() {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return c, fmt.Errorf("agent: discovery address %q: %w", addr, err)
		}
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return c, fmt.Errorf("agent: resolving the control plane %s to exclude it from capture: %w", host, err)
		}
		for _, ip := range ips {
			c.ExcludeOutboundIPRanges = append(c.ExcludeOutboundIPRanges, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
		}
	}
	c.CaptureDNS = c.CaptureDNS && dns != nil
	if dns != nil {
		_, port, _ := net.SplitHostPort(dns.Addr())
		p, _ := strconv.Atoi(port)
		c.DNSPort = uint16(p)
		if len(c.DNSServers) == 0 {
			for _, u := range dns.Upstreams() {
				h, port, _ := net.SplitHostPort(u)
				if ip, err := netip.ParseAddr(h); err == nil && port == "53" {
					c.DNSServers = append(c.DNSServers, ip)
				}
			}
		}
	}
	return c, nil
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

// writeBootstraps writes the proxyless bootstrap files (through the
// agent's xDS socket; directly over mTLS) and Envoy's.
func (a *Agent) writeBootstraps() error {
	for file, local := range map[string]string{a.GRPCBootstrap(): a.XDSSocket(), a.GRPCMTLSBootstrap(): ""} {
		gb, err := bootstrap.GRPC(bootstrap.GRPCConfig{Node: a.node, LocalXDS: local, ServerURI: a.discovery()[0], ServerURIs: a.discovery()[1:], CertDir: a.cfg.OutDir,
			CertFile: certs.CertChainFile, KeyFile: certs.KeyFile, RootFile: certs.RootCertFile})
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		if err := atomicfile.Write(file, gb, 0o644); err != nil {
			return fmt.Errorf("agent: write %s: %w", file, err)
		}
	}
	var statusPort uint32
	if addr, err := netip.ParseAddrPort(a.StatusAddr()); err == nil {
		statusPort = uint32(addr.Port())
	}
	eb, err := bootstrap.Envoy(bootstrap.EnvoyConfig{Node: a.node, XDSSocket: a.XDSSocket(), SDSSocket: a.SDSSocket(), AdminPort: a.adminPort(), SotW: a.cfg.EnvoySotW,
		AgentStatusPort: statusPort})
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

// takeGroupProbe gives the prober the readiness probe of the WorkloadGroup
// the control plane served (none when the group has none, or is gone). A
// probe given in the agent's own configuration (Config.Probe) overrides
// the group's. A probe the agent cannot run keeps the previous one.
func (a *Agent) takeGroupProbe(wg *networking.WorkloadGroup, prober *health.Prober) {
	if a.cfg.Probe != nil {
		return
	}
	var p *health.Probe
	if rp := wg.GetProbe(); rp != nil {
		hp, err := health.FromIstio(rp)
		if err != nil {
			a.log.Warn("WorkloadGroup's readiness probe not usable; keeping the previous one", "group", a.node.WorkloadGroup, "error", err)
			return
		}
		p = &hp
	}
	if err := prober.SetProbe(p); err != nil {
		a.log.Warn("WorkloadGroup's readiness probe not usable; keeping the previous one", "group", a.node.WorkloadGroup, "error", err)
	}
}

// nodeMetadata returns the node metadata of the mesh config's
// proxyMetadata, as pilot-agent reads its environment: ISTIO_META_<KEY>
// becomes <KEY>. Other entries are agent settings vmesh's agent does not
// have; each is logged as not applied.
func nodeMetadata(pm map[string]string, logger *slog.Logger) map[string]string {
	out := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(pm)) {
		if key, ok := strings.CutPrefix(k, "ISTIO_META_"); ok && key != "" {
			out[key] = pm[k]
			continue
		}
		logger.Warn("proxyMetadata entry not applied: vmesh's agent has no such setting", "key", k)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
