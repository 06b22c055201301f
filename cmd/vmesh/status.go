package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/credentials"
	"github.com/vmesh/vmesh/writers/sharedstate"
	"github.com/vmesh/vmesh/xds"
)

// statusTypes are the resource types shown, in order.
var statusTypes = []string{"LDS", "RDS", "CDS", "EDS"}

// proxyStatus is one row of `vmesh status`: one proxy (node id) on one
// replica, its application streams' state and its VM agent's.
type proxyStatus struct {
	Replica string `json:"replica" yaml:"replica"`
	Proxy   string `json:"proxy" yaml:"proxy"`
	// Kind is the applications' kind (grpc, sidecar, router), "agent"
	// when only the VM agent's own stream is connected.
	Kind  string            `json:"kind" yaml:"kind"`
	Group string            `json:"group" yaml:"group"`
	Types map[string]string `json:"types" yaml:"types"` // type -> SYNCED (version) | STALE | NACK: msg
	// Apps counts the application streams under the node id (several
	// applications of one VM may share its agent's bootstrap).
	Apps int `json:"apps" yaml:"apps"`
	// Agent is the state of the VM agent's own stream (its name table and
	// WorkloadGroups: "SYNCED NDS r3@…"), "" when the proxy has no agent
	// stream.
	Agent string `json:"agent,omitempty" yaml:"agent,omitempty"`
	// MissingCredentials are the file credentials the proxy's config asks
	// for that its agent does not hold (VM1019): what needs them fails
	// closed.
	MissingCredentials []string `json:"missingCredentials,omitempty" yaml:"missingCredentials,omitempty"`
}

// isAgentStream reports whether a stream is a VM agent's own
// (xds.SyncStatus.Agent).
func isAgentStream(s xds.SyncStatus) bool { return s.Agent() }

// typeState renders one type's sync state.
func typeState(ts *xds.TypeStatus) string {
	switch {
	case ts.Nack != "":
		return "NACK: " + ts.Nack
	case ts.Sent != ts.Acked:
		return "STALE (sent " + ts.Sent + ")"
	}
	return "SYNCED " + ts.Acked
}

// otherTypes sums up the types of a stream that are not among
// statusTypes, as an MCP client's config kinds (xds/mcp): "N types:"
// and the worst state, "" when there are none.
func otherTypes(types map[string]string) string {
	n, state := 0, ""
	for t, st := range types {
		if !slices.Contains(statusTypes, t) {
			n++
			state = worse(state, st)
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d types: %s", n, state)
}

// worse orders states: a NACK over a STALE over a SYNCED.
func worse(a, b string) string {
	rank := func(s string) int {
		switch {
		case strings.HasPrefix(s, "NACK"):
			return 3
		case strings.HasPrefix(s, "STALE"):
			return 2
		case s != "":
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// proxyRows merges a replica's streams into one row per node id: its
// application streams (each type's worst state) and its agent's stream.
func proxyRows(replica string, st []xds.SyncStatus) []proxyStatus {
	var rows []proxyStatus
	byID := map[string]int{}
	for _, s := range st {
		i, ok := byID[s.ID]
		if !ok {
			i = len(rows)
			byID[s.ID] = i
			rows = append(rows, proxyStatus{Replica: replica, Proxy: s.ID, Kind: "agent", Group: s.Group, Types: map[string]string{}})
		}
		r := &rows[i]
		if isAgentStream(s) {
			var parts []string
			for _, t := range slices.Sorted(maps.Keys(s.Types)) {
				parts = append(parts, typeState(s.Types[t])+" "+strings.ToUpper(t))
			}
			r.Agent = worse(r.Agent, strings.Join(parts, ", "))
			continue
		}
		r.Apps++
		r.Kind, r.Group = string(s.Kind), s.Group
		if s.Identity != "" { // an MCP client: who it was let in as
			r.Group += " " + s.Identity
		}
		for typ, ts := range s.Types {
			t := strings.ToUpper(typ)
			r.Types[t] = worse(r.Types[t], typeState(ts))
		}
	}
	return rows
}

// missingCredentials fills the rows' MissingCredentials.
func missingCredentials(rows []proxyStatus, creds []credentials.Proxy) {
	byID := map[string][]string{}
	for _, p := range creds {
		for _, m := range p.Missing {
			byID[p.ID] = append(byID[p.ID], m.String())
		}
	}
	for i := range rows {
		rows[i].MissingCredentials = byID[rows[i].Proxy]
	}
}

// replicaStatus is one replica's line of `vmesh status`: the config it
// serves and the errors its sources report, or why it could not be read.
type replicaStatus struct {
	Replica string `json:"replica" yaml:"replica"`
	// ID is the replica's name in the shared state, when it has one, and
	// StateError what its shared state last failed on.
	ID         string `json:"id,omitempty" yaml:"id,omitempty"`
	StateError string `json:"stateError,omitempty" yaml:"stateError,omitempty"`
	Error      string `json:"error,omitempty" yaml:"error,omitempty"`
	Revision   int64  `json:"revision" yaml:"revision"`
	Commit     string `json:"commit,omitempty" yaml:"commit,omitempty"`
	Proxies    int    `json:"proxies" yaml:"proxies"`
	// Errors counts the config errors of every source; FirstError is one
	// of them, file:line first.
	Errors     int    `json:"errors" yaml:"errors"`
	FirstError string `json:"firstError,omitempty" yaml:"firstError,omitempty"`
	// Held says what sources with errors keep serving ("commit X
	// rejected; still serving Y"), one line per source: not counted.
	Held []string `json:"held,omitempty" yaml:"held,omitempty"`
	// Warnings counts the warnings (config applied but not, or not fully,
	// enforced; the analysis across sources); FirstWarning is one of them.
	Warnings     int    `json:"warnings" yaml:"warnings"`
	FirstWarning string `json:"firstWarning,omitempty" yaml:"firstWarning,omitempty"`
	// Connected lists the sources that hold a connection to a server
	// (config over xDS, MeshConfig configSources): its state, the version
	// last applied and its objects.
	Connected []connectedSource `json:"connectedSources,omitempty" yaml:"connectedSources,omitempty"`
	// Rollout is the staged rollout of git commits, when configured
	// (git.rollout): a held commit is named here by SHA.
	Rollout *xds.RolloutStatus `json:"rollout,omitempty" yaml:"rollout,omitempty"`
	// RouteStatus is the status of the Gateway API routes the replica
	// serves (Accepted and ResolvedRefs by parentRef, with their reasons),
	// which an API server would hold (/debug/config's routeStatus).
	RouteStatus []gatewayapi.RouteStatus `json:"routeStatus,omitempty" yaml:"routeStatus,omitempty"`
}

// connectedSource is one source with a server connection (an MCP
// configSources entry) as `vmesh status` shows it.
type connectedSource struct {
	Source     string `json:"source" yaml:"source"`
	Connection string `json:"connection" yaml:"connection"`
	Version    string `json:"version,omitempty" yaml:"version,omitempty"`
	Objects    int    `json:"objects" yaml:"objects"`
	Errors     int    `json:"errors" yaml:"errors"`
}

// statusReport is what `vmesh status -o json|yaml` prints.
type statusReport struct {
	Replicas []replicaStatus `json:"replicas" yaml:"replicas"`
	// Unlisted are the replicas the shared state knows that no --server
	// names (read from the first replica that has a shared state).
	Unlisted []sharedstate.Replica `json:"unlisted,omitempty" yaml:"unlisted,omitempty"`
	Proxies  []proxyStatus         `json:"proxies" yaml:"proxies"`
}

func newStatusCmd() *cobra.Command {
	var servers []string
	var output string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every connected proxy and whether it runs the latest config (like istioctl proxy-status)",
		Long: `status reads /debug/config and /debug/syncz from one or more replicas and
prints one line per replica (the config revision and commit it serves, its
config errors with the first one, or why it could not be read), then one
line per proxy (node id): KIND is its applications' (grpc, sidecar; "×N"
when several applications share the node id, "agent" when only its VM
agent is connected), AGENT the state of the VM agent's own stream (its name
table, NDS, and WorkloadGroups), and, per resource type, SYNCED (with the version the proxy ACKed:
r<store revision>[@<commit>]), STALE (a response it has not ACKed yet) or
NACK with the proxy's error message. A replica that cannot be read does not
stop the others' listing (they are read at once); status then exits 1.
Replicas that share state (vmesh serve --state) show their replica ID, and
the replicas the shared state knows that no --server names are listed too.
Each Kubernetes Gateway API route (HTTPRoute, GRPCRoute) a replica serves
has a line per parentRef with the status an API server would hold
(Accepted, ResolvedRefs, each with its reason: NoMatchingParent,
NotAllowedByListeners, BackendNotFound, RefNotPermitted, ...). Last, each proxy whose config names a file credential (credentialName) its
agent's credentials directory does not hold, with the object and field
naming it (VM1019): that listener chain or cluster fails closed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				output = "json"
			}
			report := readStatus(servers)
			if err := writeStatus(cmd.OutOrStdout(), output, report); err != nil {
				return err
			}
			for _, r := range report.Replicas {
				if r.Error != "" {
					return exitError{code: 1}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&servers, "server", []string{"127.0.0.1:15014"}, "HTTP address of a replica (repeatable)")
	outputFlag(cmd, &output)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (-o json)")
	return cmd
}

// readStatus reads every replica at once; one that fails is reported, not
// fatal, and does not hold up the others.
func readStatus(servers []string) statusReport {
	report := statusReport{Replicas: make([]replicaStatus, len(servers)), Proxies: []proxyStatus{}}
	rows := make([][]proxyStatus, len(servers))
	states := make([]*sharedstate.Status, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			report.Replicas[i], rows[i], states[i] = readReplica(srv)
		}()
	}
	wg.Wait()
	asked := map[string]bool{}
	for i, srv := range servers {
		asked[strings.TrimPrefix(serverURL(srv), "http://")] = true
		report.Proxies = append(report.Proxies, rows[i]...)
	}
	for _, st := range states {
		if st == nil {
			continue
		}
		for _, r := range st.Replicas {
			if !asked[r.HTTPAddr] {
				report.Unlisted = append(report.Unlisted, r)
			}
		}
		break
	}
	slices.SortFunc(report.Proxies, func(a, b proxyStatus) int {
		return cmp.Or(cmp.Compare(a.Proxy, b.Proxy), cmp.Compare(a.Replica, b.Replica))
	})
	return report
}

// readReplica reads one replica: its config, proxies and, when it shares
// state with others, what the shared state knows.
func readReplica(srv string) (replicaStatus, []proxyStatus, *sharedstate.Status) {
	rs := replicaStatus{Replica: srv}
	var dc filestore.DebugConfig
	st, err := syncz(srv)
	if err == nil {
		err = getJSON(srv, "/debug/config?kind=none", &dc)
	}
	if err != nil {
		rs.Error = err.Error()
		return rs, nil, nil
	}
	rs.Revision, rs.Commit, rs.Proxies = dc.Revision, dc.Commit, len(st)
	rs.RouteStatus = dc.RouteStatus
	// The first error shown is one about a source itself, when there is
	// one (a git fetch failing or stalled, a registry unreachable: why
	// nothing new applies), else the first of a file or commit.
	var sourceErr, otherErr string
	for _, src := range dc.Sources {
		if src.Connection != "" {
			rs.Connected = append(rs.Connected, connectedSource{Source: src.Source, Connection: src.Connection, Version: src.Revision, Objects: src.Objects, Errors: len(src.Errors)})
		}
		rs.Errors += len(src.Errors)
		if src.Held != "" {
			rs.Held = append(rs.Held, src.Held)
		}
		for _, e := range src.Errors {
			switch {
			case e.File == "" && e.Commit == "" && sourceErr == "":
				sourceErr = src.Source + ": " + e.Error()
			case otherErr == "":
				otherErr = src.Source + ": " + e.Error()
			}
		}
	}
	rs.FirstError = cmp.Or(sourceErr, otherErr)
	for _, w := range dc.Warnings {
		if w.Severity != store.SeverityWarning {
			continue
		}
		rs.Warnings++
		if rs.FirstWarning == "" {
			rs.FirstWarning = w.Error()
		}
	}
	rows := proxyRows(srv, st)
	// A replica without the credential check answers 404: none listed.
	var creds []credentials.Proxy
	if getJSON(srv, "/debug/credentials", &creds) == nil {
		missingCredentials(rows, creds)
	}
	// A replica without a staged rollout answers 404.
	var ro xds.RolloutStatus
	if getJSON(srv, "/debug/rollout", &ro) == nil {
		rs.Rollout = &ro
	}
	// A replica without a shared state answers 404: it is alone.
	var shared sharedstate.Status
	if getJSON(srv, "/debug/replicas", &shared) != nil {
		return rs, rows, nil
	}
	rs.ID, rs.StateError = shared.Self, shared.Error
	return rs, rows, &shared
}

func writeStatus(w io.Writer, format string, report statusReport) error {
	return writeOutput(w, format, report, func(tw *tabwriter.Writer) error { return statusTable(tw, report) })
}

// statusTable prints the replica lines, then a line per proxy.
func statusTable(tw *tabwriter.Writer, report statusReport) error {
	fmt.Fprintln(tw, "REPLICA\tCONFIG\tPROXIES\tERRORS\tWARNINGS")
	for _, r := range report.Replicas {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\tunreachable: %s\t-\t-\t-\n", r.Replica, r.Error)
			continue
		}
		config := fmt.Sprintf("r%d", r.Revision)
		if r.Commit != "" {
			config += "@" + r.Commit[:min(12, len(r.Commit))]
		}
		if r.StateError != "" {
			config += " (shared state failing: " + r.StateError + ")"
		}
		errs := "0"
		if r.Errors > 0 {
			errs = strconv.Itoa(r.Errors)
			if len(r.Held) > 0 {
				errs += " (" + strings.Join(r.Held, "; ") + ")"
			}
			errs += ", first: " + r.FirstError
		}
		warns := "0"
		if r.Warnings > 0 {
			warns = fmt.Sprintf("%d, first: %s", r.Warnings, r.FirstWarning)
		}
		name := r.Replica
		if r.ID != "" {
			name += " (" + r.ID + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", name, config, r.Proxies, errs, warns)
	}
	for _, r := range report.Replicas {
		for _, c := range r.Connected {
			fmt.Fprintf(tw, "%s\tsource %s: %s, version %s, %d objects, %d errors\t-\t-\t-\n", r.Replica, c.Source, c.Connection, cmp.Or(c.Version, "none"), c.Objects, c.Errors)
		}
	}
	for _, r := range report.Replicas {
		if r.Rollout != nil {
			fmt.Fprintf(tw, "%s\trollout %s: %s\t-\t-\t-\n", r.Replica, strings.ToUpper(r.Rollout.Phase), r.Rollout.Summary())
		}
	}
	for _, r := range report.Replicas {
		for _, rt := range r.RouteStatus {
			for _, line := range strings.Split(rt.String(), "\n") {
				fmt.Fprintf(tw, "%s\troute %s\t-\t-\t-\n", r.Replica, line)
			}
		}
	}
	for _, r := range report.Unlisted {
		fmt.Fprintf(tw, "%s (%s)\tnot asked: known to the shared state, %d proxies, last heartbeat %s\t-\t-\t-\n",
			cmp.Or(r.HTTPAddr, "-"), r.ID, r.Proxies, r.Heartbeat.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "PROXY\tKIND\tREPLICA\t%s\tAGENT\tGROUP\n", strings.Join(statusTypes, "\t"))
	for _, r := range report.Proxies {
		cols := make([]string, len(statusTypes))
		for i, t := range statusTypes {
			cols[i] = cmp.Or(r.Types[t], "-")
		}
		agent := cmp.Or(r.Agent, otherTypes(r.Types))
		kind := r.Kind
		if r.Apps > 1 {
			kind = fmt.Sprintf("%s ×%d", kind, r.Apps)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Proxy, kind, r.Replica, strings.Join(cols, "\t"), cmp.Or(agent, "-"), r.Group)
	}
	first := true
	for _, r := range report.Proxies {
		for _, m := range r.MissingCredentials {
			if first {
				fmt.Fprintln(tw)
				fmt.Fprintln(tw, "PROXY\tMISSING CREDENTIAL (VM1019: not in its agent's credentials directory, or certificate files it refused; fails closed)")
				first = false
			}
			fmt.Fprintf(tw, "%s\t%s\n", r.Proxy, m)
		}
	}
	return nil
}
