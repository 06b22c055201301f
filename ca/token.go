package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/vmesh/vmesh/ca/spiffe"
)

// MaxTokenSize bounds the bootstrap tokens the CA will parse.
const MaxTokenSize = 8 << 10

// TokenRequest describes a bootstrap token to mint.
type TokenRequest struct {
	Namespace      string
	ServiceAccount string
	// WorkloadGroup optionally binds the token to a WorkloadGroup (in
	// Namespace) the VM joins.
	WorkloadGroup string
	// Audience defaults to the CA's first accepted audience ("istio-ca").
	Audience string
	// TTL defaults to Config.DefaultTokenTTL and may not exceed MaxTokenTTL.
	TTL time.Duration
	// NotBefore, when set, delays the token's validity.
	NotBefore time.Time
}

// TokenClaims is what a verified bootstrap token asserts.
type TokenClaims struct {
	ID            string
	Identity      spiffe.Identity
	WorkloadGroup string
	Audience      []string
	IssuedAt      time.Time
	NotBefore     time.Time
	Expiry        time.Time
}

// vmeshClaims are the private claims next to the registered ones.
type vmeshClaims struct {
	Namespace      string `json:"ns"`
	ServiceAccount string `json:"sa"`
	WorkloadGroup  string `json:"wg,omitempty"`
}

// tokenKeys signs and verifies bootstrap tokens with the CA's issuing key.
type tokenKeys struct {
	signer jose.Signer
	alg    jose.SignatureAlgorithm
	pub    crypto.PublicKey
	kid    string
	issuer string
}

func newTokenKeys(key crypto.Signer, trustDomain string) (*tokenKeys, error) {
	alg, err := joseAlgorithm(key.Public())
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	sum := sha256.Sum256(der)
	kid := base64.RawURLEncoding.EncodeToString(sum[:16])
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), kid))
	if err != nil {
		return nil, fmt.Errorf("token signer: %w", err)
	}
	return &tokenKeys{signer: signer, alg: alg, pub: key.Public(), kid: kid, issuer: spiffe.Scheme + "://" + trustDomain}, nil
}

func joseAlgorithm(pub crypto.PublicKey) (jose.SignatureAlgorithm, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve.Params().BitSize {
		case 256:
			return jose.ES256, nil
		case 384:
			return jose.ES384, nil
		case 521:
			return jose.ES512, nil
		}
	case *rsa.PublicKey:
		return jose.RS256, nil
	case ed25519.PublicKey:
		return jose.EdDSA, nil
	}
	return "", fmt.Errorf("no JWS algorithm for CA key type %T", pub)
}

// CreateToken mints a bootstrap token, signed by the CA key, that lets a VM
// obtain a certificate for the namespace and service account it names.
func (c *CA) CreateToken(req TokenRequest) (string, *TokenClaims, error) {
	id := c.Identity(req.Namespace, req.ServiceAccount)
	if err := id.Validate(); err != nil {
		return "", nil, fmt.Errorf("ca: token: %w", err)
	}
	if req.WorkloadGroup != "" {
		if err := (spiffe.Identity{TrustDomain: id.TrustDomain, Namespace: id.Namespace, ServiceAccount: req.WorkloadGroup}).Validate(); err != nil {
			return "", nil, fmt.Errorf("ca: token: workload group: %w", err)
		}
	}
	ttl := req.TTL
	switch {
	case ttl == 0:
		ttl = c.cfg.DefaultTokenTTL
	case ttl < 0:
		return "", nil, fmt.Errorf("ca: token: TTL %s is negative", ttl)
	case ttl > c.cfg.MaxTokenTTL:
		return "", nil, fmt.Errorf("ca: token: TTL %s exceeds the maximum %s", ttl, c.cfg.MaxTokenTTL)
	}
	aud := req.Audience
	if aud == "" {
		aud = c.cfg.TokenAudiences[0]
	}
	now := c.cfg.Now()
	nbf := now
	if !req.NotBefore.IsZero() {
		nbf = req.NotBefore
	}
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", nil, fmt.Errorf("ca: token id: %w", err)
	}
	reg := jwt.Claims{
		Issuer:    c.tokens.issuer,
		Subject:   id.String(),
		Audience:  jwt.Audience{aud},
		Expiry:    jwt.NewNumericDate(nbf.Add(ttl)),
		NotBefore: jwt.NewNumericDate(nbf),
		IssuedAt:  jwt.NewNumericDate(now),
		ID:        hex.EncodeToString(jti[:]),
	}
	priv := vmeshClaims{Namespace: req.Namespace, ServiceAccount: req.ServiceAccount, WorkloadGroup: req.WorkloadGroup}
	raw, err := jwt.Signed(c.tokens.signer).Claims(reg).Claims(priv).Serialize()
	if err != nil {
		return "", nil, fmt.Errorf("ca: sign token: %w", err)
	}
	c.metrics.tokens.Inc()
	c.log.Info("bootstrap token created", "token_id", reg.ID, "identity", id.String(), "workload_group", req.WorkloadGroup, "audience", aud, "expiry", reg.Expiry.Time())
	return raw, claimsOf(reg, priv, id), nil
}

func claimsOf(reg jwt.Claims, priv vmeshClaims, id spiffe.Identity) *TokenClaims {
	tc := &TokenClaims{ID: reg.ID, Identity: id, WorkloadGroup: priv.WorkloadGroup, Audience: slices.Clone([]string(reg.Audience))}
	if reg.IssuedAt != nil {
		tc.IssuedAt = reg.IssuedAt.Time()
	}
	if reg.NotBefore != nil {
		tc.NotBefore = reg.NotBefore.Time()
	}
	if reg.Expiry != nil {
		tc.Expiry = reg.Expiry.Time()
	}
	return tc
}

// VerifyToken checks a bootstrap token: its signature by this CA's key, its
// issuer, an accepted audience, its validity window (with one minute of
// leeway for clock skew) and its identity claims. Every failure is an *Error
// whose Reason says which check failed.
func (c *CA) VerifyToken(raw string) (*TokenClaims, error) {
	if raw == "" {
		return nil, reject(ReasonNoCredentials, "empty bearer token", nil)
	}
	if len(raw) > MaxTokenSize {
		return nil, reject(ReasonTokenMalformed, fmt.Sprintf("token is %d bytes, more than %d", len(raw), MaxTokenSize), nil)
	}
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{c.tokens.alg})
	if err != nil {
		return nil, reject(ReasonTokenMalformed, "not a compact JWS signed with "+string(c.tokens.alg), err)
	}
	if len(tok.Headers) != 1 {
		return nil, reject(ReasonTokenMalformed, "token must carry exactly one signature", nil)
	}
	var reg jwt.Claims
	var priv vmeshClaims
	if err := tok.Claims(c.tokens.pub, &reg, &priv); err != nil {
		if errors.Is(err, jose.ErrCryptoFailure) {
			detail := "signature does not verify with this CA's key"
			if kid := tok.Headers[0].KeyID; kid != "" && kid != c.tokens.kid {
				detail = fmt.Sprintf("token was signed by key %q, not this CA's key %q", kid, c.tokens.kid)
			}
			return nil, reject(ReasonTokenSignature, detail, err)
		}
		return nil, reject(ReasonTokenMalformed, "decode claims", err)
	}
	if reg.Issuer != c.tokens.issuer {
		return nil, reject(ReasonTokenClaims, fmt.Sprintf("issuer %q, want %q", reg.Issuer, c.tokens.issuer), nil)
	}
	if reg.Expiry == nil {
		return nil, reject(ReasonTokenClaims, "token has no expiry (exp)", nil)
	}
	if reg.ID == "" {
		return nil, reject(ReasonTokenClaims, "token has no id (jti)", nil)
	}
	now := c.cfg.Now()
	err = reg.ValidateWithLeeway(jwt.Expected{AnyAudience: jwt.Audience(c.cfg.TokenAudiences), Time: now}, clockSkew)
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrExpired):
		return nil, reject(ReasonTokenExpired, fmt.Sprintf("token %s expired at %s (now %s)", reg.ID, reg.Expiry.Time().UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)), nil)
	case errors.Is(err, jwt.ErrNotValidYet):
		return nil, reject(ReasonTokenNotYetValid, fmt.Sprintf("token %s is not valid before %s (now %s)", reg.ID, reg.NotBefore.Time().UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)), nil)
	case errors.Is(err, jwt.ErrInvalidAudience):
		return nil, reject(ReasonTokenAudience, fmt.Sprintf("token audience %q is not one of %q", []string(reg.Audience), c.cfg.TokenAudiences), nil)
	default:
		return nil, reject(ReasonTokenClaims, "validate claims", err)
	}
	id := c.Identity(priv.Namespace, priv.ServiceAccount)
	if err := id.Validate(); err != nil {
		return nil, reject(ReasonTokenClaims, "identity claims", err)
	}
	if reg.Subject != id.String() {
		return nil, reject(ReasonTokenClaims, fmt.Sprintf("subject %q does not match ns/sa claims %s", reg.Subject, id), nil)
	}
	issued := now
	if reg.IssuedAt != nil {
		issued = reg.IssuedAt.Time()
	}
	if rv, revoked, err := c.revoked.checkToken(reg.ID); err != nil {
		return nil, reject(ReasonInternal, "cannot read the revocation list, refusing token "+reg.ID+" for now (retried)", err)
	} else if revoked {
		return nil, reject(ReasonTokenRevoked, fmt.Sprintf("token %s was revoked at %s%s", reg.ID, rv.RevokedAt.UTC().Format(time.RFC3339), reasonSuffix(rv.Reason)), nil)
	}
	rv, revoked, err := c.revoked.check(nil, id.String(), issued)
	if err != nil {
		return nil, reject(ReasonInternal, "cannot read the revocation list, refusing token "+reg.ID+" for now (retried)", err)
	}
	if revoked {
		return nil, reject(ReasonTokenRevoked, fmt.Sprintf("token %s for %s was issued before the identity was revoked at %s%s", reg.ID, id, rv.RevokedAt.UTC().Format(time.RFC3339), reasonSuffix(rv.Reason)), nil)
	}
	return claimsOf(reg, priv, id), nil
}
