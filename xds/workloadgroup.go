package xds

import (
	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
)

// WorkloadGroupType is the type URL of the WorkloadGroups served to VM
// agents: istio.io/api's WorkloadGroup message, one resource per group of
// the proxy's namespace, named by the group's name. An agent subscribes
// on its own stream to the group it registers under and runs the group's
// readiness probe, so the probe follows the config (Istio writes it into
// the VM's files at onboarding instead).
const WorkloadGroupType = "type.googleapis.com/istio.networking.v1alpha3.WorkloadGroup"

// workloadGroupResources generates the WorkloadGroup resources of a View:
// the groups of its namespace, for kinds whose streams may be an agent's
// own (agent: kindRow.agentStreams); an empty map for the others.
func workloadGroupResources(v *model.View, agent bool) (*resourceMap, error) {
	e := cowmap.New[string, *resource]().Edit()
	if !agent {
		return e.Map(), nil
	}
	for _, wg := range v.WorkloadGroups() {
		r, err := newResource(wg.Name, wg.Spec)
		if err != nil {
			return nil, err
		}
		e.Set(wg.Name, r)
	}
	return e.Map(), nil
}

// addWorkloadGroups adds the WorkloadGroups to a generation being built.
func (g *generation) addWorkloadGroups(v *model.View) error {
	m, err := workloadGroupResources(v, g.kind.agentStreams)
	if err != nil {
		return err
	}
	g.types[WorkloadGroupType] = m
	return nil
}

// refreshWorkloadGroups brings the WorkloadGroups of n, a generation
// brought forward from g (update, rebase) with g's, to n's snapshot, and
// records in gd which changed. WorkloadGroups are outside model.Diff (no
// other resource reads them), so this runs on every such step; it costs a
// comparison of the namespace's groups.
func (g *generation) refreshWorkloadGroups(n *generation, gd *genDiff) error {
	ns := n.proxy.Workload().Namespace
	if !n.kind.agentStreams || model.SameWorkloadGroups(g.snap, n.snap, ns) {
		n.types[WorkloadGroupType] = g.types[WorkloadGroupType]
		gd.changed[WorkloadGroupType] = map[string]bool{}
		return nil
	}
	m, err := workloadGroupResources(model.NewView(n.snap, n.proxy.Workload()), true)
	if err != nil {
		return err
	}
	ch := map[string]bool{}
	for name, r := range m.All() {
		if o := g.get(WorkloadGroupType, name); o == nil || o.hash != r.hash {
			ch[name] = true
		}
	}
	if old := g.types[WorkloadGroupType]; old != nil {
		for name := range old.Keys() {
			if _, ok := m.Get(name); !ok {
				ch[name] = true
			}
		}
	}
	n.types[WorkloadGroupType] = m
	gd.changed[WorkloadGroupType] = ch
	return nil
}
