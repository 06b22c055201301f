package sharedstate

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"time"
)

// Status is what /debug/replicas answers.
type Status struct {
	// Self is this replica's ID; Backend names the store ("consul=ADDR").
	Self    string `json:"self"`
	Backend string `json:"backend"`
	// Replicas are the replicas whose session is alive, this one included
	// once its first heartbeat is written.
	Replicas []Replica `json:"replicas"`
	// Shared counts the other replicas' registrations served here, and
	// Written this replica's own written to the backend.
	Shared  int `json:"shared"`
	Written int `json:"written"`
	// Error is the backend's last write error, or the listing's.
	Error string `json:"error,omitempty"`
	// Unreadable lists the shared records this replica refuses and skips
	// now (unreadable, unsigned or forged, not bound to a live replica,
	// invalid, future-dated): registrations, then revocations, then
	// replica records, each by backend key.
	Unreadable []UnreadableRecord `json:"unreadable,omitempty"`
	// RefusedTotal counts the records refused since this replica started,
	// by kind.
	RefusedTotal map[string]uint64 `json:"refusedTotal,omitempty"`
}

// UnreadableRecord is a shared record this replica refuses and skips: it
// cannot read it (written by hand, or by a replica of another version), or
// it is not authentic, bound, valid or current. Its value is never shown.
type UnreadableRecord struct {
	Kind string `json:"kind"` // UnreadableRegistration, UnreadableRevocation or UnreadableReplica
	// Key is the record's backend key.
	Key string `json:"key,omitempty"`
	// Reason is one of the Reason* codes (unsigned, bad-signature, …).
	Reason string `json:"reason"`
	Error  string `json:"error"`
}

// Status reads the replicas the shared state knows.
func (s *State) Status(ctx context.Context) Status {
	st := Status{Self: s.cfg.ID, Backend: s.cfg.Spec.String(), Replicas: []Replica{}}
	s.mu.Lock()
	st.Shared, st.Written = len(s.remote), len(s.written)
	if s.health != nil {
		st.Error = s.health.Error()
	}
	for _, kind := range []struct {
		kind string
		m    map[string]*refusal
	}{{UnreadableRegistration, s.refusedEntries}, {UnreadableRevocation, s.refusedRevocations}, {UnreadableReplica, s.refusedReplicas}} {
		for _, k := range slices.Sorted(maps.Keys(kind.m)) {
			r := kind.m[k]
			st.Unreadable = append(st.Unreadable, UnreadableRecord{Kind: kind.kind, Key: k, Reason: r.reason, Error: r.msg})
		}
	}
	if len(s.refusedTotal) > 0 {
		st.RefusedTotal = maps.Clone(s.refusedTotal)
	}
	s.mu.Unlock()
	rs, err := s.Replicas(ctx)
	if err != nil {
		st.Error = err.Error()
	} else {
		st.Replicas = rs
	}
	return st
}

// Handler serves Status as JSON: /debug/replicas.
func (s *State) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		st := s.Status(ctx)
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})
}
