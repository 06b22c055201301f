package ca

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	securityv1alpha1 "istio.io/api/security/v1alpha1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/vmesh/vmesh/ca/spiffe"
)

// AuthMethod says how a caller proved its identity.
type AuthMethod string

// Authentication methods.
const (
	AuthToken       AuthMethod = "token"
	AuthCertificate AuthMethod = "certificate"
)

// Caller is an authenticated caller.
type Caller struct {
	Identity spiffe.Identity
	Method   AuthMethod
	// Token holds the bootstrap token's claims when Method is AuthToken.
	Token *TokenClaims
	// Certificate is the verified client certificate when Method is
	// AuthCertificate.
	Certificate *x509.Certificate
}

// Register adds the IstioCertificateService to a gRPC server. The server
// should use the TLS configuration from ServerTLSConfig.
func (c *CA) Register(s grpc.ServiceRegistrar) {
	securityv1alpha1.RegisterIstioCertificateServiceServer(s, &service{ca: c})
}

// service implements istio.v1.auth.IstioCertificateService.
type service struct {
	securityv1alpha1.UnimplementedIstioCertificateServiceServer
	ca *CA
}

var _ securityv1alpha1.IstioCertificateServiceServer = (*service)(nil)

// CreateCertificate signs the CSR for the identity the caller authenticated
// as. Rejections are gRPC statuses whose message starts with the Reason.
func (s *service) CreateCertificate(ctx context.Context, req *securityv1alpha1.IstioCertificateRequest) (*securityv1alpha1.IstioCertificateResponse, error) {
	c := s.ca
	caller, chain, err := c.createCertificate(ctx, req)
	if err != nil {
		reason := ReasonOf(err)
		c.metrics.rejected.WithLabelValues(string(reason)).Inc()
		attrs := []any{"reason", reason, "error", err}
		if p, ok := peer.FromContext(ctx); ok {
			attrs = append(attrs, "peer", p.Addr.String())
		}
		if caller != nil {
			attrs = append(attrs, "identity", caller.Identity.String())
		}
		c.log.Warn("certificate request rejected", attrs...)
		if e, ok := err.(*Error); ok {
			return nil, e.GRPCStatus().Err()
		}
		return nil, reject(ReasonInternal, "", err).GRPCStatus().Err()
	}
	c.metrics.issued.WithLabelValues(string(caller.Method)).Inc()
	return &securityv1alpha1.IstioCertificateResponse{CertChain: chain}, nil
}

func (c *CA) createCertificate(ctx context.Context, req *securityv1alpha1.IstioCertificateRequest) (*Caller, []string, error) {
	caller, err := c.Authenticate(ctx)
	if err != nil {
		return nil, nil, err
	}
	if md := req.GetMetadata(); md != nil {
		if _, ok := md.GetFields()["ImpersonatedIdentity"]; ok {
			return caller, nil, reject(ReasonImpersonation, "ImpersonatedIdentity is not supported: the identity comes only from the caller's credentials", nil)
		}
	}
	// As in Istio: a lifetime of zero or less asks for the default.
	ttl := time.Duration(max(req.GetValidityDuration(), 0)) * time.Second
	if req.GetValidityDuration() > int64(c.cfg.MaxTTL/time.Second) {
		return caller, nil, reject(ReasonTTL, fmt.Sprintf("requested lifetime %ds exceeds the maximum %s", req.GetValidityDuration(), c.cfg.MaxTTL), nil)
	}
	leaf, chain, err := c.SignCSR([]byte(req.GetCsr()), caller.Identity, ttl)
	if err != nil {
		return caller, nil, err
	}
	attrs := []any{"identity", caller.Identity.String(), "auth", caller.Method, "serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter}
	if caller.Token != nil {
		attrs = append(attrs, "token_id", caller.Token.ID)
		if caller.Token.WorkloadGroup != "" {
			attrs = append(attrs, "workload_group", caller.Token.WorkloadGroup)
		}
	}
	c.log.Info("certificate issued", attrs...)
	return caller, chain, nil
}

// Authenticate finds who is calling: a client certificate presented over
// TLS, when there is one, must be a valid, unrevoked mesh certificate and is
// the identity (a bearer token is then ignored); otherwise the bearer token in
// the "authorization" metadata must be a valid bootstrap token. A call with
// neither fails with ReasonNoCredentials.
func (c *CA) Authenticate(ctx context.Context) (*Caller, error) {
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			id, err := c.VerifyPeerCertificates(ti.State.PeerCertificates)
			if err != nil {
				return nil, err
			}
			return &Caller{Identity: id, Method: AuthCertificate, Certificate: ti.State.PeerCertificates[0]}, nil
		}
	}
	raw, err := bearerToken(ctx)
	if err != nil {
		return nil, err
	}
	claims, err := c.VerifyToken(raw)
	if err != nil {
		return nil, err
	}
	return &Caller{Identity: claims.Identity, Method: AuthToken, Token: claims}, nil
}

// bearerToken reads "authorization: Bearer <token>" from the incoming gRPC
// metadata.
func bearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return "", reject(ReasonNoCredentials, "no client certificate and no \"authorization: Bearer <token>\" metadata", nil)
	}
	if len(vals) > 1 {
		return "", reject(ReasonTokenMalformed, fmt.Sprintf("%d authorization values, want one", len(vals)), nil)
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", reject(ReasonTokenMalformed, "authorization metadata is not \"Bearer <token>\"", nil)
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", reject(ReasonNoCredentials, "empty bearer token", nil)
	}
	return tok, nil
}

// PeerIdentity authenticates the caller of a gRPC call by its client
// certificate alone (for xDS over mTLS on the secure port): the certificate
// must chain to the trust bundle, be currently valid, not be revoked and
// carry exactly one SPIFFE ID in this trust domain. A caller without a
// client certificate gets ReasonNoCredentials.
func (c *CA) PeerIdentity(ctx context.Context) (spiffe.Identity, error) {
	certs, err := peerCertificates(ctx)
	if err != nil {
		return spiffe.Identity{}, err
	}
	return c.VerifyPeerCertificates(certs)
}

// VerifyPeerCertificates checks a presented certificate chain (leaf first)
// as PeerIdentity does and returns the leaf's SPIFFE identity.
func (c *CA) VerifyPeerCertificates(certs []*x509.Certificate) (spiffe.Identity, error) {
	if len(certs) == 0 {
		return spiffe.Identity{}, reject(ReasonNoCredentials, "no client certificate", nil)
	}
	leaf := certs[0]
	serial := leaf.SerialNumber.Text(16)
	now := c.cfg.Now()
	// Trust first (at a time inside the leaf's validity, so a foreign
	// certificate is called untrusted whatever its dates), then the dates.
	at := now
	if at.After(leaf.NotAfter) {
		at = leaf.NotAfter
	}
	if at.Before(leaf.NotBefore) {
		at = leaf.NotBefore
	}
	if _, err := c.is.roots.Verify(leaf, certs[1:], at, x509.ExtKeyUsageClientAuth); err != nil {
		return spiffe.Identity{}, reject(ReasonCertUntrusted, fmt.Sprintf("client certificate %s does not verify against the mesh trust bundle", serial), err)
	}
	if err := c.checkLive(leaf, now); err != nil {
		return spiffe.Identity{}, err
	}
	id, err := spiffe.FromCertificate(leaf)
	if err != nil {
		return spiffe.Identity{}, reject(ReasonCertIdentity, "client certificate", err)
	}
	if id.TrustDomain != c.cfg.TrustDomain {
		return spiffe.Identity{}, reject(ReasonCertIdentity, fmt.Sprintf("client certificate identity %s is not in trust domain %q", id, c.cfg.TrustDomain), nil)
	}
	if err := c.checkRevoked(leaf, id); err != nil {
		return spiffe.Identity{}, err
	}
	return id, nil
}

// checkLive reports a leaf outside its validity at now.
func (c *CA) checkLive(leaf *x509.Certificate, now time.Time) error {
	serial := leaf.SerialNumber.Text(16)
	if now.After(leaf.NotAfter) {
		return reject(ReasonCertExpired, fmt.Sprintf("client certificate %s expired at %s (now %s); use a bootstrap token to get a new one", serial, leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)), nil)
	}
	if now.Before(leaf.NotBefore) {
		return reject(ReasonCertExpired, fmt.Sprintf("client certificate %s is not valid before %s", serial, leaf.NotBefore.UTC().Format(time.RFC3339)), nil)
	}
	return nil
}

// checkRevoked reports a leaf whose serial or identity is revoked.
func (c *CA) checkRevoked(leaf *x509.Certificate, id spiffe.Identity) error {
	serial := leaf.SerialNumber.Text(16)
	rv, revoked, err := c.revoked.check(leaf.SerialNumber, id.String(), c.issuedAt(leaf))
	if err != nil {
		return reject(ReasonInternal, fmt.Sprintf("cannot read the revocation list, refusing certificate %s for now (retried)", serial), err)
	}
	if revoked {
		what := "certificate " + serial
		if rv.Serial == "" {
			what = "identity " + rv.Identity
		}
		return reject(ReasonCertRevoked, fmt.Sprintf("client certificate %s is revoked (%s revoked at %s%s)", serial, what, rv.RevokedAt.UTC().Format(time.RFC3339), reasonSuffix(rv.Reason)), nil)
	}
	return nil
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}
