// Package refusal is the contract between the control plane and the agent
// for requests the control plane refuses: a gRPC status carrying an
// ErrorInfo detail (domain vmesh.io) with the reason, whether retrying can
// help, and the fix an operator should make. The agent exits on a permanent
// refusal instead of retrying forever.
package refusal

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of vmesh's refusals.
const Domain = "vmesh.io"

// Metadata keys of the ErrorInfo detail.
const (
	keyPermanent = "permanent"
	keyFix       = "fix"
)

// Refusal is a refused request as both sides see it.
type Refusal struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is a short snake_case name, e.g. "token_revoked".
	Reason string
	// Message is the status message: what exactly was wrong.
	Message string
	// Fix tells the operator what to change; empty when there is nothing
	// more to say than Message.
	Fix string
	// Permanent is set when the same request can never succeed: retrying
	// is pointless until an operator acts.
	Permanent bool
}

// Status renders r as a gRPC status with its ErrorInfo detail.
func (r *Refusal) Status() *status.Status {
	st := status.New(r.Code, r.Message)
	info := &errdetails.ErrorInfo{Reason: r.Reason, Domain: Domain, Metadata: map[string]string{}}
	if r.Permanent {
		info.Metadata[keyPermanent] = "true"
	}
	if r.Fix != "" {
		info.Metadata[keyFix] = r.Fix
	}
	if withInfo, err := st.WithDetails(info); err == nil {
		return withInfo
	}
	return st
}

// Err is Status().Err(), the error a gRPC handler returns.
func (r *Refusal) Err() error { return r.Status().Err() }

// Error renders "<reason>: <message> (fix: <fix>)", the reason once when
// the message starts with it already.
func (r *Refusal) Error() string {
	s := r.Message
	if !strings.HasPrefix(s, r.Reason+":") {
		s = r.Reason + ": " + s
	}
	if r.Fix != "" {
		s += " (fix: " + r.Fix + ")"
	}
	return s
}

// GRPCStatus lets a *Refusal be returned as a gRPC error directly.
func (r *Refusal) GRPCStatus() *status.Status { return r.Status() }

// Of finds a vmesh refusal in err: a *Refusal in its chain, or a gRPC
// status carrying vmesh's ErrorInfo (what the agent receives).
func Of(err error) (*Refusal, bool) {
	if err == nil {
		return nil, false
	}
	if r, ok := errors.AsType[*Refusal](err); ok {
		return r, true
	}
	// The status itself, not status.FromError's copy whose message is the
	// whole wrapped chain.
	se, ok := errors.AsType[interface {
		error
		GRPCStatus() *status.Status
	}](err)
	if !ok {
		return nil, false
	}
	st := se.GRPCStatus()
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != Domain {
			continue
		}
		return &Refusal{
			Code: st.Code(), Reason: info.GetReason(), Message: st.Message(),
			Fix: info.GetMetadata()[keyFix], Permanent: info.GetMetadata()[keyPermanent] == "true",
		}, true
	}
	return nil, false
}

// PermanentError is what a part of the agent returns when the control plane
// refused it for good; the agent exits with ExitPermanent.
type PermanentError struct {
	// Part names what was refused, e.g. "certificate request".
	Part    string
	Refusal *Refusal
}

// Error renders "<part> refused for good: <refusal>".
func (e *PermanentError) Error() string {
	return fmt.Sprintf("%s refused for good: %s", e.Part, e.Refusal.Error())
}

// Permanent returns a *PermanentError for err when err is a permanent
// refusal, and nil otherwise.
func Permanent(part string, err error) error {
	if r, ok := Of(err); ok && r.Permanent {
		return &PermanentError{Part: part, Refusal: r}
	}
	return nil
}

// ExitPermanent is the agent's exit status on a permanent refusal (EX_CONFIG
// of sysexits.h): vmesh-agent.service does not restart on it
// (RestartPreventExitStatus). Any other failure exits 1 and is restarted.
const ExitPermanent = 78
