// Command testsummary reads `go test -json` on stdin and prints what a
// person needs from it: each package's result line, the whole output of
// every failed test, the name and reason of every skipped one, and at the
// end one line "N passed, N failed, N skipped". It exits 1 when a test or a
// package failed (a build error included), and under CI=true when anything
// was skipped too: CI never passes by skipping.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() {
	s := newSummary()
	if err := s.read(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	ci := os.Getenv("CI") == "true"
	fmt.Fprintln(os.Stdout, s.report(ci))
	if !s.ok(ci) {
		os.Exit(1)
	}
}

// summary accumulates the events of one `go test -json` run.
type summary struct {
	passed, failed, skipped int
	failedPackages          int
	// output keeps each running test's (and package's) lines until its
	// result says whether to show them.
	output  map[string][]string
	skips   []string
	nonJSON []string
}

func newSummary() *summary { return &summary{output: map[string][]string{}} }

func key(e event) string { return e.Package + "\x00" + e.Test }

// read consumes the stream, printing package results and failures to out
// as they arrive.
func (s *summary) read(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// go test prints build errors and the like as plain text.
			fmt.Fprintln(out, string(line))
			s.nonJSON = append(s.nonJSON, string(line))
			continue
		}
		s.add(e, out)
	}
	return sc.Err()
}

func (s *summary) add(e event, out io.Writer) {
	k := key(e)
	switch e.Action {
	case "output":
		s.output[k] = append(s.output[k], e.Output)
		return
	case "build-output": // compiler errors: no test owns them
		io.WriteString(out, e.Output)
		return
	case "pass", "fail", "skip":
	case "build-fail":
		s.failedPackages++
		return
	default:
		return
	}
	lines := s.output[k]
	delete(s.output, k)
	if e.Test == "" { // a package's result
		switch e.Action {
		case "fail":
			s.failedPackages++
			// A package that failed outside any test (a build error, a
			// panic in init, a timeout) says why in its own output.
			io.WriteString(out, strings.Join(lines, ""))
		default:
			for _, l := range lines { // "ok  pkg 1.2s", "?  pkg [no test files]"
				if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "?") {
					io.WriteString(out, l)
				}
			}
		}
		return
	}
	switch e.Action {
	case "pass":
		s.passed++
	case "fail":
		s.failed++
		fmt.Fprintf(out, "--- FAIL: %s %s (%.2fs)\n", e.Package, e.Test, e.Elapsed)
		io.WriteString(out, strings.Join(lines, ""))
	case "skip":
		s.skipped++
		s.skips = append(s.skips, fmt.Sprintf("  %s %s: %s", e.Package, e.Test, skipReason(lines)))
	}
}

// skipReason is the message t.Skip printed (its last non-empty output
// line other than the "--- SKIP" header), trimmed.
func skipReason(lines []string) string {
	reason := ""
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		reason = t
	}
	return reason
}

func (s *summary) ok(ci bool) bool {
	return s.failed == 0 && s.failedPackages == 0 && !(ci && s.skipped > 0)
}

// report is the closing block: the skipped tests, then the summary line.
func (s *summary) report(ci bool) string {
	var b strings.Builder
	if len(s.skips) > 0 {
		fmt.Fprintf(&b, "skipped:\n%s\n", strings.Join(s.skips, "\n"))
		if ci {
			b.WriteString("CI=true: a skip fails the run (a test dependency is missing)\n")
		}
	}
	if s.failedPackages > 0 {
		fmt.Fprintf(&b, "%d package(s) failed\n", s.failedPackages)
	}
	fmt.Fprintf(&b, "%d passed, %d failed, %d skipped", s.passed, s.failed, s.skipped)
	return b.String()
}
