package filestore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/vmesh/vmesh/store"
	"io"
	"io/fs"
	"os"
	"slices"
	"syscall"
	"time"
)

// Limits bound what one config file (or git blob) may cost to read, decode
// and report. The zero value of a field means its default.
type Limits struct {
	// MaxFileBytes is the largest file read; a larger one is refused
	// before it is read. Default 4 MiB.
	MaxFileBytes int64
	// MaxDocuments is the most YAML documents one file may hold; a file
	// with more is refused whole. Default 5,000.
	MaxDocuments int
	// MaxProblems is how many problems are kept, reported and logged per
	// file; the rest are counted ("and 28,427 more problems"). Default 20.
	MaxProblems int
	// ReadTimeout bounds reading one file from disk; default 10s.
	ReadTimeout time.Duration
}

// The default Limits: generous for hand-written and generated config (a
// 10,000-object repository's files are a few KiB each), small enough that
// a link to /dev/zero or a runaway generator costs megabytes, not gigabytes.
const (
	DefaultMaxFileBytes = 4 << 20
	DefaultMaxDocuments = 5000
	DefaultMaxProblems  = 20
	DefaultReadTimeout  = 10 * time.Second
)

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{MaxFileBytes: DefaultMaxFileBytes, MaxDocuments: DefaultMaxDocuments, MaxProblems: DefaultMaxProblems, ReadTimeout: DefaultReadTimeout}
}

// withDefaults fills the zero fields with their defaults.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxFileBytes == 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxDocuments == 0 {
		l.MaxDocuments = d.MaxDocuments
	}
	if l.MaxProblems == 0 {
		l.MaxProblems = d.MaxProblems
	}
	if l.ReadTimeout == 0 {
		l.ReadTimeout = d.ReadTimeout
	}
	return l
}

// Validate reports a limit that cannot work.
func (l Limits) Validate() error {
	switch {
	case l.MaxFileBytes < 0:
		return fmt.Errorf("maxFileBytes %d must be > 0", l.MaxFileBytes)
	case l.MaxDocuments < 0:
		return fmt.Errorf("maxDocuments %d must be > 0", l.MaxDocuments)
	case l.MaxProblems < 0:
		return fmt.Errorf("maxProblems %d must be > 0", l.MaxProblems)
	case l.ReadTimeout < 0:
		return fmt.Errorf("read timeout %s must be > 0", l.ReadTimeout)
	}
	return nil
}

// quote renders a value for a message like %q, bounded (store.Quote).
func quote(s string) string { return store.Quote(s) }

// clip cuts s to at most n bytes, saying so (store.Clip).
func clip(s string, n int) string { return store.Clip(s, n) }

// formatCount writes n with thousands separators (store.FormatCount).
func formatCount(n int) string { return store.FormatCount(n) }

// Bounds on a reported problem's texts (store's).
const (
	maxQuoted = store.MaxQuoted
	maxField  = store.MaxField
)

// problems collects one file's problems: the first max are kept, the rest
// only counted, so a file that expands to a million errors costs max.
type problems struct {
	file string
	max  int
	list []store.ConfigError
	more int
	// final are problems kept whatever the count (a limit that stopped
	// decoding): they say why the file is not loaded.
	final []store.ConfigError
	// warns are the file's warnings, bounded the same way.
	warns     []store.ConfigError
	moreWarns int
}

// warn records a warning: the first max are kept, the rest counted.
func (p *problems) warn(e store.ConfigError) {
	if len(p.warns) < p.max {
		p.warns = append(p.warns, e.Bounded())
		return
	}
	p.moreWarns++
}

// warnings returns the kept warnings and a line counting the rest.
func (p *problems) warnings() []store.ConfigError {
	if p.moreWarns == 0 {
		return p.warns
	}
	return append(p.warns, store.ConfigError{File: p.file, Severity: store.SeverityWarning, Message: fmt.Sprintf("and %s more warnings in this file (the first %d are kept: maxProblems)", formatCount(p.moreWarns), p.max)})
}

func (p *problems) add(e store.ConfigError) {
	if len(p.list) < p.max {
		p.list = append(p.list, e.Bounded())
		return
	}
	p.more++
}

// stop records why decoding stopped; it is always reported.
func (p *problems) stop(e store.ConfigError) { p.final = append(p.final, e.Bounded()) }

func (p *problems) total() int { return len(p.list) + p.more + len(p.final) }

// errors returns the kept problems, a line counting the rest, and the
// final ones.
func (p *problems) errors() []store.ConfigError {
	if p.total() == 0 {
		return nil
	}
	// By line, as an editor lists them: a document's validation runs after
	// its decoding, so they are found out of order.
	out := slices.Clone(p.list)
	slices.SortStableFunc(out, func(a, b store.ConfigError) int { return cmp.Compare(a.Line, b.Line) })
	if p.more > 0 {
		out = append(out, moreProblems(p.file, p.more, p.max))
	}
	return append(out, p.final...)
}

func moreProblems(file string, n, kept int) store.ConfigError {
	return store.ConfigError{File: file, Message: fmt.Sprintf("and %s more problems in this file (the first %d are kept: maxProblems)", formatCount(n), kept)}
}

// capProblems keeps at most max of one file's problems, counting the rest.
func capProblems(file string, errs []store.ConfigError, max int) []store.ConfigError {
	if len(errs) <= max {
		return errs
	}
	return append(errs[:max:max], moreProblems(file, len(errs)-max, max))
}

// errTooLarge and errNotRegular say why a file was not read.
var (
	errTooLarge   = errors.New("file too large")
	errNotRegular = errors.New("not a regular file")
)

// tooLarge says a file is over limit; size is its size, or limit+1 when
// only that much was read.
func tooLarge(size, limit int64) error {
	if size == limit+1 {
		return fmt.Errorf("%w: more than maxFileBytes (%s bytes); not read", errTooLarge, formatCount(int(limit)))
	}
	return fmt.Errorf("%w: %s bytes, more than maxFileBytes (%s); not read", errTooLarge, formatCount(int(size)), formatCount(int(limit)))
}

func notRegular(mode fs.FileMode) error {
	return fmt.Errorf("%w (%s); only regular files, or links to them, are read", errNotRegular, fileType(mode))
}

func fileType(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a block device"
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return mode.Type().String()
}

// readRegular reads a regular file of at most limit bytes, following
// links. It opens without blocking (opening a FIFO with no writer would
// block), refuses anything that is not a regular file once open, and a
// file larger than limit before reading it; a file that grows past limit
// while read is refused after limit+1 bytes.
func readRegular(path string, limit int64) ([]byte, error) {
	// Stat first so a device is never even opened (opening one can have
	// effects); fstat after opening closes the race with a swap.
	if info, err := os.Stat(path); err != nil {
		return nil, err
	} else if !info.Mode().IsRegular() {
		return nil, notRegular(info.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, notRegular(info.Mode())
	}
	if info.Size() > limit {
		return nil, tooLarge(info.Size(), limit)
	}
	buf := make([]byte, info.Size()+1) // one more byte sees a file that grew
	n, err := io.ReadFull(f, buf)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return buf[:n], nil
	case err != nil:
		return nil, err
	}
	rest, err := io.ReadAll(io.LimitReader(f, limit+1-int64(n)))
	if err != nil {
		return nil, err
	}
	buf = append(buf, rest...)
	if int64(len(buf)) > limit {
		return nil, tooLarge(int64(len(buf)), limit)
	}
	return buf, nil
}

// readWithin reads a file with readRegular, giving up after timeout or
// when ctx ends: a file on a stuck network mount never holds the source
// or its shutdown. The abandoned read finishes (or not) on its own and
// costs at most limit bytes.
func readWithin(ctx context.Context, path string, limit int64, timeout time.Duration) ([]byte, error) {
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := readRegular(path, limit)
		done <- result{data, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.data, r.err
	case <-timer.C:
		return nil, fmt.Errorf("read did not finish within %s", timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
