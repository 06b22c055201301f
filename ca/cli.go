package ca

import (
	"fmt"
	"log/slog"

	"github.com/vmesh/vmesh/ca/bundle"
	"github.com/vmesh/vmesh/ca/spiffe"
)

// Open loads an existing CA for a command-line tool: it never creates a
// self-signed root (a token signed by a fresh root would be useless to the
// running server) and registers no metrics.
func Open(cfg Config, logger *slog.Logger) (*CA, error) {
	cfg.NoCreate = true
	return New(cfg, logger, nil)
}

// CreateToken mints a bootstrap token with the CA in cfg: the work of
// `vmesh token create --namespace --service-account [--workload-group]
// [--audience] [--ttl]`.
func CreateToken(cfg Config, logger *slog.Logger, req TokenRequest) (string, *TokenClaims, error) {
	c, err := Open(cfg, logger)
	if err != nil {
		return "", nil, err
	}
	return c.CreateToken(req)
}

// WriteVMBundle writes a VM onboarding bundle into dir with the CA in cfg:
// the work of `vmesh vm bundle --out DIR --namespace --service-account
// [--workload-group] [--labels] --discovery-address`. Parse --labels with
// bundle.ParseLabels.
func WriteVMBundle(cfg Config, logger *slog.Logger, dir string, req VMBundleRequest) (*bundle.Bundle, error) {
	c, err := Open(cfg, logger)
	if err != nil {
		return nil, err
	}
	return c.WriteVMBundle(dir, req)
}

// Revoke revokes, with the CA in cfg, either one certificate by its hex
// serial number or (when serial is empty) every certificate and token of a
// namespace/service account issued so far: the work of a `vmesh ca revoke`
// command. A running CA sharing the data dir sees it on its next check.
func Revoke(cfg Config, logger *slog.Logger, serial, namespace, serviceAccount, reason string) error {
	c, err := Open(cfg, logger)
	if err != nil {
		return err
	}
	if serial != "" {
		if namespace != "" || serviceAccount != "" {
			return fmt.Errorf("ca: revoke: give a serial number or a namespace and service account, not both")
		}
		return c.RevokeSerial(serial, reason)
	}
	return c.RevokeIdentity(spiffe.Identity{TrustDomain: c.TrustDomain(), Namespace: namespace, ServiceAccount: serviceAccount}, reason)
}
