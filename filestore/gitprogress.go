package filestore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// gitProgressEvery is how often a long phase of a first clone (receiving
// objects, resolving deltas) is logged while it runs; each phase's end is
// logged too.
const gitProgressEvery = 5 * time.Second

// progressWriter is git's stderr during a fetch run with --progress: the
// progress lines (separated by carriage returns) go to the log, when log
// is set (a first clone), a phase's last line always and the others at
// most every gitProgressEvery; every other line goes to rest, for the
// error message.
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
	if w.log == nil { // a later fetch: progress only feeds the watchdog
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

// DefaultGitStallTimeout is how long a fetch may receive nothing before it
// is cut and retried, unless GitConfig.StallTimeout says otherwise.
const DefaultGitStallTimeout = 10 * time.Second

// stallError is a fetch cut because it received nothing for a while.
type stallError struct {
	remote string // without credentials
	idle   time.Duration
}

func (e *stallError) Error() string {
	return fmt.Sprintf("fetch stalled: no data from %s for %s", e.remote, e.idle.Round(time.Millisecond))
}

// isStall reports whether err is a stalled fetch: cut by the watchdog, or
// by curl's low-speed limit (an HTTP remote).
func isStall(err error) bool {
	_, ok := errors.AsType[*stallError](err)
	return ok
}

// lowSpeedConfig is git's own no-progress limit for HTTP(S) remotes:
// curl gives up once less than a byte a second arrived for stall.
func lowSpeedConfig(stall time.Duration) []string {
	secs := max(1, int((stall+time.Second-1)/time.Second))
	return []string{"http.lowSpeedLimit=1", "http.lowSpeedTime=" + strconv.Itoa(secs)}
}

// watchdog watches one git command for signs of progress: a write on its
// stderr (progress lines, which --progress makes git write at least every
// second while index-pack receives data or a phase advances) or, on
// Linux, any byte git's own process reads or writes (/proc/<pid>/io): the
// transport's data as it arrives, from the helper (git-remote-http), ssh,
// a socket or upload-pack, also inside a pkt-line that is not complete
// yet. Nothing of either for idle is a stall: the watchdog calls cut.
type watchdog struct {
	idle time.Duration
	last atomic.Int64 // UnixNano of the last sign of progress
}

func newWatchdog(idle time.Duration) *watchdog {
	w := &watchdog{idle: idle}
	w.touch()
	return w
}

func (w *watchdog) touch() { w.last.Store(time.Now().UnixNano()) }

// writer returns rest that also counts every write as progress.
func (w *watchdog) writer(rest io.Writer) io.Writer { return activityWriter{w: w, rest: rest} }

type activityWriter struct {
	w    *watchdog
	rest io.Writer
}

func (a activityWriter) Write(p []byte) (int, error) {
	a.w.touch()
	return a.rest.Write(p)
}

// watch checks pid every tick until done is closed, and calls cut once
// when nothing moved for idle.
func (w *watchdog) watch(pid int, done <-chan struct{}, cut func()) {
	tick := time.NewTicker(min(max(w.idle/20, 20*time.Millisecond), 250*time.Millisecond))
	defer tick.Stop()
	ioFile := "/proc/" + strconv.Itoa(pid) + "/io"
	var seen int64 = -1
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		if n, ok := processIO(ioFile); ok && n != seen {
			if seen >= 0 {
				w.touch()
			}
			seen = n
		}
		if time.Since(time.Unix(0, w.last.Load())) >= w.idle {
			cut()
			return
		}
	}
}

// processIO returns the bytes a process has read and written (rchar +
// wchar of /proc/<pid>/io: pipes and sockets included); false where there
// is no such file.
func processIO(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	var total int64
	found := false
	for line := range strings.Lines(string(b)) {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "rchar" && key != "wchar") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return 0, false
		}
		total += n
		found = true
	}
	return total, found
}
