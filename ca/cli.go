package ca

import (
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"time"

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

// RevocationFor builds the entry `vmesh ca revoke --state` shares when no
// CA is at hand (an operator's machine): what the CA's own Revoke* methods
// record with the default lifetimes (DefaultMaxTTL, DefaultMaxTokenTTL).
// trustDomain, when set, must be the identity's.
func RevocationFor(req RevokeRequest, now time.Time, trustDomain string) (Revocation, error) {
	return newRevocation(req, now.UTC(), DefaultMaxTTL, DefaultMaxTokenTTL, trustDomain)
}

// newRevocation validates req and builds its entry at now: an identity's
// and a token's entries last as long as what they revoke could.
func newRevocation(req RevokeRequest, now time.Time, maxTTL, maxTokenTTL time.Duration, trustDomain string) (Revocation, error) {
	n := 0
	for _, v := range []string{req.Serial, req.Identity, req.Token} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return Revocation{}, fmt.Errorf("ca: revoke: give exactly one of a serial number, an identity or a token ID")
	}
	switch {
	case req.Serial != "":
		s, ok := new(big.Int).SetString(strings.TrimPrefix(strings.ReplaceAll(strings.ToLower(req.Serial), ":", ""), "0x"), 16)
		if !ok || s.Sign() <= 0 {
			return Revocation{}, fmt.Errorf("ca: revoke: %q is not a hex serial number", req.Serial)
		}
		// A serial's certificate is unknown here: keep the entry as long
		// as any certificate could live.
		return Revocation{Serial: s.Text(16), RevokedAt: now, NotAfter: now.Add(maxTTL), Reason: req.Reason}, nil
	case req.Token != "":
		return Revocation{Token: req.Token, RevokedAt: now, NotAfter: now.Add(maxTokenTTL), Reason: req.Reason}, nil
	}
	id, err := spiffe.Parse(req.Identity)
	if err == nil {
		err = id.Validate()
	}
	if err != nil {
		return Revocation{}, fmt.Errorf("ca: revoke: %w", err)
	}
	if trustDomain != "" && id.TrustDomain != trustDomain {
		return Revocation{}, fmt.Errorf("ca: revoke: %s is not of this CA's trust domain %q: it would match nothing", req.Identity, trustDomain)
	}
	return Revocation{Identity: id.String(), RevokedAt: now, NotAfter: now.Add(max(maxTTL, maxTokenTTL)), Reason: req.Reason}, nil
}
