package filestore

import (
	"bytes"
	"github.com/vmesh/vmesh/store"
	"regexp"
	"strconv"
	"strings"
)

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns a YAML syntax error into a problem on the line of the
// offending token. yaml.v3 reports a mis-indented key at the start of the
// block that encloses it ("line 5: did not find expected key" for a key on
// line 8) and a tab in the indentation as "found character that cannot
// start any token", sometimes a line early; data is read again to name the
// line, and a tab is called a tab.
func yamlError(file string, data []byte, err error) store.ConfigError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	lines := bytes.Split(data, []byte("\n"))
	if strings.Contains(msg, "tab character") || strings.Contains(msg, "cannot start any token") {
		if l := tabIndented(lines, max(line-1, 1)); l > 0 {
			return store.ConfigError{File: file, Line: l, Message: "invalid YAML: tab character in indentation; YAML allows only spaces"}
		}
	}
	if strings.Contains(msg, "did not find expected key") || strings.Contains(msg, "did not find expected '-' indicator") ||
		strings.Contains(msg, "mapping values are not allowed") {
		if l := misindented(lines, max(line, 1)); l >= line && l > 0 {
			return store.ConfigError{File: file, Line: l, Message: "invalid YAML: the indentation of this line matches no enclosing block (" + msg + ")"}
		}
	}
	return store.ConfigError{File: file, Line: line, Message: "invalid YAML: " + msg}
}

// tabIndented returns the first line, from line from on (1-based), whose
// indentation holds a tab; 0 when none does.
func tabIndented(lines [][]byte, from int) int {
	for i := from - 1; i < len(lines); i++ {
		l := lines[i]
		ws := l[:len(l)-len(bytes.TrimLeft(l, " \t"))]
		if bytes.IndexByte(ws, '\t') >= 0 {
			return i + 1
		}
	}
	return 0
}

// misindented reads block YAML from line from (1-based, the start of the
// block yaml.v3 names) and returns the first line whose indentation is
// not that of an enclosing mapping or sequence, or deeper than a line that
// opens none; 0 when it finds none (flow style, a scalar over several
// lines: it then gives up rather than guess).
func misindented(lines [][]byte, from int) int {
	type block struct {
		indent int
		seq    bool // a sequence's dash column: only "- " items may sit here
		// seqOK: a mapping's key column where "- " items may sit too,
		// after a key that opens a block ("hosts:\n- a").
		seqOK bool
	}
	var stack []block
	opens := false
	for i := from - 1; i < len(lines); i++ {
		raw := strings.TrimRight(string(lines[i]), "\r")
		text := strings.TrimLeft(raw, " ")
		if text == "" || text[0] == '#' {
			continue
		}
		if strings.HasPrefix(text, "---") && len(stack) == 0 {
			continue // the start of the document yaml.v3 names
		}
		if strings.HasPrefix(text, "---") || strings.HasPrefix(text, "...") || strings.ContainsAny(text[:1], "\t[{\"'") {
			return 0
		}
		n := len(raw) - len(text)
		item := text == "-" || strings.HasPrefix(text, "- ")
		switch {
		case len(stack) == 0:
			stack = append(stack, block{indent: n, seq: item})
		case n > stack[len(stack)-1].indent:
			if !opens {
				return i + 1
			}
			stack = append(stack, block{indent: n, seq: item})
		default:
			for len(stack) > 0 && stack[len(stack)-1].indent > n {
				stack = stack[:len(stack)-1]
			}
			if len(stack) == 0 {
				return i + 1
			}
			b := stack[len(stack)-1]
			if b.indent != n || (b.seq && !item) || (item && !b.seq && !b.seqOK) {
				return i + 1
			}
		}
		own := len(stack) - 1 // the block of this line's column
		// A "- " item's content starts a block of its own at its column.
		col := n
		for text == "-" || strings.HasPrefix(text, "- ") {
			rest := strings.TrimLeft(text[1:], " ")
			col += len(text) - len(rest)
			text = rest
			if text == "" {
				break
			}
			stack = append(stack, block{indent: col, seq: strings.HasPrefix(text, "- ")})
		}
		if c := strings.Index(text, " #"); c >= 0 {
			text = strings.TrimRight(text[:c], " ")
		}
		if strings.Count(text, "[") != strings.Count(text, "]") || strings.Count(text, "{") != strings.Count(text, "}") {
			return 0 // a flow collection over several lines
		}
		opens = text == "" || strings.HasSuffix(text, ":")
		if !item {
			stack[own].seqOK = opens
		} else if last := len(stack) - 1; last > own {
			stack[last].seqOK = opens
		}
		if blockScalar(text) {
			// Skip the scalar's lines: blank, or deeper than its key.
			for i+1 < len(lines) {
				next := strings.TrimRight(string(lines[i+1]), "\r")
				t := strings.TrimLeft(next, " ")
				if t != "" && len(next)-len(t) <= n {
					break
				}
				i++
			}
			opens = false
		}
	}
	return 0
}

var blockScalarRE = regexp.MustCompile(`:\s+[|>][-+0-9]*$`)

// blockScalar reports whether a line's value starts a literal or folded
// block scalar ("key: |", "key: >-").
func blockScalar(text string) bool { return blockScalarRE.MatchString(text) }
