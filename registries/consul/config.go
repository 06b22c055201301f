package consul

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// Config configures one Consul registry entry.
type Config struct {
	// Address of the Consul HTTP API, host:port (a scheme prefix is allowed).
	Address string `yaml:"address" json:"address"`
	// Scheme is http or https, default http (https when TLS is set).
	Scheme string `yaml:"scheme,omitempty" json:"scheme,omitempty"`
	// Datacenter to read, default the agent's.
	Datacenter string `yaml:"datacenter,omitempty" json:"datacenter,omitempty"`
	// Token is the ACL token; TokenFile reads it from a file instead.
	Token     string `yaml:"token,omitempty" json:"-"`
	TokenFile string `yaml:"tokenFile,omitempty" json:"tokenFile,omitempty"`
	// TLS for an https API.
	TLS TLSConfig `yaml:"tls,omitempty" json:"tls,omitempty"`
	// HostSuffix follows the service name in generated hosts, default
	// "service.consul" (so web → web.service.consul, as Consul's DNS names it).
	HostSuffix string `yaml:"hostSuffix,omitempty" json:"hostSuffix,omitempty"`
	// WaitTime is the longest a blocking query waits, default 5m.
	WaitTime time.Duration `yaml:"waitTime,omitempty" json:"waitTime,omitempty"`
	// RetryMax caps the reconnect backoff, default 30s.
	RetryMax time.Duration `yaml:"retryMax,omitempty" json:"retryMax,omitempty"`
	// InitialSyncTimeout bounds how long the first set waits for every
	// service to be read once, default 10s.
	InitialSyncTimeout time.Duration `yaml:"initialSyncTimeout,omitempty" json:"initialSyncTimeout,omitempty"`
	// Exclude lists services not to generate, default ["consul"].
	Exclude []string `yaml:"exclude,omitempty" json:"exclude,omitempty"`
}

// TLSConfig holds the client TLS files for Consul's HTTPS API.
type TLSConfig struct {
	CAFile             string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	CertFile           string `yaml:"certFile,omitempty" json:"certFile,omitempty"`
	KeyFile            string `yaml:"keyFile,omitempty" json:"keyFile,omitempty"`
	ServerName         string `yaml:"serverName,omitempty" json:"serverName,omitempty"`
	InsecureSkipVerify bool   `yaml:"insecureSkipVerify,omitempty" json:"insecureSkipVerify,omitempty"`
}

func (t TLSConfig) set() bool { return t != TLSConfig{} }

// withDefaults fills unset fields and validates.
func (c Config) withDefaults() (Config, error) {
	if c.Address == "" {
		return c, errors.New("consul: no address")
	}
	if s, rest, ok := strings.Cut(c.Address, "://"); ok {
		if c.Scheme == "" {
			c.Scheme = s
		}
		c.Address = rest
	}
	if c.Scheme == "" {
		c.Scheme = "http"
		if c.TLS.set() {
			c.Scheme = "https"
		}
	}
	if c.Scheme != "http" && c.Scheme != "https" {
		return c, fmt.Errorf("consul: scheme %q (want http or https)", c.Scheme)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return c, errors.New("consul: tls certFile and keyFile go together")
	}
	if c.HostSuffix == "" {
		c.HostSuffix = "service.consul"
	}
	c.HostSuffix = strings.Trim(c.HostSuffix, ".")
	if c.WaitTime <= 0 {
		c.WaitTime = 5 * time.Minute
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 30 * time.Second
	}
	if c.InitialSyncTimeout <= 0 {
		c.InitialSyncTimeout = 10 * time.Second
	}
	if c.Exclude == nil {
		c.Exclude = []string{"consul"}
	}
	return c, nil
}

// apiConfig builds the consul/api client config.
func (c Config) apiConfig() (*api.Config, error) {
	token := c.Token
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("consul: token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	return &api.Config{
		Address:    c.Address,
		Scheme:     c.Scheme,
		Datacenter: c.Datacenter,
		Token:      token,
		TLSConfig: api.TLSConfig{
			Address:            c.TLS.ServerName,
			CAFile:             c.TLS.CAFile,
			CertFile:           c.TLS.CertFile,
			KeyFile:            c.TLS.KeyFile,
			InsecureSkipVerify: c.TLS.InsecureSkipVerify,
		},
	}, nil
}
