package bootstrap

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// ServerListenerTemplate is the listener name a proxyless gRPC server asks
// for, with %s replaced by its IP:port.
const ServerListenerTemplate = "xds.vmesh.io/grpc/lds/inbound/%s"

// CertProviderName is the certificate provider instance the generated
// proxyless TLS contexts name.
const CertProviderName = "default"

// GRPCConfig describes a proxyless application's xDS bootstrap.
type GRPCConfig struct {
	Node Node
	// ServerURI is the control plane's xDS address (host:port, TLS).
	ServerURI string
	// ServerURIs are more replicas, listed after ServerURI as further
	// xds_servers. grpc-go falls back to them only while a watched
	// resource is not cached yet (gRFC A71); for live failover give
	// ServerURI one DNS name with several addresses.
	ServerURIs []string
	// LocalXDS, when set, is the agent's xDS proxy on the VM, a Unix
	// socket path: the only xDS server then, without channel credentials
	// ("insecure": a local socket only the VM's data planes may open),
	// the agent carrying the stream over its own mTLS connection, as
	// istio-agent's xDS proxy does. Every gRPC language reads that file
	// (grpc-node accepts no "tls" channel credentials). ServerURI and
	// ServerURIs are not written then.
	LocalXDS string
	// CertDir holds cert-chain.pem, key.pem and root-cert.pem (written by
	// the agent); the xDS channel uses them for mTLS and the "default"
	// certificate provider serves them to the application's connections.
	CertDir string
	// CertFile, KeyFile and RootFile name the files inside CertDir.
	CertFile, KeyFile, RootFile string
	// RefreshInterval is how often file_watcher re-reads the files;
	// default 1 minute, well under the half-lifetime of a certificate.
	RefreshInterval time.Duration
}

type grpcBootstrap struct {
	XDSServers                         []grpcServer            `json:"xds_servers"`
	Node                               grpcNode                `json:"node"`
	CertificateProviders               map[string]grpcProvider `json:"certificate_providers"`
	ServerListenerResourceNameTemplate string                  `json:"server_listener_resource_name_template"`
}

type grpcServer struct {
	ServerURI      string      `json:"server_uri"`
	ChannelCreds   []grpcCreds `json:"channel_creds"`
	ServerFeatures []string    `json:"server_features"`
}

type grpcCreds struct {
	Type   string         `json:"type"`
	Config map[string]any `json:"config,omitempty"`
}

type grpcNode struct {
	ID      string `json:"id"`
	Cluster string `json:"cluster"`
	// Locality is always written (grpc-node requires the field, empty or
	// not).
	Locality grpcLocality   `json:"locality"`
	Metadata map[string]any `json:"metadata"`
}

type grpcLocality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	SubZone string `json:"sub_zone,omitempty"`
}

type grpcProvider struct {
	PluginName string         `json:"plugin_name"`
	Config     map[string]any `json:"config"`
}

// GRPC renders the xDS bootstrap JSON of proxyless gRPC applications (the
// file GRPC_XDS_BOOTSTRAP names), in the fields every gRPC language
// documents: ADS to the agent's local xDS proxy (LocalXDS) or to the
// control plane over TLS with the agent's certificate, the node with its
// locality and GENERATOR=grpc, the "default" file_watcher certificate
// provider and vmesh's server listener name template.
func GRPC(cfg GRPCConfig) ([]byte, error) {
	if err := cfg.Node.Validate(); err != nil {
		return nil, err
	}
	if (cfg.ServerURI == "" && cfg.LocalXDS == "") || cfg.CertDir == "" {
		return nil, fmt.Errorf("bootstrap: grpc bootstrap needs a server URI and a certificate directory")
	}
	// Applications read the file from their own working directory: every
	// path in it is absolute.
	dir, err := filepath.Abs(cfg.CertDir)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: certificate directory: %w", err)
	}
	cfg.CertDir = dir
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&cfg.CertFile, "cert-chain.pem")
	def(&cfg.KeyFile, "key.pem")
	def(&cfg.RootFile, "root-cert.pem")
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = time.Minute
	}
	files := map[string]any{
		"certificate_file":    filepath.Join(cfg.CertDir, cfg.CertFile),
		"private_key_file":    filepath.Join(cfg.CertDir, cfg.KeyFile),
		"ca_certificate_file": filepath.Join(cfg.CertDir, cfg.RootFile),
	}
	provider := map[string]any{"refresh_interval": fmt.Sprintf("%ds", int64(cfg.RefreshInterval/time.Second))}
	for k, v := range files {
		provider[k] = v
	}
	var servers []grpcServer
	if cfg.LocalXDS != "" {
		sock, err := filepath.Abs(cfg.LocalXDS)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: local xDS socket: %w", err)
		}
		servers = []grpcServer{{ServerURI: "unix://" + sock, ChannelCreds: []grpcCreds{{Type: "insecure"}}, ServerFeatures: []string{"xds_v3"}}}
	} else {
		for _, uri := range append([]string{cfg.ServerURI}, cfg.ServerURIs...) {
			if uri == "" {
				return nil, fmt.Errorf("bootstrap: an empty xDS server URI")
			}
			servers = append(servers, grpcServer{ServerURI: uri, ChannelCreds: []grpcCreds{{Type: "tls", Config: files}}, ServerFeatures: []string{"xds_v3"}})
		}
	}
	region, rest, _ := strings.Cut(cfg.Node.Locality, "/")
	zone, subzone, _ := strings.Cut(rest, "/")
	b := grpcBootstrap{
		XDSServers: servers,
		Node: grpcNode{ID: cfg.Node.ID(), Cluster: cfg.Node.Cluster(), Metadata: cfg.Node.Metadata(GeneratorGRPC),
			Locality: grpcLocality{Region: region, Zone: zone, SubZone: subzone}},
		CertificateProviders:               map[string]grpcProvider{CertProviderName: {PluginName: "file_watcher", Config: provider}},
		ServerListenerResourceNameTemplate: ServerListenerTemplate,
	}
	out, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return append(out, '\n'), nil
}
