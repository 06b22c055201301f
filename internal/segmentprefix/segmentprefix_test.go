package segmentprefix

import (
	"regexp"
	"testing"
)

// TestRoundTrip checks that Parse reads back what Regex writes, that the
// expression matches whole segments only, and that other expressions are
// not taken for a prefix.
func TestRoundTrip(t *testing.T) {
	for _, p := range []string{"/api", "/a.b", "/v1/users", "/x+y", "/foo.FooService"} {
		re := Regex(p)
		got, ok := Parse(re)
		if !ok || got != p {
			t.Errorf("Parse(Regex(%q)) = %q, %v; want %q, true", p, got, ok, p)
		}
		m := regexp.MustCompile("^(?:" + re + ")$")
		for path, want := range map[string]bool{p: true, p + "/": true, p + "/x": true, p + "x": false, "/other" + p: false} {
			if m.MatchString(path) != want {
				t.Errorf("%s on %q: match %v, want %v", re, path, !want, want)
			}
		}
	}
	for _, re := range []string{"/[^/]+/bar", "/api", "(/.*)?", "/a.b(/.*)?", "/api/(/.*)?", `/a\?b(/.*)?`} {
		if p, ok := Parse(re); ok {
			t.Errorf("Parse(%q) = %q, true; want not a segment prefix", re, p)
		}
	}
}
