package store

import (
	"strconv"

	"github.com/vmesh/vmesh/internal/meshlabels"
)

// HealthChecksEnabled reports whether o carries
// meshlabels.HealthChecksAnnotation with a true value, read as Istio reads
// it (strconv.ParseBool: "true", "1", "t", "True", …).
func HealthChecksEnabled(o *Object) bool {
	v, err := strconv.ParseBool(o.Annotations[meshlabels.HealthChecksAnnotation])
	return err == nil && v
}

// healthReport is what an agent last said about a WorkloadEntry: healthy
// is nil when its health is unknown (the agent went away).
type healthReport struct {
	healthy *bool
	reason  string // why it is not healthy (the probe's failure), when said
}

// healthReports are the reports on config-defined WorkloadEntries: local
// ones (the agent's stream is on this replica) win over remote ones
// (another replica's, through the shared state).
type healthReports struct {
	local, remote map[Key]healthReport
}

// get returns the report that applies to key.
func (h *healthReports) get(key Key) (healthReport, bool) {
	if r, ok := h.local[key]; ok {
		return r, true
	}
	r, ok := h.remote[key]
	return r, ok
}

// setReport records (remove false) or removes a report of one tier, reporting
// whether anything changed.
func setReport(m *map[Key]healthReport, key Key, healthy *bool, reason string, remove bool) bool {
	if remove {
		if _, ok := (*m)[key]; !ok {
			return false
		}
		delete(*m, key)
		return true
	}
	if *m == nil {
		*m = map[Key]healthReport{}
	}
	if healthy != nil {
		h := *healthy
		healthy = &h
	}
	if old, ok := (*m)[key]; ok && old.reason == reason && ((old.healthy == nil && healthy == nil) || (old.healthy != nil && healthy != nil && *old.healthy == *healthy)) {
		return false
	}
	(*m)[key] = healthReport{healthy: healthy, reason: reason}
	return true
}

// SetHealth records the health the agent of a config-defined WorkloadEntry
// reports through this replica (healthy nil: unknown, which makes a
// health-checked entry no endpoint, as Istio's deleted Healthy condition
// does). It overrides the Healthy condition of the winning object of key,
// from whichever source, while that object has health checks enabled;
// other objects are served as they are. ClearHealth removes the report.
func (s *Store) SetHealth(key Key, healthy *bool) { s.setHealth(key, healthy, "", false, false) }

// SetHealthReason is SetHealth with the agent's reason (a failing probe's
// error), served as the object's HealthReason.
func (s *Store) SetHealthReason(key Key, healthy *bool, reason string) {
	s.setHealth(key, healthy, reason, false, false)
}

// ClearHealth removes this replica's health report of key: another
// replica's (SetRemoteHealth), else the objects' own Healthy condition,
// applies again.
func (s *Store) ClearHealth(key Key) { s.setHealth(key, nil, "", false, true) }

// SetRemoteHealth records a health report another replica holds (the
// shared state's); a report of this replica's own wins over it.
// ClearRemoteHealth removes it.
func (s *Store) SetRemoteHealth(key Key, healthy *bool) { s.setHealth(key, healthy, "", true, false) }

// ClearRemoteHealth removes another replica's health report of key.
func (s *Store) ClearRemoteHealth(key Key) { s.setHealth(key, nil, "", true, true) }

// LocalHealth returns this replica's health reports (SetHealth): what the
// shared state shares with the other replicas. nil values are unknown.
func (s *Store) LocalHealth() map[Key]*bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Key]*bool, len(s.health.local))
	for k, r := range s.health.local {
		out[k] = r.healthy
	}
	return out
}

func (s *Store) setHealth(key Key, healthy *bool, reason string, remote, remove bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tier := &s.health.local
	if remote {
		tier = &s.health.remote
	}
	if setReport(tier, key, healthy, reason, remove) {
		s.publish([]Key{key})
	}
}

// withHealth returns the object to serve for winner: a copy carrying the
// reported health when one applies. Callers hold s.mu.
func (s *Store) withHealth(winner *Object) *Object {
	r, ok := s.health.get(winner.Key)
	if !ok || winner.Kind != KindWorkloadEntry || !HealthChecksEnabled(winner) {
		return winner
	}
	c := *winner
	c.Healthy, c.HealthReason = r.healthy, r.reason
	return &c
}
