package filestore

import "strconv"

// HealthChecksAnnotation marks a WorkloadEntry whose health is reported by
// its agent: it is an endpoint only while known healthy (Istio's
// proxy.istio.io/health-checks-enabled).
const HealthChecksAnnotation = "proxy.istio.io/health-checks-enabled"

// HealthChecksEnabled reports whether o carries HealthChecksAnnotation with
// a true value, read as Istio reads it (strconv.ParseBool: "true", "1",
// "t", "True", …).
func HealthChecksEnabled(o *Object) bool {
	v, err := strconv.ParseBool(o.Annotations[HealthChecksAnnotation])
	return err == nil && v
}

// healthReport is what an agent last said about a WorkloadEntry: healthy
// is nil when its health is unknown (the agent went away).
type healthReport struct {
	healthy *bool
}

// SetHealth records the health the agent of a config-defined WorkloadEntry
// reports (healthy nil: unknown, which makes a health-checked entry no
// endpoint, as Istio's deleted Healthy condition does). It overrides the
// Healthy condition of the winning object of key, from whichever source,
// while that object has health checks enabled; other objects are served
// as they are. ClearHealth removes the report.
func (s *Store) SetHealth(key Key, healthy *bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.health == nil {
		s.health = map[Key]healthReport{}
	}
	if healthy != nil {
		h := *healthy
		healthy = &h
	}
	s.health[key] = healthReport{healthy: healthy}
	s.publish(map[Key]struct{}{key: {}})
}

// ClearHealth removes the health report of key: its objects' own Healthy
// condition applies again.
func (s *Store) ClearHealth(key Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.health[key]; !ok {
		return
	}
	delete(s.health, key)
	s.publish(map[Key]struct{}{key: {}})
}

// withHealth returns the object to serve for winner: a copy carrying the
// reported health when one applies. Callers hold s.mu.
func (s *Store) withHealth(winner *Object) *Object {
	r, ok := s.health[winner.Key]
	if !ok || winner.Kind != KindWorkloadEntry || !HealthChecksEnabled(winner) {
		return winner
	}
	c := *winner
	c.Healthy = r.healthy
	return &c
}
