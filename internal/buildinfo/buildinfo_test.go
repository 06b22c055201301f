package buildinfo

import (
	"runtime"
	"testing"
)

func TestGetUsesLdflags(t *testing.T) {
	defer func(v, r, d string) { version, revision, dirty = v, r, d }(version, revision, dirty)
	version, revision, dirty = "v1.2.3-4-gabcdef0-dirty", "abcdef0123456789abcdef0123456789abcdef01", "true"
	got := Get()
	want := Info{Version: version, Revision: revision, Dirty: true, GoVersion: runtime.Version()}
	if got != want {
		t.Fatalf("Get() = %+v, want %+v", got, want)
	}
	if s, w := got.String(), "v1.2.3-4-gabcdef0-dirty (abcdef012345, dirty, "+runtime.Version()+")"; s != w {
		t.Fatalf("String() = %q, want %q", s, w)
	}
}

func TestGetWithoutLdflags(t *testing.T) {
	defer func(v, r, d string) { version, revision, dirty = v, r, d }(version, revision, dirty)
	version, revision, dirty = "", "", ""
	if got := Get(); got.Version == "" || got.GoVersion != runtime.Version() {
		t.Fatalf("Get() = %+v: want a version and %s", got, runtime.Version())
	}
}
