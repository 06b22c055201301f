package store

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Severity grades a Problem or ConfigError. Errors reject the object (a
// file keeps its last good version, a git commit is not applied);
// warnings and infos are reported beside the config, which applies.
type Severity int8

const (
	// SeverityError rejects the object; the zero value.
	SeverityError Severity = iota
	// SeverityWarning is config vmesh accepts but does not (fully)
	// enforce, or that references something that does not exist.
	SeverityWarning
	// SeverityInfo is a finding that depends on config the check could not
	// see: a host no file defines, checked without the registries that may
	// define it (vmesh validate and analyze on files).
	SeverityInfo
)

// String names the severity: error, warning or info.
func (s Severity) String() string {
	switch s {
	case SeverityWarning:
		return "warning"
	case SeverityInfo:
		return "info"
	}
	return "error"
}

// MarshalText writes the severity's name (JSON: "warning").
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a severity's name.
func (s *Severity) UnmarshalText(b []byte) error {
	switch string(b) {
	case "error", "":
		*s = SeverityError
	case "warning":
		*s = SeverityWarning
	case "info":
		*s = SeverityInfo
	default:
		return fmt.Errorf("unknown severity %q", b)
	}
	return nil
}

// ConfigError is one problem found in a source, located by file, line and
// field: an error (the zero Severity), or a warning with its stable Code.
type ConfigError struct {
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Object  string `json:"object,omitempty"` // kind/namespace/name, when known
	Field   string `json:"field,omitempty"`  // e.g. http[1].route[0].weight
	Commit  string `json:"commit,omitempty"`
	Message string `json:"message"`
	// Severity is omitted for errors; Code names a warning (VM1001,
	// IST0101: see WarningCodes).
	Severity Severity `json:"severity,omitempty"`
	Code     string   `json:"code,omitempty"`
	// Source is the source of the object a cross-object warning is about
	// (the analysis); a source's own problems leave it empty.
	Source string `json:"source,omitempty"`
}

// Error renders the problem as "file:line: kind/ns/name: field: message";
// for a git commit the file is written git-style as "<sha>:file". A
// warning's message starts with "warning CODE: ".
func (e ConfigError) Error() string {
	s := ""
	switch {
	case e.File != "" && e.Commit != "":
		s = fmt.Sprintf("%.12s:%s", e.Commit, e.File)
	case e.File != "":
		s = e.File
	case e.Commit != "":
		s = fmt.Sprintf("commit %.12s", e.Commit)
	}
	if e.File != "" && e.Line > 0 {
		s += fmt.Sprintf(":%d", e.Line)
	}
	if s != "" {
		s += ": "
	}
	if e.Object != "" {
		s += e.Object + ": "
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	if e.Severity != SeverityError {
		s += e.Severity.String()
		if e.Code != "" {
			s += " " + e.Code
		}
		s += ": "
	}
	return s + e.Message
}

// Bounds on the text of one reported problem: a 50 MB host name is quoted
// by its first bytes and its length, never whole.
const (
	MaxQuoted  = 100  // bytes of a value quoted in a message
	MaxMessage = 1024 // bytes of a message
	MaxField   = 256  // bytes of a field path or object name
)

// Quote renders a value for a message like %q, cut to its first MaxQuoted
// bytes and its length when it is longer.
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(cut(s, MaxQuoted)+"…") + " (" + FormatCount(len(s)) + " bytes)"
}

// Clip cuts s to at most n bytes (on a character boundary), saying so.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cut(s, n) + "… (" + FormatCount(len(s)) + " bytes)"
}

// cut returns the longest prefix of s of at most n bytes that does not
// split a UTF-8 character.
func cut(s string, n int) string {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// FormatCount writes n with thousands separators: 28,427.
func FormatCount(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + FormatCount(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Bounded returns the problem with its texts clipped.
func (e ConfigError) Bounded() ConfigError {
	e.Message = Clip(e.Message, MaxMessage)
	e.Field = Clip(e.Field, MaxField)
	e.Object = Clip(e.Object, MaxField)
	return e
}
