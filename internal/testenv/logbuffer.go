package testenv

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
)

// LogBuffer is a log sink that a component's goroutines write and a test
// reads, safe for both at once.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the JSON lines logged so far whose message is msg ("" for
// every line).
func (b *LogBuffer) Lines(msg string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l != "" && (msg == "" || strings.Contains(l, `"msg":"`+msg+`"`)) {
			out = append(out, l)
		}
	}
	return out
}

// Logger returns a JSON logger writing to b the lines of level and above.
func (b *LogBuffer) Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: level}))
}
