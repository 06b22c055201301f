// Package buildinfo names the build a vmesh binary came from: the version
// and revision `make build` stamps with -ldflags, else what the Go
// toolchain recorded (runtime/debug.ReadBuildInfo).
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strconv"
)

// Set by the Makefile's LDFLAGS:
//
//	-X github.com/vmesh/vmesh/internal/buildinfo.version=$(git describe --always --dirty)
//	-X github.com/vmesh/vmesh/internal/buildinfo.revision=$(git rev-parse HEAD)
//	-X github.com/vmesh/vmesh/internal/buildinfo.dirty=true|false
var version, revision, dirty string

// Info describes one build. Its JSON form is what /version serves.
type Info struct {
	// Version is the -X version, else the module version ("(devel)" for a
	// build in the source tree), else "dev".
	Version string `json:"version"`
	// Revision is the VCS commit, "" when neither ldflags nor the toolchain
	// recorded one.
	Revision string `json:"revision"`
	// Dirty says the work tree had uncommitted changes.
	Dirty     bool   `json:"dirty"`
	GoVersion string `json:"goVersion"`
}

// Get returns this binary's build information.
func Get() Info {
	info := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	info.Dirty, _ = strconv.ParseBool(dirty)
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if info.Version == "" {
			info.Version = "dev"
		}
		return info
	}
	if info.Version == "" {
		info.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if info.Revision == "" {
				info.Revision = s.Value
			}
		case "vcs.modified":
			if dirty == "" {
				info.Dirty = s.Value == "true"
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	return info
}

// String is the one-line form `vmesh version` prints and logs carry:
// "v1.2.0-3-gabc1234 (abc1234def56, dirty, go1.26.7)".
func (i Info) String() string {
	s := i.Version + " ("
	if i.Revision != "" {
		s += ShortRevision(i.Revision) + ", "
	}
	if i.Dirty {
		s += "dirty, "
	}
	return s + i.GoVersion + ")"
}

// ShortRevision is the first 12 characters of a commit.
func ShortRevision(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
