package ca

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// GRPCStatus lets status.FromError and status.Code see the rejection.
func (e *Error) GRPCStatus() *status.Status {
	return status.New(e.Code(), e.Error())
}

// ReasonOf returns the Reason of a rejection, or ReasonInternal for any
// other error.
func ReasonOf(err error) Reason {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Reason
	}
	return ReasonInternal
}
