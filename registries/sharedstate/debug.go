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
	// Unreadable lists the shared records this replica cannot read and
	// skips: registrations by backend key, then revocations.
	Unreadable []UnreadableRecord `json:"unreadable,omitempty"`
}

// UnreadableRecord is a shared record this replica skips because it
// cannot read it (written by hand, or by a replica of another version).
type UnreadableRecord struct {
	Kind string `json:"kind"` // UnreadableRegistration or UnreadableRevocation
	// Key is a registration's backend key.
	Key   string `json:"key,omitempty"`
	Error string `json:"error"`
}

// Status reads the replicas the shared state knows.
func (s *State) Status(ctx context.Context) Status {
	st := Status{Self: s.cfg.ID, Backend: s.cfg.Spec.String(), Replicas: []Replica{}}
	s.mu.Lock()
	st.Shared, st.Written = len(s.remote), len(s.written)
	if s.health != nil {
		st.Error = s.health.Error()
	}
	for _, k := range slices.Sorted(maps.Keys(s.unreadableEntries)) {
		st.Unreadable = append(st.Unreadable, UnreadableRecord{Kind: UnreadableRegistration, Key: k, Error: s.unreadableEntries[k]})
	}
	for _, e := range s.unreadableRevocations {
		st.Unreadable = append(st.Unreadable, UnreadableRecord{Kind: UnreadableRevocation, Error: e})
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
