package filestore

import (
	"bytes"
	"log/slog"
	"strings"
	"time"
)

// gitProgressEvery is how often a long phase of a first clone (receiving
// objects, resolving deltas) is logged while it runs; each phase's end is
// logged too.
const gitProgressEvery = 5 * time.Second

// progressWriter is git's stderr during a fetch run with --progress: the
// progress lines (separated by carriage returns) go to the log, a phase's
// last line always and the others at most every gitProgressEvery; every
// other line goes to rest, for the error message.
type progressWriter struct {
	log     *slog.Logger
	rest    *headWriter
	partial []byte
	phase   string
	logged  time.Time
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexAny(w.partial, "\r\n")
		if i < 0 {
			break
		}
		w.line(string(w.partial[:i]), w.partial[i] == '\n')
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

// line handles one line; ended says a newline ended it, which git writes
// after a phase's last progress line.
func (w *progressWriter) line(s string, ended bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return
	}
	phase, detail, ok := strings.Cut(strings.TrimPrefix(s, "remote: "), ": ")
	if !ok || !(strings.Contains(detail, "%") || strings.Contains(detail, "done")) {
		_, _ = w.rest.Write([]byte(s + "\n"))
		return
	}
	now := time.Now()
	last := ended || strings.Contains(detail, "done")
	if phase != w.phase || last || now.Sub(w.logged) >= gitProgressEvery {
		w.log.Info("git fetch progress", "phase", phase, "progress", detail)
		w.phase, w.logged = phase, now
	}
}

// String is the stderr text that was not progress.
func (w *progressWriter) String() string { return w.rest.String() }
