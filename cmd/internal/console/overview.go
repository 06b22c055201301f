package console

import (
	"slices"
	"strconv"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// Overview is the overview page's data.
type Overview struct {
	Revision int64
	Commit   string
	Sources  []store.SourceStatus
	// Errors are every source's current config errors (its last good
	// objects keep serving); Warnings are config that applies but is not
	// (fully) enforced and what the analysis finds (filestore warnings).
	Errors   []SourceError
	Warnings []SourceError
	// Infos are findings that depend on config the check could not see,
	// and fields a kind of proxy ignores (vmesh analyze's infos).
	Infos      []SourceError
	Conflicts  []store.Conflict
	Registries []adapter.Status
	Kinds      []KindCount
	Services   int
	Endpoints  int
	Proxies    ProxyCounts
	// Rollout is the staged rollout of git commits, nil without one.
	Rollout *xds.RolloutStatus
}

// SourceError is one config error with the source that reports it.
type SourceError struct {
	Source string
	store.ConfigError
}

// Location is the error's file:line (git-style <sha>:file:line for a
// commit), or "".
func (e SourceError) Location() string {
	s := e.File
	if e.Commit != "" {
		s = short(e.Commit) + ":" + s
		if e.File == "" {
			s = "commit " + short(e.Commit)
		}
	}
	if e.File != "" && e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	return s
}

// KindCount is how many objects of one kind the Store holds.
type KindCount struct {
	Kind  store.Kind
	Count int
}

// ProxyCounts counts connected proxies.
type ProxyCounts struct {
	Total, GRPC, Sidecar, Nacking, Stale int
}

func (Overview) title() string { return "Overview" }

func (c *Console) overview() Overview {
	fs := c.src.Store.Snapshot()
	ms := c.modelFor(fs)
	o := Overview{Revision: fs.Revision, Commit: fs.Commit(), Sources: fs.Sources, Conflicts: fs.Conflicts}
	for _, st := range fs.Sources {
		for _, e := range st.Errors {
			o.Errors = append(o.Errors, SourceError{Source: st.Source, ConfigError: e})
		}
	}
	for _, w := range c.src.Warnings(fs) {
		switch w.Severity {
		case store.SeverityWarning:
			o.Warnings = append(o.Warnings, SourceError{Source: w.Source, ConfigError: w})
		case store.SeverityInfo:
			o.Infos = append(o.Infos, SourceError{Source: w.Source, ConfigError: w})
		}
	}
	for _, k := range store.Kinds {
		if n := len(fs.List(k)); n > 0 {
			o.Kinds = append(o.Kinds, KindCount{Kind: k, Count: n})
		}
	}
	o.Services, o.Endpoints, _ = ms.Objects()
	if c.src.Registries != nil {
		o.Registries = slices.Clone(c.src.Registries())
	}
	if c.src.Rollout != nil {
		o.Rollout = c.src.Rollout()
	}
	if c.src.Syncz != nil {
		byKind := map[model.ProxyKind]int{}
		for _, s := range c.src.Syncz() {
			o.Proxies.Total++
			byKind[s.Kind]++
			switch worst(s.Types) {
			case StateNACK:
				o.Proxies.Nacking++
			case StateStale:
				o.Proxies.Stale++
			}
		}
		o.Proxies.GRPC, o.Proxies.Sidecar = byKind[model.KindGRPC], byKind[model.KindSidecar]
	}
	return o
}

// modelFor returns the model of fs, built once per Store revision.
func (c *Console) modelFor(fs *store.Snapshot) *model.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.model == nil || c.modelOf.Revision != fs.Revision {
		c.model, c.modelOf = model.Build(fs), fs
	}
	return c.model
}

// short cuts a commit SHA to 12 characters.
func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
