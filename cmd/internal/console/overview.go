package console

import (
	"slices"
	"strconv"
	"strings"

	"github.com/vmesh/vmesh/gatewayapi"
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
	// Routes is the status of the Kubernetes Gateway API routes, one row
	// per route and parentRef, as an API server would hold it.
	Routes []RouteRow
}

// RouteRow is one Gateway API route's status for one of its parentRefs.
type RouteRow struct {
	Object, Parent string
	File           string
	Line           int
	// Accepted and ResolvedRefs render the conditions: "True (Accepted)",
	// "False (BackendNotFound: message)".
	Accepted, ResolvedRefs string
	// OK is set when both conditions are True.
	OK bool
}

// Location is the route's file:line, or "".
func (r RouteRow) Location() string {
	if r.File == "" {
		return ""
	}
	return r.File + ":" + strconv.Itoa(r.Line)
}

// routeRows flattens the routes' status into rows.
func routeRows(status []gatewayapi.RouteStatus) []RouteRow {
	var out []RouteRow
	for _, rs := range status {
		for _, p := range rs.Parents {
			row := RouteRow{Object: rs.Object, Parent: p.ParentRef, File: rs.File, Line: rs.Line, OK: true}
			for _, c := range p.Conditions {
				s := c.Status + " (" + c.Reason
				if c.Message != "" {
					s += ": " + c.Message
				}
				s += ")"
				switch c.Type {
				case gatewayapi.ConditionAccepted:
					row.Accepted = s
				case gatewayapi.ConditionResolvedRefs:
					row.ResolvedRefs = s
				}
				row.OK = row.OK && strings.EqualFold(c.Status, "True")
			}
			out = append(out, row)
		}
	}
	return out
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
	o.Routes = c.routesFor(fs)
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

// routesFor returns the Gateway API routes' status rows of fs (as
// /debug/config's routeStatus), computed once per Store revision.
func (c *Console) routesFor(fs *store.Snapshot) []RouteRow {
	if len(fs.List(store.KindHTTPRoute))+len(fs.List(store.KindGRPCRoute)) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.routesOf == nil || c.routesOf.Revision != fs.Revision {
		c.routes, c.routesOf = routeRows(gatewayapi.Convert(fs).Status), fs
	}
	return c.routes
}

// short cuts a commit SHA to 12 characters.
func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
