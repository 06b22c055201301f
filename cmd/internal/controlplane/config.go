// Package controlplane composes vmesh's stages (sources, Store, registries,
// xDS, CA) into the running `vmesh serve` process and its HTTP server.
package controlplane

import (
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/registries"
	"github.com/vmesh/vmesh/writers/sharedstate"
)

// Config is the server configuration: the keys of vmesh.yaml, mirrored by
// the flags of `vmesh serve`.
type Config struct {
	// ConfigDir is a directory of Istio YAML to watch.
	ConfigDir string `yaml:"configDir"`
	// Git configures a git repository as the config source.
	Git GitConfig `yaml:"git"`
	// HTTPAddr serves /ready, /metrics, /debug/* and the git webhook.
	HTTPAddr string `yaml:"httpAddr"`
	// HTTP guards the HTTP port: the names it answers to, its token, its
	// connection and stream limits.
	HTTP HTTPConfig `yaml:"http"`
	// XDSAddr serves plaintext xDS.
	XDSAddr string `yaml:"xdsAddr"`
	// SecureAddr serves the CA (Istio's CreateCertificate) and xDS over TLS;
	// xDS there needs a mesh client certificate (mTLS).
	SecureAddr string `yaml:"secureAddr"`
	// MCP says who may read the mesh's config over MCP (xds/mcp): see
	// MCPConfig.
	MCP MCPConfig `yaml:"mcp"`
	// SecureHosts are extra DNS names or IPs for the secure port's
	// certificate (the SecureAddr host, localhost and 127.0.0.1 are always in).
	SecureHosts []string `yaml:"secureHosts"`
	// DataDir holds local state: the git clone, CA keys.
	DataDir string `yaml:"dataDir"`
	// CA configures the certificate authority.
	CA CAConfig `yaml:"ca"`
	// MeshConfig is a file of Istio's MeshConfig (the `mesh` key of
	// istiod's ConfigMap), read at start over Istio's defaults: default
	// retries, outbound traffic policy, connect timeout, and trustDomain
	// and rootNamespace when CA leaves them empty.
	MeshConfig string `yaml:"meshConfig"`
	// ConfigSourceDelta reads the mesh config's configSources
	// (xds://HOST:PORT, config over xDS) with delta ADS instead of SotW,
	// which istiod's own client speaks.
	ConfigSourceDelta bool `yaml:"configSourceDelta"`
	// JWKSAllowedCIDRs are the non-global address ranges (loopback,
	// link-local, private, CGNAT, ...) RequestAuthentication key sets may
	// be fetched from; by default a jwksUri or issuer resolving into one
	// fails closed (warning VM1012).
	JWKSAllowedCIDRs []string `yaml:"jwksAllowedCIDRs"`
	// JWKSBlockedCIDRs are address ranges RequestAuthentication key sets
	// are never fetched from, even when JWKSAllowedCIDRs or global
	// reachability would allow them (Istio's BLOCKED_CIDRS_IN_JWKS_URIS):
	// a jwksUri or issuer resolving into one fails closed.
	JWKSBlockedCIDRs []string `yaml:"jwksBlockedCIDRs"`
	// Registries lists the registry adapters (see registries.Spec); the
	// --registry flag adds "consul=ADDR", "zookeeper=ADDR[,ADDR]" or
	// "static=FILE" entries.
	Registries []registries.Spec `yaml:"registries"`
	// RegistrySyncWait bounds how long xDS and /ready wait for every
	// registry's first complete set; default 30s. A registry that is down
	// at start does not keep the file or git config from being served.
	RegistrySyncWait time.Duration `yaml:"registrySyncWait"`
	// DebounceQuiet and DebounceMax tune push debouncing.
	DebounceQuiet time.Duration `yaml:"debounceQuiet"`
	DebounceMax   time.Duration `yaml:"debounceMax"`
	// RegistrationGrace is how long an auto-registered WorkloadEntry outlives
	// its agent's connection; default 10s.
	RegistrationGrace time.Duration `yaml:"registrationGrace"`
	// State, when set, shares what this replica learns at run time
	// (auto-registrations and their health, revocations) with the other
	// replicas through Consul or ZooKeeper; the --state flag sets
	// "consul=ADDR" or "zookeeper=ADDR[,ADDR]".
	State *sharedstate.Spec `yaml:"state"`
	// ReplicaID names this replica in the shared state and in the origin of
	// the registrations it shares; default "<hostname>-<random>".
	ReplicaID string `yaml:"replicaID"`
	// Pprof exposes /debug/pprof on the HTTP server.
	Pprof bool `yaml:"pprof"`
	// MaxFileBytes, MaxDocuments and MaxProblems bound each file of the
	// config directory or git repository: its size (a larger file is
	// refused before it is read), its YAML documents, and the problems
	// kept and logged for it (the rest are counted).
	MaxFileBytes int64 `yaml:"maxFileBytes"`
	MaxDocuments int   `yaml:"maxDocuments"`
	MaxProblems  int   `yaml:"maxProblems"`
	// Prometheus, when its URL is set, puts request and error rates on
	// the console's service graph (/ui/graph), queried from that server.
	Prometheus PrometheusConfig `yaml:"prometheus"`
	// AllowEmpty lets the directory or git source withdraw every object it
	// serves; by default a folder or commit that defines none is held and
	// reported (Argo CD's allowEmpty).
	AllowEmpty bool `yaml:"allowEmpty"`
}

// GitConfig is the git source part of Config.
type GitConfig struct {
	Repo     string        `yaml:"repo"`
	Ref      string        `yaml:"ref"`
	Path     string        `yaml:"path"`
	Interval time.Duration `yaml:"interval"`
	// Timeout bounds every git command, a fetch that keeps receiving
	// included; StallTimeout cuts a fetch that receives nothing for that
	// long, which is reported at once and retried with backoff.
	Timeout        time.Duration `yaml:"timeout"`
	StallTimeout   time.Duration `yaml:"stallTimeout"`
	Username       string        `yaml:"username"`
	TokenFile      string        `yaml:"tokenFile"`
	SSHKeyFile     string        `yaml:"sshKeyFile"`
	KnownHostsFile string        `yaml:"knownHostsFile"`
	// WebhookSecret, when set, requires a GitHub/Gitea-style
	// X-Hub-Signature-256 HMAC on webhook calls.
	WebhookSecret string `yaml:"webhookSecret"`
	// WebhookSecretFile holds WebhookSecret (surrounding white space
	// trimmed): the command line takes the secret only this way, so it is
	// never in the process's argv.
	WebhookSecretFile string `yaml:"webhookSecretFile"`
	// Rollout, when set, stages every commit: to the canaries first, to
	// the rest after the bake time (RolloutConfig).
	Rollout *RolloutConfig `yaml:"rollout"`
}

// HTTPConfig is the HTTP port's guard part of Config.
type HTTPConfig struct {
	// AllowedHosts are the names, besides localhost and any IP address,
	// that requests may carry in their Host header; any other Host is
	// refused with 421 (a web page rebinding its DNS name to this host).
	AllowedHosts []string `yaml:"allowedHosts"`
	// TokenFile holds a bearer token every request needs but /ready,
	// /version and /webhook/git (which has its own secret).
	TokenFile string `yaml:"tokenFile"`
	// MaxConnections caps the connections the HTTP port holds at once;
	// default 256. Beyond it new ones wait in the kernel's backlog.
	MaxConnections int `yaml:"maxConnections"`
	// MaxEventStreams caps the console's open live-update streams
	// (/ui/events); default 32, more get 503.
	MaxEventStreams int `yaml:"maxEventStreams"`
	// EventStreamLifetime ends each live-update stream after it (the
	// browser opens a new one); default 10m.
	EventStreamLifetime time.Duration `yaml:"eventStreamLifetime"`
}

// PrometheusConfig is the Prometheus server the console's graph reads
// its rates from: operator config only, never the config store.
type PrometheusConfig struct {
	// URL is the server's base address, http(s)://host:port[/path].
	URL string `yaml:"url"`
	// Window is the range the rates are averaged over (PromQL rate's);
	// default 1m. It needs at least two scrapes in it.
	Window time.Duration `yaml:"window"`
	// Timeout bounds the queries of one page; default 3s.
	Timeout time.Duration `yaml:"timeout"`
}

func (p PrometheusConfig) validate() error {
	if p.Window < 0 || p.Timeout < 0 {
		return fmt.Errorf("prometheus: window %s and timeout %s must not be negative", p.Window, p.Timeout)
	}
	if p.URL == "" {
		return nil
	}
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("prometheus: url %q: want http(s)://host[:port][/path]", p.URL)
	}
	return nil
}

// CAConfig is the CA part of Config.
type CAConfig struct {
	// TrustDomain of workload SPIFFE IDs; default cluster.local.
	TrustDomain string `yaml:"trustDomain"`
	// RootNamespace holds mesh-wide PeerAuthentication and
	// AuthorizationPolicy; default istio-system, as in Istio.
	RootNamespace string `yaml:"rootNamespace"`
	// CACertsDir is an Istio plug-in cacerts directory; default: a
	// self-signed root created in <dataDir>/ca.
	CACertsDir string `yaml:"cacertsDir"`
	// CertTTL is the default and MaxCertTTL the longest workload certificate lifetime.
	CertTTL    time.Duration `yaml:"certTTL"`
	MaxCertTTL time.Duration `yaml:"maxCertTTL"`
}

// DefaultConfig returns the defaults: Istio's port numbers on loopback.
func DefaultConfig() Config {
	return Config{
		HTTPAddr:      "127.0.0.1:15014",
		XDSAddr:       "127.0.0.1:15010",
		SecureAddr:    "127.0.0.1:15012",
		DataDir:       ".vmesh-data",
		DebounceQuiet: 100 * time.Millisecond,
		DebounceMax:   time.Second,
		Git:           GitConfig{Ref: "HEAD", Interval: 30 * time.Second, Timeout: filestore.DefaultGitTimeout, StallTimeout: filestore.DefaultGitStallTimeout},

		HTTP: HTTPConfig{MaxConnections: 256, MaxEventStreams: 32, EventStreamLifetime: 10 * time.Minute},

		RegistrySyncWait: 30 * time.Second,
		MaxFileBytes:     filestore.DefaultMaxFileBytes,
		MaxDocuments:     filestore.DefaultMaxDocuments,
		MaxProblems:      filestore.DefaultMaxProblems,
	}
}

// limits returns the file limits of the config sources.
func (c Config) limits() filestore.Limits {
	return filestore.Limits{MaxFileBytes: c.MaxFileBytes, MaxDocuments: c.MaxDocuments, MaxProblems: c.MaxProblems}
}

// LoadConfigFile reads a vmesh.yaml over the defaults. Unknown keys are errors.
func LoadConfigFile(path string, cfg *Config) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("server config: %w", err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		return fmt.Errorf("server config %s: %w", path, err)
	}
	return nil
}

// Validate checks that the configuration can run.
func (c Config) Validate() error {
	switch {
	case c.ConfigDir == "" && c.Git.Repo == "" && len(c.Registries) == 0:
		return fmt.Errorf("no config source: set --config-dir, --git-repo or --registry (try: vmesh serve --config-dir examples/quickstart)")
	case c.ConfigDir != "" && c.Git.Repo != "":
		return fmt.Errorf("--config-dir and --git-repo are exclusive: pick one source of truth")
	case c.DebounceQuiet <= 0 || c.DebounceMax < c.DebounceQuiet:
		return fmt.Errorf("debounce: quiet %s must be > 0 and <= max %s", c.DebounceQuiet, c.DebounceMax)
	case (len(c.Registries) > 0 || c.State != nil) && c.RegistrySyncWait <= 0:
		return fmt.Errorf("registrySyncWait %s must be > 0", c.RegistrySyncWait)
	case c.MaxFileBytes <= 0 || c.MaxDocuments <= 0 || c.MaxProblems <= 0:
		return fmt.Errorf("maxFileBytes %d, maxDocuments %d and maxProblems %d must be > 0", c.MaxFileBytes, c.MaxDocuments, c.MaxProblems)
	case c.Git.Repo != "" && c.Git.Timeout <= 0:
		return fmt.Errorf("git timeout %s must be > 0", c.Git.Timeout)
	case c.Git.Repo != "" && c.Git.StallTimeout < 0:
		return fmt.Errorf("git stall timeout %s must not be negative", c.Git.StallTimeout)
	case c.HTTP.MaxConnections <= 0 || c.HTTP.MaxEventStreams <= 0 || c.HTTP.EventStreamLifetime <= 0:
		return fmt.Errorf("http: maxConnections %d, maxEventStreams %d and eventStreamLifetime %s must be > 0", c.HTTP.MaxConnections, c.HTTP.MaxEventStreams, c.HTTP.EventStreamLifetime)
	case c.HTTP.MaxEventStreams >= c.HTTP.MaxConnections:
		return fmt.Errorf("http: maxEventStreams %d must be below maxConnections %d, or the streams take every connection", c.HTTP.MaxEventStreams, c.HTTP.MaxConnections)
	}
	if err := c.Prometheus.validate(); err != nil {
		return err
	}
	if err := c.Git.Rollout.validate(c.Git.Repo); err != nil {
		return err
	}
	if c.State != nil {
		if err := c.State.Validate(); err != nil {
			return err
		}
	}
	if _, err := c.jwksBlockedCIDRs(); err != nil {
		return err
	}
	if _, err := c.jwksAllowedCIDRs(); err != nil {
		return err
	}
	if strings.ContainsAny(c.ReplicaID, "/~ ") {
		return fmt.Errorf("replicaID %q must not contain '/', '~' or spaces", c.ReplicaID)
	}
	return registries.Validate(c.Registries)
}

// jwksBlockedCIDRs parses JWKSBlockedCIDRs.
func (c Config) jwksBlockedCIDRs() ([]netip.Prefix, error) {
	return parseCIDRs("jwksBlockedCIDRs", c.JWKSBlockedCIDRs, "169.254.0.0/16")
}

// jwksAllowedCIDRs parses JWKSAllowedCIDRs.
func (c Config) jwksAllowedCIDRs() ([]netip.Prefix, error) {
	return parseCIDRs("jwksAllowedCIDRs", c.JWKSAllowedCIDRs, "10.1.2.3/32")
}

// parseCIDRs parses the CIDR ranges of the config field named field.
func parseCIDRs(field string, ranges []string, example string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, v := range ranges {
		p, err := netip.ParsePrefix(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s[%d] %q: not a CIDR range (e.g. %s): %w", field, i, v, example, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// MCPConfig says who may read the mesh's whole config over MCP (Istio's
// config type URLs on the xDS ports, as an istiod with configSources
// reads it). By default only a client with a mesh certificate of the root
// namespace (ca.rootNamespace, istio-system) on the secure port, as
// Istio's api generator allows (ENABLE_XDS_API_GENERATOR_AUTH).
type MCPConfig struct {
	// Identities are more mesh identities (SPIFFE IDs) allowed on the
	// secure port.
	Identities []string `yaml:"identities"`
	// Plaintext lets any client of the plaintext xDS port read the
	// config: istiod's configSources client dials plaintext only. The
	// port is for loopback and trusted networks.
	Plaintext bool `yaml:"plaintext"`
}
