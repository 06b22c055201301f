package console

import (
	"fmt"
	"net/http"
	"time"
)

const (
	// heartbeat keeps an idle event stream from looking dead to proxies in
	// between; it is a comment line the browser ignores.
	heartbeat = 25 * time.Second
	// DefaultMaxEventStreams is how many /ui/events streams are open at
	// once unless WithEventStreams says otherwise; more get 503.
	DefaultMaxEventStreams = 32
	// DefaultEventStreamLifetime is how long one stream lasts unless
	// WithEventStreams says otherwise: it then ends and the browser's
	// EventSource opens a new one.
	DefaultEventStreamLifetime = 10 * time.Minute
	// eventWriteTimeout bounds each write to a stream: a browser that stops
	// reading loses its stream, not a goroutine and a connection for good.
	eventWriteTimeout = 10 * time.Second
	// reconnectAfter is the EventSource reconnection delay the stream
	// announces (the "retry:" field), in milliseconds.
	reconnectAfter = 1000
)

// events serves /ui/events: a server-sent-events stream with one "tick"
// event carrying the change counter, first at once (a page rendered before
// the stream opened compares it with its own), then on every change. At
// most maxStreams are open at once (more get 503 with Retry-After), and
// each ends after streamLifetime: the browser reconnects at once.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	select {
	case c.streams <- struct{}{}:
		defer func() { <-c.streams }()
	default:
		if c.streamRefused != nil {
			c.streamRefused()
		}
		w.Header().Set("Retry-After", "30")
		http.Error(w, fmt.Sprintf("too many live-update streams open (%d): the page stays as it is; reload it later", cap(c.streams)), http.StatusServiceUnavailable)
		return
	}
	ticks, cancel := c.hub.subscribe()
	defer cancel()
	// The server's read and write timeouts are for ordinary requests: a
	// stream lives up to its lifetime, and each write has its own deadline.
	rc := http.NewResponseController(w)
	end := time.NewTimer(c.streamLifetime)
	defer end.Stop()
	_ = rc.SetReadDeadline(time.Now().Add(c.streamLifetime + time.Minute))
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		_, err := fmt.Fprintf(w, format, args...)
		flusher.Flush()
		return err == nil
	}
	if !write("retry: %d\nevent: tick\ndata: %d\n\n", reconnectAfter, c.hub.version.Load()) {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.hub.done:
			return
		case <-end.C:
			return
		case <-ticks:
			if !write("event: tick\ndata: %d\n\n", c.hub.version.Load()) {
				return
			}
		case <-beat.C:
			if !write(": heartbeat\n\n") {
				return
			}
		}
	}
}
