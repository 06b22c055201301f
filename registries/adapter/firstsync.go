package adapter

import "log/slog"

// FirstSync holds a registry's first set back until it is complete, so the
// Store never sees a half-read registry: every watch begun before the first
// set was sent has reported once and, for a registry with a catalogue to
// list (Consul), the catalogue was listed; or the initial sync timed out.
// Later sets are published at once. The zero value is ready; it is guarded
// by its adapter's lock.
type FirstSync struct {
	pending map[string]bool // watches that have not reported yet
	sent    bool
}

// Begin marks a watch whose first report the first set waits for; after
// the first set, it does nothing.
func (f *FirstSync) Begin(watch string) {
	if f.sent {
		return
	}
	if f.pending == nil {
		f.pending = map[string]bool{}
	}
	f.pending[watch] = true
}

// Done marks a watch as reported.
func (f *FirstSync) Done(watch string) { delete(f.pending, watch) }

// Ready reports whether a set may be published now: any set after the
// first; the first once listed and every watch begun reported, or, when
// timedOut, once listed, with a warning naming how many watches are still
// pending. A true answer marks the first set sent.
func (f *FirstSync) Ready(listed, timedOut bool, log *slog.Logger) bool {
	if !f.sent && (!listed || len(f.pending) > 0) {
		if !timedOut || !listed {
			return false
		}
		log.Warn("initial sync incomplete; publishing what was read", "pending", len(f.pending))
	}
	f.sent = true
	clear(f.pending)
	return true
}
