// Package configdiff computes what a config change does to each proxy: it
// generates every proxy's xDS resources from two object sets and compares
// them resource by resource, field by field. It never touches a running
// control plane.
package configdiff

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/vmesh/vmesh/internal/protodiff"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// Op says what happened to a resource.
type Op string

// The resource operations a diff reports.
const (
	Added   Op = "added"
	Removed Op = "removed"
	Changed Op = "changed"
)

// Change is one resource that differs for a proxy.
type Change struct {
	Type string `json:"type"` // listener, route, cluster, endpoint
	Name string `json:"name"`
	Op   Op     `json:"op"`
	// Diff is a readable field-level diff ("-" before, "+" after) for changes.
	Diff string `json:"diff,omitempty"`
}

// ProxyDiff lists the changes for one proxy.
type ProxyDiff struct {
	Proxy   string   `json:"proxy"`
	Kind    string   `json:"kind"`
	Changes []Change `json:"changes"`
	// Representative is set for a proxy no one told the diff about: it
	// stands for a group of proxies (by namespace, kind and the workload
	// it was derived from) the change touches, and Note says which.
	Representative bool `json:"representative,omitempty"`
	// Note explains a proxy whose config cannot be generated, or what a
	// representative stands for.
	Note string `json:"note,omitempty"`
}

// AnyChange reports whether a diff changes any proxy's config.
func AnyChange(diffs []ProxyDiff) bool { return len(diffs) > 0 }

// resources is one proxy's generated config: type -> name -> resource.
type resources map[string]map[string]proto.Message

// Diff returns, for every proxy whose config differs between the two object
// sets, the resources added, removed and changed, sorted by proxy, type and
// name. Proxies with no change are left out.
func Diff(from, to []*store.Object, proxies []*xds.Proxy) ([]ProxyDiff, error) {
	told := make([]Target, len(proxies))
	for i, p := range proxies {
		told[i] = Target{Proxy: p}
	}
	r, err := DiffTargets(from, to, told, false)
	return r.Diffs, err
}

// snapshots builds the before and after models.
func snapshots(from, to []*store.Object) (before, after *model.Snapshot, err error) {
	if before, err = snapshotOf(from); err != nil {
		return nil, nil, fmt.Errorf("before: %w", err)
	}
	if after, err = snapshotOf(to); err != nil {
		return nil, nil, fmt.Errorf("after: %w", err)
	}
	return before, after, nil
}

// diffOne compares what a proxy is served before and after, keeping only
// the changes to what it holds when held is known.
func diffOne(before, after *model.Snapshot, p *xds.Proxy, held map[string]map[string]bool) ([]Change, error) {
	var inbound []string
	for n := range held["listener"] {
		if strings.HasPrefix(n, xds.InboundListenerPrefix) {
			inbound = append(inbound, n)
		}
	}
	slices.Sort(inbound)
	a, errA := generate(before, p, inbound)
	b, errB := generate(after, p, inbound)
	if err := cmp.Or(errA, errB); err != nil {
		return nil, fmt.Errorf("proxy %s: %w", p.ID, err)
	}
	changes := compare(a, b)
	if held == nil {
		return changes, nil
	}
	return slices.DeleteFunc(changes, func(c Change) bool {
		names, ok := held[c.Type]
		if !ok {
			return true // it holds no resource of the type: an LDS-only proxy has no routes
		}
		return c.Op != Added && !names[c.Name]
	}), nil
}

// snapshotOf builds the service model for an object set, as the control
// plane would serve it.
func snapshotOf(objs []*store.Object) (*model.Snapshot, error) {
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "diff", Class: store.ClassConfig}, objs); err != nil {
		return nil, err
	}
	return model.Build(st.Snapshot()), nil
}

// generate is a proxy's config from s: its client resources, and the
// server listeners named in inbound (a proxyless gRPC server's, which it
// asks for by name).
func generate(s *model.Snapshot, p *xds.Proxy, inbound []string) (resources, error) {
	out := resources{}
	add := func(typ string, name string, m proto.Message) {
		if out[typ] == nil {
			out[typ] = map[string]proto.Message{}
		}
		out[typ][name] = m
	}
	lds, err := xds.Listeners(s, p)
	if err != nil {
		return nil, err
	}
	for _, r := range lds {
		add("listener", r.GetName(), r)
	}
	for _, name := range inbound {
		if l, err := xds.InboundListener(s, p, name); err == nil {
			add("listener", name, l)
		}
	}
	rds, err := xds.Routes(s, p)
	if err != nil {
		return nil, err
	}
	for _, r := range rds {
		add("route", r.GetName(), r)
	}
	cds, err := xds.Clusters(s, p)
	if err != nil {
		return nil, err
	}
	for _, r := range cds {
		add("cluster", r.GetName(), r)
	}
	eds, err := xds.Endpoints(s, p)
	if err != nil {
		return nil, err
	}
	for _, r := range eds {
		add("endpoint", r.GetClusterName(), r)
	}
	return out, nil
}

var typeOrder = []string{"listener", "route", "cluster", "endpoint"}

func compare(a, b resources) []Change {
	var out []Change
	for _, typ := range typeOrder {
		names := map[string]bool{}
		for n := range a[typ] {
			names[n] = true
		}
		for n := range b[typ] {
			names[n] = true
		}
		sorted := make([]string, 0, len(names))
		for n := range names {
			sorted = append(sorted, n)
		}
		slices.Sort(sorted)
		for _, n := range sorted {
			x, y := a[typ][n], b[typ][n]
			switch {
			case x == nil:
				out = append(out, Change{Type: typ, Name: n, Op: Added})
			case y == nil:
				out = append(out, Change{Type: typ, Name: n, Op: Removed})
			case !proto.Equal(x, y):
				out = append(out, Change{Type: typ, Name: n, Op: Changed, Diff: protodiff.Fields(x, y)})
			}
		}
	}
	return out
}

// Format renders diffs for people: one block per proxy.
func Format(diffs []ProxyDiff) string {
	if len(diffs) == 0 {
		return "no proxy's config changes\n"
	}
	var sb strings.Builder
	for _, d := range diffs {
		fmt.Fprintf(&sb, "proxy %s (%s)\n", d.Proxy, d.Kind)
		if d.Representative {
			fmt.Fprintf(&sb, "  representative (no proxy told about is in its group): %s\n", d.Note)
			d.Note = ""
		}
		if d.Note != "" {
			fmt.Fprintf(&sb, "  %s\n", d.Note)
		}
		for _, c := range d.Changes {
			fmt.Fprintf(&sb, "  %-7s %s %s\n", c.Op, c.Type, c.Name)
			if c.Diff != "" {
				for _, line := range strings.Split(strings.TrimRight(c.Diff, "\n"), "\n") {
					fmt.Fprintf(&sb, "      %s\n", line)
				}
			}
		}
	}
	return sb.String()
}
