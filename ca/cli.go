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

// RevokeRequest names what `vmesh ca revoke` revokes: exactly one of a
// certificate's hex serial number, a SPIFFE identity (every certificate
// and token issued for it so far) or a bootstrap token's ID.
type RevokeRequest struct {
	Serial   string
	Identity string
	Token    string
	Reason   string
}

// Revoke revokes, with the CA in cfg, what req names: the work of `vmesh ca
// revoke`. A running CA sharing the data dir sees it on its next check (it
// re-reads the list when the file changes).
func Revoke(cfg Config, logger *slog.Logger, req RevokeRequest) error {
	n := 0
	for _, v := range []string{req.Serial, req.Identity, req.Token} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("ca: revoke: give exactly one of a serial number, an identity or a token ID")
	}
	c, err := Open(cfg, logger)
	if err != nil {
		return err
	}
	switch {
	case req.Serial != "":
		return c.RevokeSerial(req.Serial, req.Reason)
	case req.Token != "":
		return c.RevokeToken(req.Token, req.Reason)
	}
	id, err := spiffe.Parse(req.Identity)
	if err != nil {
		return fmt.Errorf("ca: revoke: %w", err)
	}
	if id.TrustDomain != c.TrustDomain() {
		return fmt.Errorf("ca: revoke: %s is not of this CA's trust domain %q: it would match nothing", req.Identity, c.TrustDomain())
	}
	return c.RevokeIdentity(id, req.Reason)
}

// Revocations lists the revocation list of the CA in cfg: `vmesh ca
// revocations`.
func Revocations(cfg Config, logger *slog.Logger) ([]Revocation, error) {
	c, err := Open(cfg, logger)
	if err != nil {
		return nil, err
	}
	return c.Revoked(), nil
}
