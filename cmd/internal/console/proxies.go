package console

import (
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/xds"
)

// The sync states of one resource type on one proxy, as `vmesh status`
// names them.
const (
	StateSynced = "SYNCED" // the last response sent is ACKed
	StateStale  = "STALE"  // a response is not ACKed yet
	StateNACK   = "NACK"   // the last response was rejected
)

// mainTypes are the columns of the proxies table, in xDS order.
func mainTypes() []string { return []string{"LDS", "RDS", "CDS", "EDS"} }

// TypeState is one resource type's state on one proxy.
type TypeState struct {
	Type  string
	State string // StateSynced, StateStale, StateNACK, or "" (not asked)
	// Version is the version ACKed (SYNCED), sent (STALE) or rejected
	// (NACK): r<revision>@<commit>.
	Version string
	// Message is the NACK's error.
	Message   string
	Resources int
}

// ProxyRow is one proxy in the proxies table.
type ProxyRow struct {
	xds.SyncStatus
	// Identity is the SPIFFE ID its node's service account names, or "";
	// for an MCP client, who it was let in as (its mesh certificate's
	// SPIFFE ID, or "plaintext ADDR").
	Identity string
	States   []TypeState
	State    string // the worst state of all its types
	// MCP says the stream is an MCP client's (kind mcp: an istiod reading
	// the mesh's config over xDS), not a proxy's. Reads are the config
	// kinds it reads and their states, by kind; Unserved the other type
	// URLs it asked for, which vmesh answers with no resource.
	MCP      bool
	Reads    []TypeState
	Unserved []string
	// Agent says the stream is a VM agent's own (its name table and
	// WorkloadGroups), not an application's: they share a node id. App
	// says it is an application's whose VM agent is connected too.
	Agent, App bool
}

// Proxies is the proxies page's data.
type Proxies struct {
	Paging
	Types []string
	Rows  []ProxyRow
	// Connected is how many proxies are connected, matching or not.
	Connected int
}

func (Proxies) title() string { return "Proxies" }

func (p Proxies) searchBox() SearchBox {
	return SearchBox{Action: Prefix + "proxies", Query: p.Query, Placeholder: "id, namespace, kind, labels, SYNCED, STALE, NACK, message"}
}

func stateOf(t string, ts *xds.TypeStatus) TypeState {
	s := TypeState{Type: t}
	if ts == nil {
		return s
	}
	s.Resources = ts.Resources
	switch {
	case ts.Nack != "":
		s.State, s.Version, s.Message = StateNACK, ts.NackVersion, ts.Nack
	case ts.Sent != ts.Acked:
		s.State, s.Version = StateStale, ts.Sent
	case ts.Acked != "":
		s.State, s.Version = StateSynced, ts.Acked
	}
	return s
}

// sortedTypes returns the type URLs keying types in xDS order, other types
// after, sorted.
func sortedTypes[V any](types map[string]V) []string {
	var out []string
	for _, t := range mainTypes() {
		if _, ok := types[t]; ok {
			out = append(out, t)
		}
	}
	for _, t := range slices.Sorted(maps.Keys(types)) {
		if !slices.Contains(mainTypes(), t) {
			out = append(out, t)
		}
	}
	return out
}

// worst returns the worst state of a proxy's types: NACK, then STALE.
func worst(types map[string]*xds.TypeStatus) string {
	out := ""
	for t, ts := range types {
		switch stateOf(t, ts).State {
		case StateNACK:
			return StateNACK
		case StateStale:
			out = StateStale
		case StateSynced:
			if out == "" {
				out = StateSynced
			}
		}
	}
	return out
}

func (c *Console) rowOf(s xds.SyncStatus, types []string) ProxyRow {
	r := ProxyRow{SyncStatus: s, State: worst(s.Types), Agent: s.Agent()}
	if s.ServiceAccount != "" {
		r.Identity = c.identity(s.Namespace, s.ServiceAccount)
	}
	if s.Kind == xds.KindMCP {
		// Its types are config kinds by name, or the type URL
		// (group/version/kind) of a type vmesh serves nothing of.
		r.MCP, r.Identity = true, s.Identity
		for _, t := range slices.Sorted(maps.Keys(s.Types)) {
			if strings.Contains(t, "/") {
				r.Unserved = append(r.Unserved, t)
			} else {
				r.Reads = append(r.Reads, stateOf(t, s.Types[t]))
			}
		}
	}
	for _, t := range types {
		r.States = append(r.States, stateOf(t, s.Types[t]))
	}
	return r
}

// searchText is what ?q= is matched against: id, kind, namespace,
// labels, service account, an MCP client's identity, group, protocol,
// states and NACK messages.
func searchText(s xds.SyncStatus) string {
	var b strings.Builder
	for _, f := range []string{s.ID, string(s.Kind), s.Namespace, s.Labels, s.ServiceAccount, s.Identity, s.Group, s.Protocol} {
		b.WriteString(f)
		b.WriteByte(' ')
	}
	for t, ts := range s.Types {
		st := stateOf(t, ts)
		b.WriteString(st.State + " " + st.Message + " ")
	}
	return strings.ToLower(b.String())
}

func (c *Console) proxies(q url.Values) Proxies {
	var all []xds.SyncStatus
	if c.src.Syncz != nil {
		all = c.src.Syncz()
	}
	query := strings.TrimSpace(q.Get("q"))
	matched := all
	if query != "" {
		matched = nil
		for _, s := range all {
			if matches(query, searchText(s)) {
				matched = append(matched, s)
			}
		}
	}
	p := Proxies{Types: mainTypes(), Connected: len(all)}
	var start, end int
	p.Paging, start, end = paginate(Prefix+"proxies", q, len(matched), c.perPage)
	agents := map[string]bool{}
	for _, s := range all {
		if s.Agent() {
			agents[s.ID] = true
		}
	}
	for _, s := range matched[start:end] {
		r := c.rowOf(s, p.Types)
		r.App = !r.Agent && agents[s.ID]
		p.Rows = append(p.Rows, r)
	}
	return p
}
