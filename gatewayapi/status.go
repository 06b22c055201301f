package gatewayapi

import (
	"fmt"
	"strings"

	"github.com/vmesh/vmesh/store"
)

// The route condition types and reasons of the Gateway API that vmesh
// reports (there is no API server to write them to: vmesh analyze and
// /debug/config show them).
const (
	ConditionAccepted     = "Accepted"
	ConditionResolvedRefs = "ResolvedRefs"

	ReasonAccepted                   = "Accepted"
	ReasonNoMatchingParent           = "NoMatchingParent"
	ReasonNotAllowedByListeners      = "NotAllowedByListeners"
	ReasonNoMatchingListenerHostname = "NoMatchingListenerHostname"
	ReasonUnsupportedValue           = "UnsupportedValue"
	ReasonResolvedRefs               = "ResolvedRefs"
	ReasonBackendNotFound            = "BackendNotFound"
	ReasonRefNotPermitted            = "RefNotPermitted"
	ReasonInvalidKind                = "InvalidKind"
)

// Condition is one status condition of a route for a parent.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"` // "True" or "False"
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// ParentStatus is a route's status for one parentRef.
type ParentStatus struct {
	// ParentRef is "Kind/namespace/name" with ":section" or ":port" when
	// the reference names one.
	ParentRef  string      `json:"parentRef"`
	Conditions []Condition `json:"conditions"`
}

// RouteStatus is the status of one HTTPRoute or GRPCRoute, as an API
// server would hold it in status.parents.
type RouteStatus struct {
	Object  string         `json:"object"` // kind/namespace/name
	File    string         `json:"file,omitempty"`
	Line    int            `json:"line,omitempty"`
	Parents []ParentStatus `json:"parents"`
}

// String renders the status on one line per parent, as vmesh analyze
// prints it.
func (s RouteStatus) String() string {
	var b strings.Builder
	for i, p := range s.Parents {
		if i > 0 {
			b.WriteByte('\n')
		}
		loc := ""
		if s.File != "" {
			loc = fmt.Sprintf("%s:%d: ", s.File, s.Line)
		}
		fmt.Fprintf(&b, "%s%s: parent %s:", loc, s.Object, p.ParentRef)
		for _, c := range p.Conditions {
			fmt.Fprintf(&b, " %s=%s (%s", c.Type, c.Status, c.Reason)
			if c.Message != "" {
				fmt.Fprintf(&b, ": %s", c.Message)
			}
			b.WriteString(")")
		}
	}
	return b.String()
}

// routeState collects a route's status while it is converted.
type routeState struct {
	parents []ParentStatus
	refs    *Condition // the first reference that failed to resolve
}

func (c *converter) state(o *store.Object) *routeState {
	st := c.status[o.Key]
	if st == nil {
		st = &routeState{}
		c.status[o.Key] = st
	}
	return st
}

// parentStatus records a parentRef's Accepted condition.
func (c *converter) parentStatus(o *store.Object, ref, reason, msg string) {
	status := "False"
	if reason == ReasonAccepted {
		status = "True"
	}
	st := c.state(o)
	st.parents = append(st.parents, ParentStatus{ParentRef: ref, Conditions: []Condition{{Type: ConditionAccepted, Status: status, Reason: reason, Message: msg}}})
}

// refFailed records a backendRef that does not resolve (the first wins).
func (c *converter) refFailed(o *store.Object, reason, msg string) {
	st := c.state(o)
	if st.refs == nil {
		st.refs = &Condition{Type: ConditionResolvedRefs, Status: "False", Reason: reason, Message: msg}
	}
}

// routeStatus lists the routes' status, in the order of routes.
func (c *converter) routeStatus(routes []*route) []RouteStatus {
	var out []RouteStatus
	for _, r := range routes {
		st := c.state(r.obj)
		refs := Condition{Type: ConditionResolvedRefs, Status: "True", Reason: ReasonResolvedRefs}
		if st.refs != nil {
			refs = *st.refs
		}
		rs := RouteStatus{Object: r.obj.Key.String(), File: r.obj.Origin.File, Line: r.obj.Origin.Line}
		for _, p := range st.parents {
			p.Conditions = append(p.Conditions, refs)
			rs.Parents = append(rs.Parents, p)
		}
		out = append(out, rs)
	}
	return out
}

// parentRefName renders a parentRef for the status.
func parentRefName(kind, ns, name string, section *string, port *int32) string {
	s := kind + "/" + ns + "/" + name
	switch {
	case section != nil:
		s += ":" + *section
	case port != nil:
		s += fmt.Sprintf(":%d", *port)
	}
	return s
}
