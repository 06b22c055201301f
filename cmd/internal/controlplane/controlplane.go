package controlplane

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/cmd/internal/console"
	"github.com/vmesh/vmesh/cmd/internal/httpguard"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/internal/buildinfo"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/analysis"
	"github.com/vmesh/vmesh/registries"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/autoregister"
	credcheck "github.com/vmesh/vmesh/writers/credentials"
	"github.com/vmesh/vmesh/writers/jwks"
	"github.com/vmesh/vmesh/writers/sharedstate"
	"github.com/vmesh/vmesh/xds"
)

// runner is one long-running part of the control plane.
type runner interface {
	Run(ctx context.Context) error
}

// ControlPlane is a configured vmesh server, listening but not yet serving.
type ControlPlane struct {
	cfg      Config
	log      *slog.Logger
	store    *store.Store
	registry *prometheus.Registry
	// metricNames registers on registry and remembers every metric's name.
	metricNames *namingRegisterer
	mux         *routeMux
	httpLis     net.Listener
	// httpToken, when set, is the bearer token of the HTTP port
	// (Config.HTTP.TokenFile); httpRefused counts the requests refused.
	httpToken   string
	httpRefused *prometheus.CounterVec
	xdsLis      net.Listener
	secLis      net.Listener
	xds         *xds.Server
	feed        *model.Feed // the Store's snapshots, which xds serves
	// decodeCaches are the config sources' (filestore.DecodeCache), saved
	// once the control plane is ready.
	decodeCaches []*filestore.DecodeCache
	// analyses is the analysis of the Store's snapshots (debug, metrics,
	// console, log).
	analyses *analysis.Cache
	ca       *ca.CA
	grpc     *grpc.Server
	secure   *grpc.Server
	// secureTLS serves the secure port's certificate (onboarding checks
	// the names VMs dial against it).
	secureTLS *tls.Config
	runners   []runner
	ready     []<-chan struct{} // config sources; xds starts once all are closed
	git       *filestore.GitSource
	// registries, when configured, gate readiness with registriesSynced:
	// closed once every registry's first set is in the Store, or after
	// Config.RegistrySyncWait.
	registries       *registries.Runner
	registriesSynced chan struct{}
	// state, when configured, shares registrations and revocations with
	// the other replicas; stateSynced gates readiness like registriesSynced.
	state       *sharedstate.State
	stateSynced chan struct{}
	// meshConfig is --mesh-config's MeshConfig, nil without one.
	meshConfig *meshv1alpha1.MeshConfig
	// webhookCalls holds a token per webhook call being read.
	webhookCalls chan struct{}
}

// New builds the control plane and binds its listeners, so a port in use is
// reported before anything starts.
func New(cfg Config, logger *slog.Logger) (*ControlPlane, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mesh, meshConfig, meshWarnings, err := cfg.meshSettings()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	cp := &ControlPlane{analyses: analysis.NewCache(mesh),
		cfg:      cfg,
		log:      logger,
		store:    store.NewStore(),
		registry: prometheus.NewRegistry(),
		mux:      newRouteMux(),

		webhookCalls: make(chan struct{}, maxWebhookCalls),
		meshConfig:   meshConfig,
	}
	if cp.httpToken, err = cfg.httpToken(); err != nil {
		return nil, err
	}
	if cp.cfg.Git.WebhookSecret, err = cfg.webhookSecret(); err != nil {
		return nil, err
	}
	cp.metricNames = &namingRegisterer{Registerer: cp.registry, names: map[string]bool{}}
	cp.metricNames.MustRegister(cp.newHTTPMetrics()...)
	cp.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cp.metricNames.MustRegister(filestore.NewCollector(cp.store, cp.analyses.Warnings), newBuildInfoMetric(buildinfo.Get()))
	cp.metricNames.MustRegister(newGitMetrics(func() *filestore.GitSource { return cp.git })...)
	cp.metricNames.MustRegister(newStateMetrics(func() *sharedstate.State { return cp.state })...)
	if err := cp.addSources(); err != nil {
		return nil, err
	}
	csWarnings, err := cp.addConfigSources()
	if err != nil {
		return nil, err
	}
	cfg.publishMeshWarnings(cp.store, append(meshWarnings, csWarnings...))
	if len(cfg.Registries) > 0 {
		runner, err := registries.NewRunner(cp.store, cfg.Registries, registries.Options{Logger: logger, Registerer: cp.metricNames})
		if err != nil {
			return nil, err
		}
		cp.runners = append(cp.runners, runner)
		cp.mux.Handle("/debug/registries", runner)
		cp.registries, cp.registriesSynced = runner, make(chan struct{})
		cp.ready = append(cp.ready, cp.registriesSynced)
	}
	// Agents register their VMs over the secure port: the registration must
	// match the identity of their mesh certificate.
	registrar := autoregister.New(cp.store, autoregister.Config{
		Grace: cfg.RegistrationGrace,
		Authenticate: func(ctx context.Context) (string, string, error) {
			id, err := cp.ca.PeerIdentity(ctx)
			return id.Namespace, id.ServiceAccount, err
		},
	}, logger)
	cp.runners = append(cp.runners, registrar)
	cp.metricNames.MustRegister(newRegistrationMetrics(registrar))
	// The Kubernetes Gateway API's routes become the VirtualServices
	// Istio's converter makes of them, written back into the Store.
	gw, err := gatewayapi.NewWriter(cp.store, logger, slices.Clone(cp.ready)...)
	if err != nil {
		return nil, err
	}
	cp.runners = append(cp.runners, gw)
	cp.ready = append(cp.ready, gw.Synced())
	// RequestAuthentication key sets (jwksUri) are fetched here and inlined
	// into the JWT filters, as istiod does by default; xDS starts once the
	// first complete config's key sets were tried.
	blocked, err := cfg.jwksBlockedCIDRs()
	if err != nil {
		return nil, err
	}
	allowed, err := cfg.jwksAllowedCIDRs()
	if err != nil {
		return nil, err
	}
	fetcher, err := jwks.New(cp.store, jwks.Settings{Logger: logger, After: slices.Clone(cp.ready), AllowedCIDRs: allowed, BlockedCIDRs: blocked})
	if err != nil {
		return nil, err
	}
	cp.runners = append(cp.runners, fetcher)
	cp.ready = append(cp.ready, fetcher.Synced())
	feed, err := model.NewFeed(cp.store, model.FeedSettings{
		DebounceQuiet: cfg.DebounceQuiet, DebounceMax: cfg.DebounceMax,
		Mesh: mesh,
	})
	if err != nil {
		return nil, err
	}
	cp.feed = feed
	cp.analyses.ModelsFrom(feed.Latest)
	// The agents' credential reports against what their proxies' config
	// asks for (VM1019, /debug/credentials).
	creds := credcheck.New(cp.store, xds.Credentials, logger)
	cp.runners = append(cp.runners, creds)
	cp.mux.Handle("/debug/credentials", creds)
	var rollout *xds.RolloutOptions
	if r := cfg.Git.Rollout; r != nil {
		rollout = &xds.RolloutOptions{Source: newRolloutSource(cp, mesh), Selector: r.Canary.Selector, Percent: r.Canary.Percent, Bake: r.Bake}
	}
	xdsServer, err := xds.NewServer(xds.Options{
		Logger:         logger,
		Registerer:     cp.metricNames,
		Observer:       registrationObserver{r: registrar, creds: creds},
		ControlPlaneID: controlPlaneID(),
		Pushed:         creds.Snapshot,
		Rollout:        rollout,
		MCPAuthorize:   cp.authorizeMCP,
	})
	if err != nil {
		return nil, err
	}
	cp.xds = xdsServer
	cp.grpc = grpc.NewServer(xdsServer.GRPCServerOptions()...)
	xdsServer.Register(cp.grpc)
	if err := cp.addSecure(); err != nil {
		return nil, err
	}
	if err := cp.addState(); err != nil {
		return nil, err
	}
	cp.routes()
	if cp.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("http listener: %w", err)
	}
	cp.httpLis = httpguard.LimitListener(cp.httpLis, cfg.HTTP.MaxConnections)
	cp.warnOpenHTTP()
	if cp.xdsLis, err = net.Listen("tcp", cfg.XDSAddr); err != nil {
		cp.httpLis.Close()
		return nil, fmt.Errorf("xds listener: %w", err)
	}
	if cp.secLis, err = net.Listen("tcp", cfg.SecureAddr); err != nil {
		cp.httpLis.Close()
		cp.xdsLis.Close()
		return nil, fmt.Errorf("secure listener: %w", err)
	}
	return cp, nil
}

// addSecure starts the CA and builds the TLS gRPC server for the secure
// port: the CA's CreateCertificate for anyone who authenticates (token or
// certificate), and xDS for callers with a valid mesh certificate only.
func (cp *ControlPlane) addSecure() error {
	c := cp.cfg.CA
	authority, err := ca.New(ca.Config{
		DataDir: filepath.Join(cp.cfg.DataDir, "ca"), CACertsDir: c.CACertsDir, TrustDomain: c.TrustDomain,
		DefaultTTL: c.CertTTL, MaxTTL: c.MaxCertTTL,
	}, cp.log, cp.metricNames)
	if err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	cp.ca = authority
	cp.runners = append(cp.runners, authority) // re-reads the revocation list
	hosts := []string{"localhost", "127.0.0.1"}
	for _, h := range cp.cfg.SecureHosts {
		if !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	if h, _, err := net.SplitHostPort(cp.cfg.SecureAddr); err == nil && h != "" && !slices.Contains(hosts, h) {
		hosts = append(hosts, h)
	}
	tlsCfg, err := authority.ServerTLSConfig(hosts)
	if err != nil {
		return fmt.Errorf("secure port certificate: %w", err)
	}
	cp.secureTLS = tlsCfg
	requireMeshCert := func(ctx context.Context, method string) error {
		if !strings.HasPrefix(method, "/istio.v1.auth.IstioCertificateService/") {
			if _, err := authority.PeerIdentity(ctx); err != nil {
				return status.Errorf(codes.Unauthenticated, "xDS on the secure port needs a mesh certificate: %v", err)
			}
		}
		return nil
	}
	cp.secure = grpc.NewServer(append(cp.xds.GRPCServerOptions(), grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if err := requireMeshCert(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			if strings.HasPrefix(info.FullMethod, "/envoy.service.discovery.v3.AggregatedDiscoveryService/") {
				id, _ := authority.PeerIdentity(ss.Context())
				// The certificate is checked again for as long as the
				// stream lasts: its expiry or revocation ends the stream.
				watch := authority.WatchPeer(ss.Context())
				defer watch.Stop()
				watched := &watchedStream{ServerStream: ss, watch: watch}
				checked := &nodeIdentityStream{ServerStream: watched, namespace: id.Namespace, serviceAccount: id.ServiceAccount}
				err := handler(srv, checked)
				// The xDS server ends a stream quietly on a receive error:
				// give the client the reason.
				return cmp.Or(watched.ended(), checked.refused, err)
			}
			return handler(srv, ss)
		}),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if err := requireMeshCert(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}))...)
	authority.Register(cp.secure)
	cp.xds.Register(cp.secure)
	return nil
}

// addState joins the shared state of the replicas, when configured: this
// replica's registrations go there, the others' come back as the Store
// source "replicas", and shared revocations reach the CA.
func (cp *ControlPlane) addState() error {
	if cp.cfg.State == nil {
		cp.mux.HandleFunc("/debug/replicas", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no shared state configured (vmesh serve --state consul=ADDR | zookeeper=ADDR): this replica is alone", http.StatusNotFound)
		})
		return nil
	}
	key, err := stateKey(*cp.cfg.State, cp.cfg.CA.CACertsDir)
	if err != nil {
		return err
	}
	bi := buildinfo.Get()
	st, err := sharedstate.New(cp.store, sharedstate.Config{
		Spec: *cp.cfg.State, ID: cp.cfg.ReplicaID, CA: cp.ca, Key: key,
		Describe: func() sharedstate.Replica {
			return sharedstate.Replica{XDSAddr: cp.XDSAddr(), SecureAddr: cp.SecureAddr(), HTTPAddr: cp.HTTPAddr(),
				Version: bi.Version, Revision: bi.Revision, Commit: cp.store.Snapshot().Commit(), Proxies: len(cp.xds.Syncz())}
		},
	}, cp.log)
	if err != nil {
		return err
	}
	cp.state, cp.stateSynced = st, make(chan struct{})
	cp.runners = append(cp.runners, st)
	cp.ready = append(cp.ready, cp.stateSynced)
	cp.mux.Handle("/debug/replicas", st.Handler())
	return nil
}

// stateKey is the key that signs the shared state: state.keyFile, else
// derived from the plug-in CA every replica shares; without either the
// replica refuses to start (sharedstate.New says how to make one).
func stateKey(spec sharedstate.Spec, cacertsDir string) (sharedstate.Key, error) {
	switch {
	case spec.KeyFile != "":
		return sharedstate.LoadKeyFile(spec.KeyFile)
	case cacertsDir != "":
		return sharedstate.KeyFromCACerts(cacertsDir)
	}
	return sharedstate.Key{}, nil
}

func (cp *ControlPlane) addSources() error {
	if dir := cp.cfg.ConfigDir; dir != "" {
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("config dir: %w", err)
		}
		opts := []filestore.DirOption{filestore.WithLimits(cp.cfg.limits()), filestore.WithAllowEmpty(cp.cfg.AllowEmpty)}
		if cp.cfg.DataDir != "" {
			opts = append(opts, filestore.WithDecodeCache(cp.decodeCache("dir")))
		}
		src := filestore.NewDirSource(dir, cp.store, cp.log, opts...)
		cp.runners = append(cp.runners, src)
		cp.ready = append(cp.ready, src.Ready())
	}
	if g := cp.cfg.Git; g.Repo != "" {
		token := ""
		if g.TokenFile != "" {
			b, err := os.ReadFile(g.TokenFile)
			if err != nil {
				return fmt.Errorf("git token file: %w", err)
			}
			token = strings.TrimSpace(string(b))
		}
		src, err := filestore.NewGitSource(filestore.GitConfig{
			Repo: g.Repo, Ref: g.Ref, Path: g.Path, Interval: g.Interval, Timeout: g.Timeout, StallTimeout: g.StallTimeout,
			WorkDir:  filepath.Join(cp.cfg.DataDir, "git"),
			Username: g.Username, Token: token, SSHKeyFile: g.SSHKeyFile, KnownHostsFile: g.KnownHostsFile,
			Limits: cp.cfg.limits(), AllowEmpty: cp.cfg.AllowEmpty, DecodeCache: cp.decodeCache("git"),
		}, cp.store, cp.log)
		if err != nil {
			return err
		}
		cp.git = src
		cp.runners = append(cp.runners, src)
		cp.ready = append(cp.ready, src.Ready())
	}
	return nil
}

// decodeCache opens a config source's decode cache in the data directory:
// a restart on unchanged files does not parse them again
// (filestore.DecodeCache). Nil without a data directory.
func (cp *ControlPlane) decodeCache(source string) *filestore.DecodeCache {
	if cp.cfg.DataDir == "" {
		return nil
	}
	c := filestore.OpenDecodeCache(filepath.Join(cp.cfg.DataDir, "decode-cache", source))
	cp.decodeCaches = append(cp.decodeCaches, c)
	return c
}

// saveDecodeCaches writes the sources' decode caches once the control
// plane is ready: encoding them then keeps it off the start's path.
func (cp *ControlPlane) saveDecodeCaches(ctx context.Context) {
	for _, c := range append(slices.Clip(cp.ready), cp.xds.Ready()) {
		select {
		case <-c:
		case <-ctx.Done():
			return
		}
	}
	for _, c := range cp.decodeCaches {
		hits, misses := c.Counts()
		if err := c.Save(); err != nil {
			cp.log.Warn("decode cache not saved; the next start decodes every file", "error", err)
			continue
		}
		cp.log.Debug("decode cache saved", "hits", hits, "misses", misses)
	}
}

// Store returns the control plane's config Store.
func (cp *ControlPlane) Store() *store.Store { return cp.store }

// XDSAddr returns the address the plaintext xDS server listens on.
func (cp *ControlPlane) XDSAddr() string { return cp.xdsLis.Addr().String() }

// SecureAddr returns the address of the TLS port (CA and xDS over mTLS).
func (cp *ControlPlane) SecureAddr() string { return cp.secLis.Addr().String() }

// CA returns the control plane's certificate authority.
func (cp *ControlPlane) CA() *ca.CA { return cp.ca }

// HTTPAddr returns the address the HTTP server listens on.
func (cp *ControlPlane) HTTPAddr() string { return cp.httpLis.Addr().String() }

// Ready reports whether every config source has loaded once and xDS has
// generated config from it.
func (cp *ControlPlane) Ready() bool {
	for _, c := range append(slices.Clip(cp.ready), cp.xds.Ready()) {
		select {
		case <-c:
		default:
			return false
		}
	}
	return true
}

// controlPlaneID names this replica and its build in every xDS response's
// control_plane.identifier: "vmesh <version> (<revision>, <go>) on <host>".
func controlPlaneID() string {
	host, _ := os.Hostname()
	return "vmesh " + buildinfo.Get().String() + " on " + cmp.Or(host, "unknown host")
}

func (cp *ControlPlane) routes() {
	cp.mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(buildinfo.Get())
	})
	cp.mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		fetch := cp.gitFetchProblem()
		held := cp.heldProblem()
		if !cp.Ready() {
			http.Error(w, "config not loaded yet"+fetch+held, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		if fetch != "" {
			// Serving the last good commit: ready, and saying why it is old.
			fmt.Fprintln(w, "warning"+fetch)
		}
		if held != "" {
			fmt.Fprintln(w, "warning"+held)
		}
	})
	cp.mux.Handle("/metrics", promhttp.HandlerFor(cp.registry, promhttp.HandlerOpts{Registry: cp.registry}))
	cp.mux.Handle("/debug/config", filestore.DebugHandler(cp.store, cp.analyses.Warnings))
	cp.mux.HandleFunc("/webhook/git", cp.gitWebhook)
	cp.mux.Handle("/debug/syncz", cp.xds.SynczHandler())
	cp.mux.Handle("/debug/rollout", cp.xds.RolloutHandler())
	cp.mux.Handle("/debug/rollout/", cp.xds.RolloutHandler())
	cp.mux.Handle("/debug/config_dump", cp.xds.ConfigDumpHandler())
	cp.mux.HandleFunc("/debug/onboarding", cp.onboardingHandler)
	cp.runners = append(cp.runners, console.Mount(cp.mux, console.Sources{Store: cp.store, Warnings: cp.analyses.Warnings, Syncz: cp.xds.Syncz, ConfigDump: cp.xds.ConfigDumpHandler(), Registries: console.RegistryStatus(cp.registries), Rollout: cp.xds.RolloutStatus, TrustDomain: cp.ca.TrustDomain()},
		console.WithEventStreams(cp.cfg.HTTP.MaxEventStreams, cp.cfg.HTTP.EventStreamLifetime, func() { cp.httpRefused.WithLabelValues(reasonEventStreams).Inc() }),
		console.WithPrometheus(cp.cfg.Prometheus.URL, cp.cfg.Prometheus.Window, cp.cfg.Prometheus.Timeout)))
	if cp.cfg.Pprof {
		cp.mux.HandleFunc("/debug/pprof/", pprof.Index)
		cp.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		cp.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		cp.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		cp.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
}

// Webhook bounds. A push event's payload is a few KiB (GitHub caps theirs at
// 25 MB, which no signature check here needs to buffer): bodies larger than
// maxWebhookBody are refused with 413, the rest are streamed through the
// HMAC, at most maxWebhookCalls at once, each within webhookReadTimeout. A
// refused call loses nothing: the poll fetches the commit anyway.
const (
	maxWebhookBody     = 1 << 20
	maxWebhookCalls    = 4
	webhookReadTimeout = 10 * time.Second
)

// gitWebhook triggers an immediate fetch. With a webhook secret configured,
// the body must carry a valid X-Hub-Signature-256.
func (cp *ControlPlane) gitWebhook(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if cp.git == nil {
		http.Error(w, "no git source configured", http.StatusNotFound)
		return
	}
	tooLarge := fmt.Sprintf("webhook body larger than %d bytes", maxWebhookBody)
	if r.ContentLength > maxWebhookBody {
		http.Error(w, tooLarge, http.StatusRequestEntityTooLarge)
		return
	}
	select {
	case cp.webhookCalls <- struct{}{}:
		defer func() { <-cp.webhookCalls }()
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many webhook calls at once", http.StatusTooManyRequests)
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(webhookReadTimeout))
	mac := hmac.New(sha256.New, []byte(cp.cfg.Git.WebhookSecret))
	if _, err := io.Copy(mac, http.MaxBytesReader(w, r.Body, maxWebhookBody)); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, tooLarge, http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, fmt.Sprintf("reading the webhook body: %v", err), http.StatusBadRequest)
		return
	}
	if cp.cfg.Git.WebhookSecret != "" {
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		if !hmac.Equal([]byte(want), []byte(r.Header.Get("X-Hub-Signature-256"))) {
			http.Error(w, "bad or missing X-Hub-Signature-256", http.StatusUnauthorized)
			return
		}
	}
	// Whether a fetch was under way before this call asked for one: if so,
	// it must end (or time out) first, and the push is fetched after it.
	st := cp.git.FetchStatus()
	cp.git.Trigger()
	if st.Running > 0 {
		// A stalled fetch is cut within the stall timeout; one that keeps
		// receiving runs up to the timeout.
		w.Header().Set("Retry-After", fmt.Sprint(int(min(st.Timeout-st.Running, st.StallTimeout).Seconds())+1))
		http.Error(w, fmt.Sprintf("a git fetch has been running for %s (cut after %s without data, %s in all): this push is fetched once it ends", st.Running.Round(time.Second), st.StallTimeout, st.Timeout), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintln(w, "fetch triggered")
}

// gitFetchProblem says, as ": ..." for /ready, what the git source's
// fetches are stuck on: one running longer than a poll would, or the last
// one failing. "" when they are fine or there is no git source.
func (cp *ControlPlane) gitFetchProblem() string {
	if cp.git == nil {
		return ""
	}
	st := cp.git.FetchStatus()
	switch {
	case st.LastError != "":
		return fmt.Sprintf(": git fetches failing since %s: %s; serving %s", st.LastErrorAt.UTC().Format(time.RFC3339), st.LastError, cmp.Or(cp.git.GoodCommit(), "nothing yet"))
	case st.Running > min(5*time.Second, st.Timeout/2):
		return fmt.Sprintf(": a git fetch has been running for %s (timeout %s)", st.Running.Round(time.Second), st.Timeout)
	}
	return ""
}

// heldProblem says which config sources hold back a change with errors
// (a rejected commit, by its SHA; a file kept at its last good version),
// with the count and first of their errors, or "".
func (cp *ControlPlane) heldProblem() string {
	var sb strings.Builder
	for _, st := range cp.store.Snapshot().Sources {
		if st.Held == "" {
			continue
		}
		fmt.Fprintf(&sb, ": %s: %s", st.Source, st.Held)
		if len(st.Errors) > 0 {
			fmt.Fprintf(&sb, " (%d error(s), first: %s)", len(st.Errors), st.Errors[0].Error())
		}
	}
	return sb.String()
}

// notify tells systemd the service's state when it runs under a Type=notify
// unit ($NOTIFY_SOCKET set); elsewhere it does nothing.
func (cp *ControlPlane) notify(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		cp.log.Warn("sd_notify failed", "state", state, "error", err)
	}
}

// Run serves until ctx is done or a part fails; it then stops every part.
func (cp *ControlPlane) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(cp.runners)+4)
	for _, r := range cp.runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				errc <- err
				cancel()
			}
		}()
	}
	if cp.registries != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, stop := context.WithTimeout(ctx, cp.cfg.RegistrySyncWait)
			defer stop()
			start := time.Now()
			if late := cp.registries.WaitSynced(wctx); len(late) > 0 && ctx.Err() == nil {
				cp.log.Warn("serving without the first complete set of some registries", "registries", late, "waited", time.Since(start).Round(time.Millisecond))
			}
			close(cp.registriesSynced)
		}()
	}
	if cp.state != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-cp.state.Synced():
			case <-time.After(cp.cfg.RegistrySyncWait):
				cp.log.Warn("serving without the other replicas' registrations: the shared state did not answer", "state", cp.cfg.State.String(), "waited", cp.cfg.RegistrySyncWait)
			case <-ctx.Done():
			}
			close(cp.stateSynced)
		}()
	}
	// xDS starts from the first complete config (files or git, and the
	// registries' first sets): a proxy that connects earlier waits instead
	// of being told that nothing exists.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, c := range cp.ready {
			select {
			case <-c:
			case <-ctx.Done():
				return
			}
		}
		if err := cp.xds.Run(ctx, cp.feed); err != nil {
			errc <- err
			cancel()
		}
	}()
	if len(cp.decodeCaches) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cp.saveDecodeCaches(ctx)
		}()
	}
	srv := cp.httpServer()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(cp.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http server: %w", err)
			cancel()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		// ErrServerStopped: the shutdown came before Serve started.
		if err := cp.grpc.Serve(cp.xdsLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("xds server: %w", err)
			cancel()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		// ErrServerStopped: the shutdown came before Serve started.
		if err := cp.secure.Serve(cp.secLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("secure server: %w", err)
			cancel()
		}
	}()
	// The analysis across sources is logged once per change, from the
	// first complete config on (before it, a host a registry has not
	// delivered yet would be logged missing).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, c := range append(slices.Clone(cp.ready), cp.xds.Ready()) {
			select {
			case <-c:
			case <-ctx.Done():
				return
			}
		}
		_ = analysis.Log(ctx, cp.store, cp.analyses, cp.log)
	}()
	// systemd (Type=notify) hears READY=1 once /ready would answer 200.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, c := range append(slices.Clone(cp.ready), cp.xds.Ready()) {
			select {
			case <-c:
			case <-ctx.Done():
				return
			}
		}
		cp.notify(daemon.SdNotifyReady)
	}()
	bi := buildinfo.Get()
	cp.log.Info("vmesh version", "version", bi.Version, "revision", bi.Revision, "dirty", bi.Dirty, "go", bi.GoVersion)
	if cp.state != nil {
		cp.log.Info("sharing state with the other replicas", "state", cp.cfg.State.String(), "replica", cp.state.ID())
	}
	cp.log.Info("vmesh serving", "http", cp.HTTPAddr(), "xds", cp.XDSAddr(), "secure", cp.SecureAddr())
	<-ctx.Done()
	cp.notify(daemon.SdNotifyStopping)
	cp.grpc.Stop()
	cp.secure.Stop()
	shutdownCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	_ = srv.Shutdown(shutdownCtx)
	wg.Wait()
	close(errc)
	return <-errc
}
