package console

import (
	"fmt"
	"net/http"
	"time"
)

// heartbeat keeps an idle event stream from looking dead to proxies in
// between; it is a comment line the browser ignores.
const heartbeat = 25 * time.Second

// events serves /ui/events: a server-sent-events stream with one "tick"
// event carrying the change counter, first at once (a page rendered before
// the stream opened compares it with its own), then on every change.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ticks, cancel := c.hub.subscribe()
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	send := func() bool {
		_, err := fmt.Fprintf(w, "event: tick\ndata: %d\n\n", c.hub.version.Load())
		flusher.Flush()
		return err == nil
	}
	if !send() {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.hub.done:
			return
		case <-ticks:
			if !send() {
				return
			}
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}
