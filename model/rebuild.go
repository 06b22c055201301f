package model

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/filestore"
	networking "istio.io/api/networking/v1alpha3"
)

// Rebuild returns the snapshot BuildWith(fs, mesh) would return, given
// prev, built with BuildWith(_, mesh) from an earlier Store snapshot,
// and changed, a superset of the keys whose objects differ between that
// Store snapshot and fs. When every changed key is a WorkloadEntry it
// recomputes only the endpoints of the services that held or now select
// those entries; when every changed key is a VirtualService or
// DestinationRule, only the routing. Everything else is shared with prev,
// which stays unchanged, and unchanged services keep their pointers (so
// Compare is cheap). Otherwise, or without prev, it builds in full.
func Rebuild(prev *Snapshot, fs *filestore.Snapshot, changed map[filestore.Key]struct{}) *Snapshot {
	if prev == nil {
		return Build(fs)
	}
	if onlyKinds(changed, filestore.KindVirtualService, filestore.KindDestinationRule) {
		return rebuildRouting(prev, fs)
	}
	if !onlyKinds(changed, filestore.KindWorkloadEntry) {
		return BuildWith(fs, prev.baseMesh)
	}
	// The ServiceEntries whose endpoints may differ: those whose services
	// held a changed entry, and those whose selector matches one now.
	ses := map[filestore.Key]bool{}
	origins := make(map[string]bool, len(changed))
	namespaces := map[string]bool{}
	for k := range changed {
		origins[k.Namespace+"/"+k.Name] = true
		namespaces[k.Namespace] = true
	}
	for _, svc := range prev.Services {
		if !namespaces[svc.Namespace] {
			continue
		}
		for _, e := range svc.Endpoints {
			if origins[e.Origin] {
				ses[filestore.Key{Kind: filestore.KindServiceEntry, Namespace: svc.Namespace, Name: svc.Name}] = true
				break
			}
		}
	}
	// The namespaces' entries: ranges of the list, which is sorted by
	// namespace.
	entries := map[string][]*filestore.Object{}
	all := fs.List(filestore.KindWorkloadEntry)
	for ns := range namespaces {
		lo, _ := slices.BinarySearchFunc(all, ns, func(o *filestore.Object, ns string) int { return cmp.Compare(o.Namespace, ns) })
		// The first entry past the namespace: searched, not walked (a
		// namespace may hold 100,000 entries).
		hi, _ := slices.BinarySearchFunc(all[lo:], ns, func(o *filestore.Object, ns string) int {
			if o.Namespace == ns {
				return -1
			}
			return cmp.Compare(o.Namespace, ns)
		})
		entries[ns] = all[lo : lo+hi]
	}
	// The changed entries as they are now, looked up once (not once per
	// ServiceEntry).
	type current struct {
		o  *filestore.Object
		we *networking.WorkloadEntry
	}
	now := make([]current, 0, len(changed))
	for k := range changed {
		if wo := fs.Get(k); wo != nil {
			if we, ok := wo.Spec.(*networking.WorkloadEntry); ok {
				now = append(now, current{wo, we})
			}
		}
	}
	for _, o := range fs.List(filestore.KindServiceEntry) {
		if len(now) == 0 {
			break
		}
		se, ok := o.Spec.(*networking.ServiceEntry)
		if !ok || !namespaces[o.Namespace] || se.GetWorkloadSelector() == nil {
			continue
		}
		for _, c := range now {
			if c.o.Namespace == o.Namespace && workloadMatches(se.GetWorkloadSelector().GetLabels(), c.o, c.we) {
				ses[o.Key] = true
				break
			}
		}
	}

	next := *prev
	next.Revision = fs.Revision
	next.Commit = shortCommit(fs.Commit())
	if len(ses) == 0 {
		return &next
	}
	// Few services change: their selectors scan the namespace's entries
	// rather than index them all (selectWorkloadEntries without an index).
	b := &builder{s: &next, weAll: entries}
	eps := make(map[filestore.Key][]*Endpoint, len(ses))
	for k := range ses {
		if o := fs.Get(k); o != nil {
			if se, ok := o.Spec.(*networking.ServiceEntry); ok {
				eps[k] = b.endpoints(o, se)
			}
		}
	}
	next.Services = make([]*Service, len(prev.Services))
	next.byHost = maps.Clone(prev.byHost)
	for i, svc := range prev.Services {
		k := filestore.Key{Kind: filestore.KindServiceEntry, Namespace: svc.Namespace, Name: svc.Name}
		list, ok := eps[k]
		if !ok {
			next.Services[i] = svc
			continue
		}
		o := fs.Get(k)
		n := *svc
		n.Endpoints = hostEndpoints(o, o.Spec.(*networking.ServiceEntry), svc.Hostname, list)
		next.Services[i] = &n
		hs := make([]*Service, len(prev.byHost[svc.Hostname]))
		for j, h := range prev.byHost[svc.Hostname] {
			hs[j] = h
			if h == svc {
				hs[j] = &n
			}
		}
		// A host defined in several namespaces may be replaced twice: keep
		// the earlier replacements.
		if cur := next.byHost[svc.Hostname]; len(cur) == len(hs) {
			for j := range hs {
				if cur[j] != prev.byHost[svc.Hostname][j] {
					hs[j] = cur[j]
				}
			}
		}
		next.byHost[svc.Hostname] = hs
	}
	return &next
}

// onlyKinds reports whether every changed key is of one of the kinds.
func onlyKinds(changed map[filestore.Key]struct{}, kinds ...filestore.Kind) bool {
	for k := range changed {
		if !slices.Contains(kinds, k.Kind) {
			return false
		}
	}
	return true
}

// rebuildRouting is Rebuild for changes to VirtualServices and
// DestinationRules only: services and endpoints are prev's, shared; the
// routing objects and their binding to hosts are built again (they are
// few next to the endpoints).
func rebuildRouting(prev *Snapshot, fs *filestore.Snapshot) *Snapshot {
	next := *prev
	next.Revision = fs.Revision
	next.Commit = shortCommit(fs.Commit())
	next.VirtualServices, next.DestinationRules = nil, nil
	next.vsByHost = make(map[string][]*VirtualService)
	next.drByHost = make(map[string][]*DestinationRule)
	next.Problems = nil
	vsPrefix, drPrefix := string(filestore.KindVirtualService)+"/", string(filestore.KindDestinationRule)+"/"
	for _, p := range prev.Problems {
		if !strings.HasPrefix(p.Object, vsPrefix) && !strings.HasPrefix(p.Object, drPrefix) {
			next.Problems = append(next.Problems, p)
		}
	}
	b := &builder{s: &next}
	b.addRouting(fs)
	b.sortProblems()
	return &next
}
