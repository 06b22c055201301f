package console

import (
	"sync"
	"sync/atomic"
)

// hub fans one change counter out to every open event stream. Each stream
// has a channel of one slot: a tick it has not read yet is not repeated,
// so a slow browser never blocks the console.
type hub struct {
	version atomic.Int64 // bumped on every change the watcher sees

	mu   sync.Mutex
	subs map[chan struct{}]struct{}
	// done is closed when the console stops: open streams end, so the
	// HTTP server's shutdown does not wait for them.
	done     chan struct{}
	stopOnce sync.Once
}

func newHub() *hub { return &hub{subs: map[chan struct{}]struct{}{}, done: make(chan struct{})} }

// stop ends every open stream.
func (h *hub) stop() { h.stopOnce.Do(func() { close(h.done) }) }

// subscribe returns a channel ticked on each change, and its cancel.
func (h *hub) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// watched reports whether any stream is open.
func (h *hub) watched() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs) > 0
}

// bump counts a change and ticks every stream.
func (h *hub) bump() {
	h.version.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
