// Package bundle is the VM onboarding bundle: everything one VM needs to join
// the mesh (the trusted roots, a bootstrap token, the discovery address and
// the workload's namespace, service account, labels and WorkloadGroup),
// written by `vmesh vm bundle` and read by the per-VM agent. It is the
// vmesh counterpart of `istioctl x workload entry configure`, without
// Kubernetes behind it.
//
// A bundle directory holds three files:
//
//	root-cert.pem  the mesh trust bundle (one or more PEM roots)
//	token          the bootstrap token (mode 0600)
//	bundle.yaml    the rest, as YAML (see Bundle)
package bundle

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vmesh/vmesh/internal/atomicfile"
	"github.com/vmesh/vmesh/internal/pemcert"

	"gopkg.in/yaml.v3"
)

// File names inside a bundle directory.
const (
	RootCertFile = "root-cert.pem"
	TokenFile    = "token"
	ConfigFile   = "bundle.yaml"
)

// APIVersion and Kind head bundle.yaml.
const (
	APIVersion = "vmesh.io/v1alpha1"
	Kind       = "VMBundle"
)

// Bundle is one VM's onboarding material.
type Bundle struct {
	// RootCerts is the PEM trust bundle the VM verifies the control plane and
	// its peers with.
	RootCerts []byte `yaml:"-"`
	// Token is the bootstrap token the VM presents to get its first certificate.
	Token string `yaml:"-"`

	// DiscoveryAddress is host:port of the control plane's secure port
	// (xDS and CA over TLS, 15012).
	DiscoveryAddress string `yaml:"discoveryAddress"`
	// FailoverAddresses are the secure ports of the other control-plane
	// replicas (host:port), tried in order when DiscoveryAddress does not
	// answer.
	FailoverAddresses []string `yaml:"failoverAddresses,omitempty"`
	// TrustDomain of the mesh.
	TrustDomain string `yaml:"trustDomain"`
	// Namespace and ServiceAccount name the VM's identity.
	Namespace      string `yaml:"namespace"`
	ServiceAccount string `yaml:"serviceAccount"`
	// WorkloadGroup, when set, is the WorkloadGroup (in Namespace) the VM
	// registers under.
	WorkloadGroup string `yaml:"workloadGroup,omitempty"`
	// Labels are the workload's labels.
	Labels map[string]string `yaml:"labels,omitempty"`
	// Gateway makes the VM a gateway (Istio's ingress or egress gateway):
	// its Envoy runs in router mode (node id "router~…"), serving the
	// Gateways whose selector matches Labels, with no traffic capture and
	// readiness on port 15021.
	Gateway bool `yaml:"gateway,omitempty"`
	// ProxyMetadata is the mesh config's defaultConfig.proxyMetadata (as
	// istioctl writes it into a VM's cluster.env): the agent puts every
	// ISTIO_META_<KEY> into its nodes' metadata as <KEY>, as pilot-agent
	// does, and reports the rest as not applied.
	ProxyMetadata map[string]string `yaml:"proxyMetadata,omitempty"`
	// TokenExpiry is when Token stops being accepted.
	TokenExpiry time.Time `yaml:"tokenExpiry,omitempty"`
}

// DiscoveryAddresses lists DiscoveryAddress, then the FailoverAddresses.
func (b *Bundle) DiscoveryAddresses() []string {
	return append([]string{b.DiscoveryAddress}, b.FailoverAddresses...)
}

type file struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Bundle     `yaml:",inline"`
}

// Validate checks that the bundle is complete and well formed.
func (b *Bundle) Validate() error {
	var errs []error
	if b.DiscoveryAddress == "" {
		errs = append(errs, errors.New("discoveryAddress is empty"))
	} else if _, port, err := net.SplitHostPort(b.DiscoveryAddress); err != nil || port == "" {
		errs = append(errs, fmt.Errorf("discoveryAddress %q is not host:port", b.DiscoveryAddress))
	}
	for _, a := range b.FailoverAddresses {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("failoverAddresses: %q is not host:port", a))
		}
	}
	if b.TrustDomain == "" {
		errs = append(errs, errors.New("trustDomain is empty"))
	}
	if b.Namespace == "" {
		errs = append(errs, errors.New("namespace is empty"))
	}
	if b.ServiceAccount == "" {
		errs = append(errs, errors.New("serviceAccount is empty"))
	}
	if strings.TrimSpace(b.Token) == "" {
		errs = append(errs, errors.New("token is empty"))
	} else if strings.ContainsAny(strings.TrimSpace(b.Token), " \t\r\n") {
		errs = append(errs, errors.New("token contains white space"))
	}
	if _, err := ParseRoots(b.RootCerts); err != nil {
		errs = append(errs, fmt.Errorf("root certificates: %w", err))
	}
	for k := range b.Labels {
		if k == "" {
			errs = append(errs, errors.New("label with an empty key"))
		}
	}
	return errors.Join(errs...)
}

// Write writes the bundle into dir (created with mode 0700 if missing),
// each file atomically; the token file gets mode 0600.
func (b *Bundle) Write(dir string) error {
	if err := b.Validate(); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	cfg, err := yaml.Marshal(file{APIVersion: APIVersion, Kind: Kind, Bundle: *b})
	if err != nil {
		return fmt.Errorf("bundle: encode %s: %w", ConfigFile, err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{RootCertFile, b.RootCerts, 0o644},
		{TokenFile, []byte(strings.TrimSpace(b.Token) + "\n"), 0o600},
		{ConfigFile, cfg, 0o644},
	} {
		if err := atomicfile.Write(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return fmt.Errorf("bundle: write %s: %w", f.name, err)
		}
	}
	return nil
}

// Read loads and validates the bundle in dir.
func Read(dir string) (*Bundle, error) {
	cfg, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(cfg))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("bundle: %s: %w", filepath.Join(dir, ConfigFile), err)
	}
	if f.APIVersion != APIVersion || f.Kind != Kind {
		return nil, fmt.Errorf("bundle: %s: apiVersion/kind %q/%q, want %q/%q", filepath.Join(dir, ConfigFile), f.APIVersion, f.Kind, APIVersion, Kind)
	}
	b := f.Bundle
	if b.RootCerts, err = os.ReadFile(filepath.Join(dir, RootCertFile)); err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	tok, err := os.ReadFile(filepath.Join(dir, TokenFile))
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	b.Token = strings.TrimSpace(string(tok))
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	return &b, nil
}

// ParseRoots reads the PEM root certificates of a trust bundle: at least
// one, each a CA.
func ParseRoots(data []byte) ([]*x509.Certificate, error) {
	roots, err := pemcert.Parse(data)
	if err != nil {
		return nil, err
	}
	for _, c := range roots {
		if !c.IsCA {
			return nil, fmt.Errorf("certificate %q is not a CA", c.Subject)
		}
	}
	return roots, nil
}

// ParseLabels reads "k1=v1,k2=v2" (the --labels flag) into a map.
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q is not key=value", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %q given twice", k)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

// FormatLabels renders labels as "k1=v1,k2=v2", sorted by key.
func FormatLabels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}
