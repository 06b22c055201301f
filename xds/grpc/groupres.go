package grpc

import (
	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
	"github.com/vmesh/vmesh/xds/nds"
)

// The two resource types only a proxyless group has (a VM agent's own
// stream is a proxyless one): the name table (gen.NameTableType) and the
// WorkloadGroups of its namespace (gen.WorkloadGroupType).

// nameTableResources generates the name table resource for a View.
func nameTableResources(v *model.View) (*gen.ResourceMap, error) {
	t, err := NameTable(v)
	if err != nil {
		return nil, err
	}
	r, err := gen.NewResource(gen.NameTableName, t.Message())
	if err != nil {
		return nil, err
	}
	e := cowmap.New[string, *gen.Resource]().Edit()
	e.Set(gen.NameTableName, r)
	return e.Map(), nil
}

// addNameTable adds the name table to a generation being built.
func addNameTable(g *gen.Generation, v *model.View) error {
	m, err := nameTableResources(v)
	if err != nil {
		return err
	}
	g.Types[gen.NameTableType] = m
	return nil
}

// updateNameTable brings the name table to n, a generation updated from g
// for a change bound to the dirty hosts, and records in gd whether it
// changed. When none of those hosts' entries differs (the usual case: an
// endpoint, route or policy changed) g's table is shared without
// resolving the View; otherwise it is generated again.
func updateNameTable(g, n *gen.Generation, gd *gen.Diff, dirty map[string]bool) error {
	w := n.Workload
	if prev := g.Types[gen.NameTableType]; prev != nil {
		pv, nv := model.NewView(g.Snap, w), model.NewView(n.Snap, w)
		same := true
		for h := range dirty {
			a, aok := NameInfoOf(pv.ServiceFor(h))
			b, bok := NameInfoOf(nv.ServiceFor(h))
			if aok != bok || !(nds.Table{h: a}).Equal(nds.Table{h: b}) {
				same = false
				break
			}
		}
		if same {
			n.Types[gen.NameTableType] = prev
			gd.Changed[gen.NameTableType] = map[string]bool{}
			return nil
		}
	}
	m, err := nameTableResources(model.NewView(n.Snap, w))
	if err != nil {
		return err
	}
	ch := map[string]bool{}
	var old *gen.Resource
	if g.Types[gen.NameTableType] != nil {
		old, _ = g.Types[gen.NameTableType].Get(gen.NameTableName)
	}
	if nr, ok := m.Get(gen.NameTableName); ok != (old != nil) || (ok && old.Hash != nr.Hash) {
		ch[gen.NameTableName] = true
		n.Types[gen.NameTableType] = m
	} else {
		n.Types[gen.NameTableType] = g.Types[gen.NameTableType]
	}
	gd.Changed[gen.NameTableType] = ch
	return nil
}

// workloadGroupResources generates the WorkloadGroup resources of a View:
// the groups of its namespace.
func workloadGroupResources(v *model.View) (*gen.ResourceMap, error) {
	e := cowmap.New[string, *gen.Resource]().Edit()
	for _, wg := range v.WorkloadGroups() {
		r, err := gen.NewResource(wg.Name, wg.Spec)
		if err != nil {
			return nil, err
		}
		e.Set(wg.Name, r)
	}
	return e.Map(), nil
}

// addWorkloadGroups adds the WorkloadGroups to a generation being built.
func addWorkloadGroups(g *gen.Generation, v *model.View) error {
	m, err := workloadGroupResources(v)
	if err != nil {
		return err
	}
	g.Types[gen.WorkloadGroupType] = m
	return nil
}

// refreshWorkloadGroups brings the WorkloadGroups of n, a generation
// brought forward from g (update, rebase) with g's, to n's snapshot, and
// records in gd which changed. WorkloadGroups are outside model.Diff (no
// other resource reads them), so this runs on every such step; it costs a
// comparison of the namespace's groups.
func refreshWorkloadGroups(g, n *gen.Generation, gd *gen.Diff) error {
	ns := n.Workload.Namespace
	if model.SameWorkloadGroups(g.Snap, n.Snap, ns) {
		n.Types[gen.WorkloadGroupType] = g.Types[gen.WorkloadGroupType]
		gd.Changed[gen.WorkloadGroupType] = map[string]bool{}
		return nil
	}
	m, err := workloadGroupResources(model.NewView(n.Snap, n.Workload))
	if err != nil {
		return err
	}
	ch := map[string]bool{}
	for name, r := range m.All() {
		if o := g.Get(gen.WorkloadGroupType, name); o == nil || o.Hash != r.Hash {
			ch[name] = true
		}
	}
	if old := g.Types[gen.WorkloadGroupType]; old != nil {
		for name := range old.Keys() {
			if _, ok := m.Get(name); !ok {
				ch[name] = true
			}
		}
	}
	n.Types[gen.WorkloadGroupType] = m
	gd.Changed[gen.WorkloadGroupType] = ch
	return nil
}
