package ca

import (
	"fmt"
	"maps"
	"time"

	"github.com/vmesh/vmesh/ca/bundle"
)

// VMBundleRequest describes the onboarding bundle of one VM.
type VMBundleRequest struct {
	Namespace      string
	ServiceAccount string
	WorkloadGroup  string
	Labels         map[string]string
	// DiscoveryAddress is host:port of the secure port (xDS and CA over TLS).
	DiscoveryAddress string
	// FailoverAddresses are the other replicas' secure ports, tried in
	// order when DiscoveryAddress does not answer.
	FailoverAddresses []string
	// ProxyMetadata is MeshConfig defaultConfig.proxyMetadata, for the
	// agent (bundle.Bundle.ProxyMetadata).
	ProxyMetadata map[string]string
	// Gateway makes the VM a gateway (bundle.Bundle.Gateway).
	Gateway bool
	// TokenTTL and Audience of the bootstrap token; zero values take the
	// CA's defaults.
	TokenTTL time.Duration
	Audience string
}

// NewVMBundle mints a bootstrap token for the VM and assembles its bundle
// with the CA's trust bundle.
func (c *CA) NewVMBundle(req VMBundleRequest) (*bundle.Bundle, error) {
	tok, claims, err := c.CreateToken(TokenRequest{
		Namespace: req.Namespace, ServiceAccount: req.ServiceAccount, WorkloadGroup: req.WorkloadGroup,
		Audience: req.Audience, TTL: req.TokenTTL,
	})
	if err != nil {
		return nil, err
	}
	b := &bundle.Bundle{
		RootCerts:         c.is.roots.PEM(),
		Token:             tok,
		DiscoveryAddress:  req.DiscoveryAddress,
		FailoverAddresses: req.FailoverAddresses,
		ProxyMetadata:     req.ProxyMetadata,
		TrustDomain:       c.cfg.TrustDomain,
		Namespace:         req.Namespace,
		ServiceAccount:    req.ServiceAccount,
		WorkloadGroup:     req.WorkloadGroup,
		Labels:            maps.Clone(req.Labels),
		Gateway:           req.Gateway,
		TokenExpiry:       claims.Expiry.UTC(),
	}
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("ca: vm bundle: %w", err)
	}
	return b, nil
}

// WriteVMBundle is NewVMBundle followed by writing the bundle into dir, the
// work of `vmesh vm bundle --out DIR`.
func (c *CA) WriteVMBundle(dir string, req VMBundleRequest) (*bundle.Bundle, error) {
	b, err := c.NewVMBundle(req)
	if err != nil {
		return nil, err
	}
	if err := b.Write(dir); err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	return b, nil
}
