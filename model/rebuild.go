package model

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/store"
	networking "istio.io/api/networking/v1alpha3"
)

// Rebuild returns the snapshot BuildWith(fs, mesh) would return, given
// prev, built with BuildWith(_, mesh) from an earlier Store snapshot (or
// by Rebuild from one), and changed, a superset of the keys whose objects
// differ between that Store snapshot and fs. When every changed key is a
// WorkloadEntry it recomputes only the endpoints of the services whose
// selectors matched those entries before or match them now, from those
// services' previous endpoints: its cost follows what changed, not the
// number of entries or services. When every changed key is a
// VirtualService or DestinationRule, only the routing. Everything else is
// shared with prev, which stays unchanged, and unchanged services keep
// their pointers (so Compare is cheap). Otherwise, or without prev, it
// builds in full.
func Rebuild(prev *Snapshot, fs *store.Snapshot, changed map[store.Key]struct{}) *Snapshot {
	switch {
	case prev == nil:
		return Build(fs)
	case onlyKinds(changed, store.KindVirtualService, store.KindDestinationRule):
		return rebuildRouting(prev, fs)
	case onlyKinds(changed, store.KindWorkloadEntry) && prev.source != nil:
		return rebuildEndpoints(prev, fs, changed)
	default:
		return BuildWith(fs, prev.baseMesh)
	}
}

// workloadVersion is one version of a changed WorkloadEntry.
type workloadVersion struct {
	o  *store.Object
	we *networking.WorkloadEntry
}

// workloadEntryOf returns o as a WorkloadEntry version; ok is false when
// o is nil or not a WorkloadEntry.
func workloadEntryOf(o *store.Object) (workloadVersion, bool) {
	if o == nil {
		return workloadVersion{}, false
	}
	we, ok := o.Spec.(*networking.WorkloadEntry)
	return workloadVersion{o, we}, ok
}

// rebuildEndpoints is Rebuild for changes to WorkloadEntries only.
func rebuildEndpoints(prev *Snapshot, fs *store.Snapshot, changed map[store.Key]struct{}) *Snapshot {
	next := *prev
	next.Revision = fs.Revision
	next.Commit = shortCommit(fs.Commit())
	next.id, next.source = &snapshotID{}, fs
	delta := &rebuildDelta{from: prev.id, hosts: map[string]bool{}}
	next.delta = delta

	// The ServiceEntries whose endpoints may differ: those whose selector
	// matched a changed entry as it was (their services hold it) or
	// matches it as it is now.
	origins := make(map[string]bool, len(changed))
	var now []workloadVersion
	ses := map[store.Key]*store.Object{}
	for k := range changed {
		origins[k.Namespace+"/"+k.Name] = true
		old, _ := workloadEntryOf(prev.source.Get(k))
		cur, ok := workloadEntryOf(fs.Get(k))
		if ok {
			now = append(now, cur)
		}
		for _, v := range []workloadVersion{old, cur} {
			if v.we == nil {
				continue // absent, or not a WorkloadEntry (Build skips it too)
			}
			prev.seIndex.matching(v, func(se *store.Object) { ses[se.Key] = se })
		}
	}
	if len(ses) == 0 {
		return &next
	}
	next.Services = slices.Clone(prev.Services)
	for k, o := range ses {
		idx := prev.servicesOf[k]
		se := o.Spec.(*networking.ServiceEntry)
		if len(idx) == 0 || Resolution(se.GetResolution()) == ResolutionNone {
			continue // no services, or services without endpoints
		}
		// Every host of the entry has the same endpoints (hostEndpoints
		// changes nothing for an entry with a selector but NONE).
		eps := replaceEndpoints(prev.Services[idx[0]].Endpoints, origins, selectedNow(o, se, now))
		for _, i := range idx {
			n := *prev.Services[i]
			n.Endpoints = eps
			next.Services[i] = &n
			delta.hosts[n.Hostname] = true
		}
	}
	return &next
}

// selectedNow returns the endpoints of the changed entries, as they are
// now, that the ServiceEntry o selects, sorted as endpoints are.
func selectedNow(o *store.Object, se *networking.ServiceEntry, now []workloadVersion) []*Endpoint {
	var out []*Endpoint
	sel := se.GetWorkloadSelector().GetLabels()
	for _, v := range now {
		if v.o.Namespace != o.Namespace || !workloadMatches(sel, v.o, v.we) || !healthy(v.o) || v.we.GetAddress() == "" {
			continue
		}
		out = append(out, endpointFrom(v.we, workloadLabels(v.o, v.we), v.o.Namespace+"/"+v.o.Name))
	}
	slices.SortFunc(out, compareEndpoints)
	return out
}

// replaceEndpoints returns prev (sorted) without the endpoints of origins,
// merged with add (sorted): one pass over prev.
func replaceEndpoints(prev []*Endpoint, origins map[string]bool, add []*Endpoint) []*Endpoint {
	out := make([]*Endpoint, 0, len(prev)+len(add))
	for _, e := range prev {
		if origins[e.Origin] {
			continue
		}
		for len(add) > 0 && compareEndpoints(add[0], e) < 0 {
			out = append(out, add[0])
			add = add[1:]
		}
		out = append(out, e)
	}
	out = append(out, add...)
	if len(out) == 0 {
		return nil
	}
	return out
}

// compareEndpoints orders endpoints by address, then origin.
func compareEndpoints(a, c *Endpoint) int {
	return cmp.Or(cmp.Compare(a.Address, c.Address), cmp.Compare(a.Origin, c.Origin))
}

// selectorIndex finds the ServiceEntries whose workloadSelector may match
// a WorkloadEntry without looking at the others: each entry with selector
// labels is indexed under one of them (an entry it matches carries that
// label), those with an empty selector under their namespace.
type selectorIndex struct {
	byLabel map[string]map[labelKV][]*store.Object
	all     map[string][]*store.Object
}

// indexSelectors indexes the ServiceEntries with a workloadSelector.
func indexSelectors(list []*store.Object) *selectorIndex {
	x := &selectorIndex{byLabel: map[string]map[labelKV][]*store.Object{}, all: map[string][]*store.Object{}}
	for _, o := range list {
		se, ok := o.Spec.(*networking.ServiceEntry)
		if !ok || se.GetWorkloadSelector() == nil {
			continue
		}
		sel := se.GetWorkloadSelector().GetLabels()
		if len(sel) == 0 {
			x.all[o.Namespace] = append(x.all[o.Namespace], o)
			continue
		}
		k := slices.Min(slices.Collect(maps.Keys(sel)))
		m := x.byLabel[o.Namespace]
		if m == nil {
			m = map[labelKV][]*store.Object{}
			x.byLabel[o.Namespace] = m
		}
		m[labelKV{k, sel[k]}] = append(m[labelKV{k, sel[k]}], o)
	}
	return x
}

// matching calls f with each ServiceEntry whose selector matches v.
func (x *selectorIndex) matching(v workloadVersion, f func(*store.Object)) {
	try := func(cands []*store.Object) {
		for _, o := range cands {
			if workloadMatches(o.Spec.(*networking.ServiceEntry).GetWorkloadSelector().GetLabels(), v.o, v.we) {
				f(o)
			}
		}
	}
	try(x.all[v.o.Namespace])
	m := x.byLabel[v.o.Namespace]
	if m == nil {
		return
	}
	// The entry's labels: spec labels win over metadata labels.
	for k, val := range v.we.GetLabels() {
		try(m[labelKV{k, val}])
	}
	for k, val := range v.o.Labels {
		if _, ok := v.we.GetLabels()[k]; !ok {
			try(m[labelKV{k, val}])
		}
	}
}

// Selects reports whether a ServiceEntry of namespace ns selects a
// workload with labels (its workloadSelector matches them): what makes a
// WorkloadEntry a service's endpoint.
func (s *Snapshot) Selects(ns string, labels map[string]string) bool {
	if len(s.seIndex.all[ns]) > 0 {
		return true
	}
	m := s.seIndex.byLabel[ns]
	for k, v := range labels {
		for _, o := range m[labelKV{k, v}] {
			if LabelsMatch(o.Spec.(*networking.ServiceEntry).GetWorkloadSelector().GetLabels(), labels) {
				return true
			}
		}
	}
	return false
}

// SameSelectors reports whether s and o answer Selects alike: they share
// the index of ServiceEntry selectors, as a rebuild of endpoints or of
// routing keeps it.
func (s *Snapshot) SameSelectors(o *Snapshot) bool {
	return s != nil && o != nil && s.seIndex == o.seIndex
}

// onlyKinds reports whether every changed key is of one of the kinds.
func onlyKinds(changed map[store.Key]struct{}, kinds ...store.Kind) bool {
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
func rebuildRouting(prev *Snapshot, fs *store.Snapshot) *Snapshot {
	next := *prev
	next.Revision = fs.Revision
	next.Commit = shortCommit(fs.Commit())
	next.id, next.source, next.delta = &snapshotID{}, fs, nil
	next.VirtualServices, next.DestinationRules, next.GatewayVirtualServices = nil, nil, nil
	next.vsByHost = make(map[string][]*VirtualService)
	next.drByHost = make(map[string][]*DestinationRule)
	next.Problems = nil
	vsPrefix, drPrefix := string(store.KindVirtualService)+"/", string(store.KindDestinationRule)+"/"
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
