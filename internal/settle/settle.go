// Package settle groups a burst of file-system events into one apply.
//
// A file written in place arrives as several events (create or truncate,
// one write per chunk, a chmod); a tree checked out or synced arrives as
// many. Reading at the first event would apply a half-written file, while a
// fixed debounce (Istio's file watcher waits 100 ms) makes every change wait
// that long. A Window instead applies once the events have stopped for a
// short Quiet (a few milliseconds: the gap between the writes of one
// writer), and at most Max after the burst's first event, so a change is
// read whole and at once, and a tree under constant churn is still read.
//
// Both file watchers of vmesh use it: the configuration directory
// (filestore.DirSource) and the static registry's file. Pushing to proxies
// has its own batching, once, in model.Feed.
package settle

import "time"

// Defaults for file sources: 10 ms of quiet settles the events of one
// write; a burst is read at most 1 s after its first event.
const (
	DefaultQuiet = 10 * time.Millisecond
	DefaultMax   = time.Second
)

// Window is one burst's timer. The zero value is not usable; use New. A
// Window is used by one goroutine (the watcher's loop).
type Window struct {
	quiet, max time.Duration
	timer      *time.Timer
	armed      bool
	start      time.Time
}

// New returns a Window that fires quiet after a burst's last event, at most
// max after its first; zero durations take the defaults, and max is never
// shorter than quiet.
func New(quiet, max time.Duration) *Window {
	if quiet <= 0 {
		quiet = DefaultQuiet
	}
	if max <= 0 {
		max = DefaultMax
	}
	if max < quiet {
		max = quiet
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &Window{quiet: quiet, max: max, timer: t}
}

// Event records an event at now: it starts a burst, or extends the current
// one by the quiet period without passing the burst's bound.
func (w *Window) Event(now time.Time) {
	if !w.armed {
		w.armed, w.start = true, now
	}
	wait := w.quiet
	if rest := w.max - now.Sub(w.start); rest < wait {
		wait = max(rest, 0)
	}
	w.timer.Reset(wait)
}

// C fires when the current burst has settled. After receiving from it, the
// caller applies the burst and calls Done.
func (w *Window) C() <-chan time.Time { return w.timer.C }

// Done ends the burst whose timer fired: the next event starts a new one.
func (w *Window) Done() { w.armed = false }

// Pending reports whether a burst has started and not yet been applied.
func (w *Window) Pending() bool { return w.armed }

// Stop releases the timer.
func (w *Window) Stop() { w.timer.Stop() }
