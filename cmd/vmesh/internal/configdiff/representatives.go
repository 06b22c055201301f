package configdiff

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// Target is a proxy the diff is told about (connected to a control plane,
// or listed in a file), with the resources it holds when known.
type Target struct {
	Proxy *xds.Proxy
	// Held names, by type (listener, route, cluster, endpoint), the
	// resources the proxy holds; nil when unknown. A change or removal of
	// a resource it does not hold is not its change, and a type it holds
	// nothing of (the routes of an LDS-only proxyless server) is not its
	// concern at all; an added resource is its change when it holds that
	// type.
	Held map[string]map[string]bool
}

// Result is a diff over the proxies told about and, for every group of
// proxies the change touches that none of them is in, one representative.
type Result struct {
	Diffs []ProxyDiff
	// Told is how many proxies the diff was told about.
	Told int
	// Uncovered is how many groups the change touches have no told
	// proxy; each has a representative in Diffs.
	Uncovered int
}

// Representatives reports whether the diff had to stand in for groups no
// told proxy is in.
func (r Result) Representatives() bool { return r.Uncovered > 0 }

// DiffTargets diffs the told proxies and, when representatives is set,
// adds one representative proxy for every group the change touches that
// no told proxy is in, or whose told proxies hold none of the changed
// resources' type (an LDS-only server does not stand for the clients of
// its group): the groups of the workloads the config defines
// (WorkloadEntries, WorkloadGroups, ServiceEntry endpoints) and of a plain
// client of each namespace, in the kinds among the told proxies (both
// kinds when none is told). A group is a proxy kind and the model's view
// key before and after the change: proxies of one group get one config.
func DiffTargets(from, to []*store.Object, told []Target, representatives bool) (Result, error) {
	before, after, err := snapshots(from, to)
	if err != nil {
		return Result{}, err
	}
	res := Result{Told: len(told)}
	groupOf := func(p *xds.Proxy) string {
		return string(p.Kind) + "\x00" + xds.GroupKey(before, p) + "\x00" + xds.GroupKey(after, p)
	}
	// covered maps a group to the types its told proxies hold (every type
	// when one's holdings are unknown): a change of another type reaches
	// the group's proxies that are not told about only.
	covered := map[string]map[string]bool{}
	kinds := map[xds.ProxyKind]bool{}
	for _, t := range told {
		changes, err := diffOne(before, after, t.Proxy, t.Held)
		if err != nil {
			return Result{}, err
		}
		if len(changes) > 0 {
			res.Diffs = append(res.Diffs, ProxyDiff{Proxy: t.Proxy.ID, Kind: string(t.Proxy.Kind), Changes: changes})
		}
		if representatives {
			g := groupOf(t.Proxy)
			if covered[g] == nil {
				covered[g] = map[string]bool{}
			}
			for _, typ := range typeOrder {
				if _, ok := t.Held[typ]; ok || t.Held == nil {
					covered[g][typ] = true
				}
			}
			kinds[t.Proxy.Kind] = true
		}
	}
	if representatives {
		if len(kinds) == 0 {
			kinds[xds.KindGRPC], kinds[xds.KindSidecar] = true, true
		}
		alike, others, seen := map[string]int{}, map[int][]string{}, map[string]bool{}
		for _, c := range candidates(to, from) {
			if !kinds[c.proxy.Kind] {
				continue
			}
			g := groupOf(c.proxy)
			if seen[g] {
				continue
			}
			seen[g] = true // one representative per group
			changes, err := diffOne(before, after, c.proxy, nil)
			if err != nil {
				return Result{}, err
			}
			changes = slices.DeleteFunc(changes, func(ch Change) bool { return covered[g][ch.Type] })
			if len(changes) == 0 {
				continue
			}
			res.Uncovered++
			// Groups whose proxies change alike share one entry.
			same := fmt.Sprintf("%s\x00%v", c.proxy.Kind, changes)
			if i, ok := alike[same]; ok {
				others[i] = append(others[i], c.stands)
				continue
			}
			alike[same] = len(res.Diffs)
			res.Diffs = append(res.Diffs, ProxyDiff{Proxy: c.proxy.ID, Kind: string(c.proxy.Kind), Changes: changes,
				Representative: true, Note: c.stands})
		}
		for i, o := range others {
			res.Diffs[i].Note += fmt.Sprintf("; and, changing alike, %s", strings.Join(o, ", "))
		}
	}
	slices.SortFunc(res.Diffs, func(x, y ProxyDiff) int {
		return cmp.Or(cmp.Compare(x.Proxy, y.Proxy), cmp.Compare(x.Kind, y.Kind))
	})
	return res, nil
}

// candidate is a representative proxy and what it stands for.
type candidate struct {
	proxy  *xds.Proxy
	stands string
}

// candidates derives representative proxies, in both kinds, from the
// object sets: a plain client per namespace first, then one per
// WorkloadEntry, WorkloadGroup and ServiceEntry endpoint.
func candidates(sets ...[]*store.Object) []candidate {
	var out []candidate
	seen := map[string]bool{}
	add := func(id, stands, ns, sa string, labels map[string]string, address string) {
		for _, kind := range []xds.ProxyKind{xds.KindGRPC, xds.KindSidecar} {
			p := &xds.Proxy{ID: id, Kind: kind, Namespace: ns, Labels: labels, ServiceAccount: sa}
			if a, err := netip.ParseAddr(address); err == nil {
				p.IPs = []string{a.String()}
			}
			key := string(kind) + "\x00" + id
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, candidate{proxy: p, stands: stands})
		}
	}
	var namespaces []string
	for _, set := range sets {
		for _, o := range set {
			if o.Namespace != "" && !slices.Contains(namespaces, o.Namespace) {
				namespaces = append(namespaces, o.Namespace)
			}
		}
	}
	slices.Sort(namespaces)
	for _, ns := range namespaces {
		add(ns+"/client", fmt.Sprintf("a client in namespace %s with no workload labels", ns), ns, "", nil, "")
	}
	for _, set := range sets {
		for _, o := range set {
			switch spec := o.Spec.(type) {
			case *networking.WorkloadEntry:
				add(fmt.Sprintf("%s/WorkloadEntry/%s", o.Namespace, o.Name),
					fmt.Sprintf("the proxies of WorkloadEntry %s/%s", o.Namespace, o.Name),
					o.Namespace, spec.GetServiceAccount(), spec.GetLabels(), spec.GetAddress())
			case *networking.WorkloadGroup:
				add(fmt.Sprintf("%s/WorkloadGroup/%s", o.Namespace, o.Name),
					fmt.Sprintf("the proxies of WorkloadGroup %s/%s", o.Namespace, o.Name),
					o.Namespace, spec.GetTemplate().GetServiceAccount(), spec.GetMetadata().GetLabels(), "")
			case *networking.ServiceEntry:
				for i, e := range spec.GetEndpoints() {
					add(fmt.Sprintf("%s/ServiceEntry/%s/endpoints[%d]", o.Namespace, o.Name, i),
						fmt.Sprintf("the proxies of ServiceEntry %s/%s's endpoint %s", o.Namespace, o.Name, e.GetAddress()),
						o.Namespace, e.GetServiceAccount(), e.GetLabels(), e.GetAddress())
				}
			}
		}
	}
	return out
}
