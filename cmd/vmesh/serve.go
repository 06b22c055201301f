package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/registries"
	"github.com/vmesh/vmesh/writers/sharedstate"
)

func newServeCmd() *cobra.Command { return newServeCmdWith(runControlPlane) }

// runControlPlane builds and runs the control plane until ctx ends.
func runControlPlane(ctx context.Context, cfg controlplane.Config, logger *slog.Logger) error {
	cp, err := controlplane.New(cfg, logger)
	if err != nil {
		return err
	}
	return cp.Run(ctx)
}

// newServeCmdWith builds `vmesh serve` around run, which receives the
// resolved configuration (defaults < vmesh.yaml < flags).
func newServeCmdWith(run func(context.Context, controlplane.Config, *slog.Logger) error) *cobra.Command {
	cfg := controlplane.DefaultConfig()
	var configFile string
	var logs logFlags
	var registryFlags []string
	var stateFlag, stateKeyFile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the control plane: config sources, registries, xDS, CA",
		Example: `  vmesh serve --config-dir examples/quickstart
  vmesh serve --git-repo https://git.example.com/mesh.git --git-ref main --git-path prod
  vmesh serve --config /etc/vmesh/vmesh.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseURLPassword("--git-repo", cfg.Git.Repo); err != nil {
				return err
			}
			if cmd.Flags().Changed("git-webhook-secret") {
				return errors.New("--git-webhook-secret: a secret on the command line is readable by every user of this host (ps, /proc/PID/cmdline): put it in a file and pass --git-webhook-secret-file FILE, or set git.webhookSecretFile in the config file")
			}
			specs, err := registries.ParseFlags(registryFlags)
			if err != nil {
				return err
			}
			cfg.Registries = append(cfg.Registries, specs...)
			if stateFlag != "" {
				spec, err := sharedstate.ParseFlag(stateFlag)
				if err != nil {
					return err
				}
				cfg.State = &spec
			}
			if configFile != "" {
				// The file fills the defaults; flags given on the command line win.
				fromFile := controlplane.DefaultConfig()
				if err := controlplane.LoadConfigFile(configFile, &fromFile); err != nil {
					return err
				}
				mergeFlags(cmd, &fromFile, cfg)
				cfg = fromFile
			}
			if stateKeyFile != "" {
				if cfg.State == nil {
					return fmt.Errorf("--state-key-file without --state (or state: in vmesh.yaml)")
				}
				st := *cfg.State
				st.KeyFile = stateKeyFile
				cfg.State = &st
			}
			logger, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			return run(cmd.Context(), cfg, logger)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "server config file (vmesh.yaml); flags given on the command line win")
	logs.register(cmd)
	f.StringVar(&cfg.ConfigDir, "config-dir", cfg.ConfigDir, "directory of Istio YAML to watch")
	f.StringVar(&cfg.Git.Repo, "git-repo", cfg.Git.Repo, "git repository URL or path to serve config from")
	f.StringVar(&cfg.Git.Ref, "git-ref", cfg.Git.Ref, "git branch, tag or ref")
	f.StringVar(&cfg.Git.Path, "git-path", cfg.Git.Path, "sub-folder of the git repository")
	f.DurationVar(&cfg.Git.Interval, "git-interval", cfg.Git.Interval, "git poll interval")
	f.DurationVar(&cfg.Git.Timeout, "git-timeout", cfg.Git.Timeout, "longest any git command may run, a fetch that keeps receiving data included")
	f.DurationVar(&cfg.Git.StallTimeout, "git-stall-timeout", cfg.Git.StallTimeout, "a git fetch that receives nothing this long is cut, reported and retried with backoff")
	f.StringVar(&cfg.Git.Username, "git-username", cfg.Git.Username, "HTTPS username (default git)")
	f.StringVar(&cfg.Git.TokenFile, "git-token-file", cfg.Git.TokenFile, "file holding an HTTPS token")
	f.StringVar(&cfg.Git.SSHKeyFile, "git-ssh-key", cfg.Git.SSHKeyFile, "SSH private key file")
	f.StringVar(&cfg.Git.KnownHostsFile, "git-known-hosts", cfg.Git.KnownHostsFile, "SSH known_hosts file")
	f.StringVar(&cfg.Git.WebhookSecretFile, "git-webhook-secret-file", cfg.Git.WebhookSecretFile, "file holding the HMAC secret checked on POST /webhook/git")
	// The secret itself is refused on the command line (argv is readable
	// by every user of the host); the flag stays to say so.
	f.StringVar(&cfg.Git.WebhookSecret, "git-webhook-secret", "", "refused: use --git-webhook-secret-file (a secret in argv is visible in /proc/PID/cmdline)")
	_ = f.MarkHidden("git-webhook-secret")
	f.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "HTTP address: /ready, /metrics, /debug/*, git webhook")
	f.StringArrayVar(&cfg.HTTP.AllowedHosts, "http-allowed-host", cfg.HTTP.AllowedHosts, "a name, besides localhost and IP addresses, requests to the HTTP port may carry as Host (repeatable); any other Host gets 421 (DNS rebinding guard)")
	f.StringVar(&cfg.HTTP.TokenFile, "http-token-file", cfg.HTTP.TokenFile, "file holding a bearer token the HTTP port asks for on every path but /ready, /version and a webhook with its secret (browsers: open /ui/?token=TOKEN once)")
	f.IntVar(&cfg.HTTP.MaxConnections, "http-max-connections", cfg.HTTP.MaxConnections, "most connections the HTTP port holds at once; more wait")
	f.IntVar(&cfg.HTTP.MaxEventStreams, "http-max-event-streams", cfg.HTTP.MaxEventStreams, "most console live-update streams (/ui/events) open at once; more get 503")
	f.StringVar(&cfg.XDSAddr, "xds-addr", cfg.XDSAddr, "plaintext xDS address (keep it on loopback or a trusted network)")
	f.StringVar(&cfg.SecureAddr, "secure-addr", cfg.SecureAddr, "TLS address: the CA (CreateCertificate) and xDS over mTLS")
	f.StringArrayVar(&cfg.SecureHosts, "secure-host", cfg.SecureHosts, "extra DNS name or IP for the secure port's certificate (repeatable)")
	f.BoolVar(&cfg.MCP.Plaintext, "mcp-plaintext", cfg.MCP.Plaintext, "serve the mesh's config over MCP (Istio's config type URLs, as istiod's configSources reads them) to any client of the plaintext xDS port; by default only to mesh certificates of the root namespace on the secure port")
	f.StringArrayVar(&cfg.MCP.Identities, "mcp-identity", cfg.MCP.Identities, "a mesh identity (spiffe://TD/ns/NS/sa/SA) besides the root namespace's that may read the mesh's config over MCP on the secure port (repeatable)")
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "local state: git clone, CA keys")
	f.StringVar(&cfg.CA.TrustDomain, "trust-domain", cfg.CA.TrustDomain, "SPIFFE trust domain (default cluster.local)")
	f.StringArrayVar(&cfg.JWKSBlockedCIDRs, "jwks-blocked-cidr", cfg.JWKSBlockedCIDRs, "address range RequestAuthentication key sets are never fetched from, e.g. 169.254.0.0/16 (repeatable; Istio's BLOCKED_CIDRS_IN_JWKS_URIS)")
	f.StringArrayVar(&cfg.JWKSAllowedCIDRs, "jwks-allowed-cidr", cfg.JWKSAllowedCIDRs, "loopback, link-local or private address range RequestAuthentication key sets may be fetched from, e.g. 10.1.2.3/32 (repeatable; by default only global addresses are)")
	f.StringVar(&cfg.MeshConfig, "mesh-config", cfg.MeshConfig, "Istio MeshConfig YAML (the mesh key of istiod's ConfigMap): default retries, outboundTrafficPolicy, connectTimeout, trustDomain, rootNamespace")
	f.BoolVar(&cfg.ConfigSourceDelta, "config-source-delta", cfg.ConfigSourceDelta, "read the mesh config's configSources (xds://HOST:PORT) with delta ADS instead of SotW")
	f.StringVar(&cfg.CA.RootNamespace, "root-namespace", cfg.CA.RootNamespace, "namespace of mesh-wide PeerAuthentication, AuthorizationPolicy and RequestAuthentication (default istio-system)")
	f.StringVar(&cfg.CA.CACertsDir, "cacerts-dir", cfg.CA.CACertsDir, "Istio plug-in CA directory (ca-cert.pem, ca-key.pem, cert-chain.pem, root-cert.pem); default: a self-signed root in <data-dir>/ca")
	f.DurationVar(&cfg.CA.CertTTL, "cert-ttl", cfg.CA.CertTTL, "default workload certificate lifetime (default 24h)")
	f.DurationVar(&cfg.CA.MaxCertTTL, "max-cert-ttl", cfg.CA.MaxCertTTL, "longest workload certificate lifetime a VM may ask for (default 90 days)")
	f.StringArrayVar(&registryFlags, "registry", nil, "registry adapter: consul=ADDR, zookeeper=ADDR[,ADDR], static=FILE (repeatable; adds to vmesh.yaml's registries)")
	f.StringVar(&stateFlag, "state", "", "state shared with the other replicas (auto-registrations, revocations): consul=ADDR or zookeeper=ADDR[,ADDR]; vmesh.yaml: state: {type, address, prefix, ttl, keyFile}")
	f.StringVar(&stateKeyFile, "state-key-file", "", "with --state: file of at least 32 random bytes, the same on every replica, that signs the shared records (head -c 32 /dev/urandom); default: derived from --cacerts-dir's ca-key.pem")
	f.StringVar(&cfg.ReplicaID, "replica-id", cfg.ReplicaID, "this replica's name in the shared state (default <hostname>-<random>)")
	f.DurationVar(&cfg.DebounceQuiet, "debounce-quiet", cfg.DebounceQuiet, "push after config has been quiet this long")
	f.DurationVar(&cfg.DebounceMax, "debounce-max", cfg.DebounceMax, "push at most this long after the first change")
	f.DurationVar(&cfg.RegistrationGrace, "registration-grace", cfg.RegistrationGrace, "how long an auto-registered VM stays after its agent disconnects (default 10s)")
	f.BoolVar(&cfg.Pprof, "pprof", cfg.Pprof, "serve /debug/pprof on the HTTP address")
	f.Int64Var(&cfg.MaxFileBytes, "max-file-bytes", cfg.MaxFileBytes, "largest config file or git blob read; a larger one is refused before it is read")
	f.IntVar(&cfg.MaxDocuments, "max-documents", cfg.MaxDocuments, "most YAML documents in one config file")
	f.IntVar(&cfg.MaxProblems, "max-problems", cfg.MaxProblems, "problems kept and logged per config file (the rest are counted)")
	f.StringVar(&cfg.Prometheus.URL, "prometheus", cfg.Prometheus.URL, "Prometheus server (http://host:9090) the console's graph (/ui/graph) reads request and error rates from; vmesh.yaml: prometheus: {url, window, timeout}")
	f.DurationVar(&cfg.Prometheus.Window, "prometheus-window", cfg.Prometheus.Window, "range the graph's rates are averaged over; at least two scrape intervals (default 1m)")
	f.BoolVar(&cfg.AllowEmpty, "allow-empty", cfg.AllowEmpty, "apply a folder or commit that defines no object (default: hold it and keep serving)")
	return cmd
}

// mergeFlags copies every flag the user set on the command line from flags
// into into.
func mergeFlags(cmd *cobra.Command, into *controlplane.Config, flags controlplane.Config) {
	set := func(name string, apply func()) {
		if cmd.Flags().Changed(name) {
			apply()
		}
	}
	set("config-dir", func() { into.ConfigDir = flags.ConfigDir })
	set("git-repo", func() { into.Git.Repo = flags.Git.Repo })
	set("git-ref", func() { into.Git.Ref = flags.Git.Ref })
	set("git-path", func() { into.Git.Path = flags.Git.Path })
	set("git-interval", func() { into.Git.Interval = flags.Git.Interval })
	set("git-timeout", func() { into.Git.Timeout = flags.Git.Timeout })
	set("git-stall-timeout", func() { into.Git.StallTimeout = flags.Git.StallTimeout })
	set("git-username", func() { into.Git.Username = flags.Git.Username })
	set("git-token-file", func() { into.Git.TokenFile = flags.Git.TokenFile })
	set("git-ssh-key", func() { into.Git.SSHKeyFile = flags.Git.SSHKeyFile })
	set("git-known-hosts", func() { into.Git.KnownHostsFile = flags.Git.KnownHostsFile })
	set("git-webhook-secret-file", func() { into.Git.WebhookSecretFile = flags.Git.WebhookSecretFile })
	set("http-addr", func() { into.HTTPAddr = flags.HTTPAddr })
	set("http-allowed-host", func() { into.HTTP.AllowedHosts = flags.HTTP.AllowedHosts })
	set("http-token-file", func() { into.HTTP.TokenFile = flags.HTTP.TokenFile })
	set("http-max-connections", func() { into.HTTP.MaxConnections = flags.HTTP.MaxConnections })
	set("http-max-event-streams", func() { into.HTTP.MaxEventStreams = flags.HTTP.MaxEventStreams })
	set("xds-addr", func() { into.XDSAddr = flags.XDSAddr })
	set("data-dir", func() { into.DataDir = flags.DataDir })
	set("secure-addr", func() { into.SecureAddr = flags.SecureAddr })
	set("secure-host", func() { into.SecureHosts = flags.SecureHosts })
	set("mcp-plaintext", func() { into.MCP.Plaintext = flags.MCP.Plaintext })
	set("mcp-identity", func() { into.MCP.Identities = flags.MCP.Identities })
	set("trust-domain", func() { into.CA.TrustDomain = flags.CA.TrustDomain })
	set("cacerts-dir", func() { into.CA.CACertsDir = flags.CA.CACertsDir })
	set("root-namespace", func() { into.CA.RootNamespace = flags.CA.RootNamespace })
	set("mesh-config", func() { into.MeshConfig = flags.MeshConfig })
	set("config-source-delta", func() { into.ConfigSourceDelta = flags.ConfigSourceDelta })
	set("jwks-blocked-cidr", func() { into.JWKSBlockedCIDRs = flags.JWKSBlockedCIDRs })
	set("jwks-allowed-cidr", func() { into.JWKSAllowedCIDRs = flags.JWKSAllowedCIDRs })
	set("cert-ttl", func() { into.CA.CertTTL = flags.CA.CertTTL })
	set("max-cert-ttl", func() { into.CA.MaxCertTTL = flags.CA.MaxCertTTL })
	into.Registries = append(into.Registries, flags.Registries...)
	set("debounce-quiet", func() { into.DebounceQuiet = flags.DebounceQuiet })
	set("debounce-max", func() { into.DebounceMax = flags.DebounceMax })
	set("registration-grace", func() { into.RegistrationGrace = flags.RegistrationGrace })
	set("state", func() { into.State = flags.State })
	set("replica-id", func() { into.ReplicaID = flags.ReplicaID })
	set("pprof", func() { into.Pprof = flags.Pprof })
	set("max-file-bytes", func() { into.MaxFileBytes = flags.MaxFileBytes })
	set("max-documents", func() { into.MaxDocuments = flags.MaxDocuments })
	set("max-problems", func() { into.MaxProblems = flags.MaxProblems })
	set("allow-empty", func() { into.AllowEmpty = flags.AllowEmpty })
	set("prometheus", func() { into.Prometheus.URL = flags.Prometheus.URL })
	set("prometheus-window", func() { into.Prometheus.Window = flags.Prometheus.Window })
}
