package ca

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vmesh/vmesh/internal/refusal"
)

// Reason names why a certificate request or an authentication was rejected.
// It is the "reason" label of vmesh_ca_certificates_rejected_total.
type Reason string

// Rejection reasons.
const (
	ReasonNoCredentials    Reason = "no_credentials"
	ReasonTokenMalformed   Reason = "token_malformed"
	ReasonTokenSignature   Reason = "token_signature"
	ReasonTokenExpired     Reason = "token_expired"
	ReasonTokenNotYetValid Reason = "token_not_yet_valid"
	ReasonTokenAudience    Reason = "token_audience"
	ReasonTokenClaims      Reason = "token_claims"
	ReasonTokenRevoked     Reason = "token_revoked"
	ReasonCertUntrusted    Reason = "cert_untrusted"
	ReasonCertExpired      Reason = "cert_expired"
	ReasonCertRevoked      Reason = "cert_revoked"
	ReasonCertIdentity     Reason = "cert_identity"
	ReasonCSRInvalid       Reason = "csr_invalid"
	ReasonCSRIdentity      Reason = "csr_identity"
	ReasonTTL              Reason = "ttl"
	ReasonImpersonation    Reason = "impersonation"
	ReasonInternal         Reason = "internal"
)

// allReasons lists every Reason, for the metrics.
func allReasons() []Reason {
	return []Reason{ReasonNoCredentials, ReasonTokenMalformed, ReasonTokenSignature, ReasonTokenExpired, ReasonTokenNotYetValid,
		ReasonTokenAudience, ReasonTokenClaims, ReasonTokenRevoked, ReasonCertUntrusted, ReasonCertExpired, ReasonCertRevoked,
		ReasonCertIdentity, ReasonCSRInvalid, ReasonCSRIdentity, ReasonTTL, ReasonImpersonation, ReasonInternal}
}

// Error is a rejection: a Reason callers and tests branch on, and a detail
// that tells the operator what exactly was wrong.
type Error struct {
	Reason Reason
	Detail string
	Err    error
}

// Sentinel rejections for errors.Is: errors.Is(err, ca.ErrTokenExpired)
// holds for every *Error with that Reason.
var (
	ErrNoCredentials    = &Error{Reason: ReasonNoCredentials}
	ErrTokenMalformed   = &Error{Reason: ReasonTokenMalformed}
	ErrTokenSignature   = &Error{Reason: ReasonTokenSignature}
	ErrTokenExpired     = &Error{Reason: ReasonTokenExpired}
	ErrTokenNotYetValid = &Error{Reason: ReasonTokenNotYetValid}
	ErrTokenAudience    = &Error{Reason: ReasonTokenAudience}
	ErrTokenClaims      = &Error{Reason: ReasonTokenClaims}
	ErrTokenRevoked     = &Error{Reason: ReasonTokenRevoked}
	ErrCertUntrusted    = &Error{Reason: ReasonCertUntrusted}
	ErrCertExpired      = &Error{Reason: ReasonCertExpired}
	ErrCertRevoked      = &Error{Reason: ReasonCertRevoked}
	ErrCertIdentity     = &Error{Reason: ReasonCertIdentity}
	ErrCSRInvalid       = &Error{Reason: ReasonCSRInvalid}
	ErrCSRIdentity      = &Error{Reason: ReasonCSRIdentity}
	ErrTTL              = &Error{Reason: ReasonTTL}
	ErrImpersonation    = &Error{Reason: ReasonImpersonation}
)

func reject(r Reason, detail string, err error) *Error {
	return &Error{Reason: r, Detail: detail, Err: err}
}

// Error renders "<reason>: <detail>: <cause>".
func (e *Error) Error() string {
	s := string(e.Reason)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same Reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == e.Reason
}

// Code is the gRPC status code the rejection is returned with.
func (e *Error) Code() codes.Code {
	switch e.Reason {
	case ReasonCSRInvalid, ReasonTTL:
		return codes.InvalidArgument
	case ReasonCSRIdentity, ReasonImpersonation:
		return codes.PermissionDenied
	case ReasonInternal:
		return codes.Internal
	}
	return codes.Unauthenticated
}

// GRPCStatus lets status.FromError and status.Code see the rejection; its
// ErrorInfo detail tells the agent whether retrying can help and what to fix.
func (e *Error) GRPCStatus() *status.Status {
	fix, permanent := e.Reason.fix()
	r := &refusal.Refusal{Code: e.Code(), Reason: string(e.Reason), Message: e.Error(), Fix: fix, Permanent: permanent}
	return r.Status()
}

// fix is what an operator does about a rejection, and whether the same
// request can never succeed without that (the agent then stops retrying).
// A token that is not valid yet may be a clock a little behind, and a
// certificate the CA no longer accepts is replaced through the bootstrap
// token, so both are retried.
func (r Reason) fix() (string, bool) {
	newBundle := func(flags string) string {
		return "mint a new bundle on the control plane (vmesh vm bundle" + flags + ") and copy it to the VM"
	}
	switch r {
	case ReasonNoCredentials, ReasonTokenMalformed:
		return "the bundle's token is missing or damaged: " + newBundle(""), true
	case ReasonTokenSignature:
		return "the token was signed by another CA than this control plane's: " + newBundle(""), true
	case ReasonTokenExpired:
		return "the bootstrap token expired: " + newBundle(", --token-ttl sets its lifetime"), true
	case ReasonTokenAudience, ReasonTokenClaims:
		return "the token was minted for another trust domain or audience than this CA's: " + newBundle(" without --trust-domain"), true
	case ReasonTokenRevoked, ReasonCertRevoked:
		return "the identity was revoked: once it may join again, " + newBundle(""), true
	case ReasonCSRIdentity, ReasonImpersonation, ReasonCSRInvalid:
		return "the agent asked for an identity or certificate its credentials do not allow: check the bundle's namespace and service account", true
	case ReasonTTL:
		return "lower the agent's --cert-ttl to at most the CA's maxCertTTL", true
	}
	return "", false
}

// ReasonOf returns the Reason of a rejection, or ReasonInternal for any
// other error.
func ReasonOf(err error) Reason {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Reason
	}
	return ReasonInternal
}
