package model

import (
	"slices"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/store"
)

// WorkloadGroup is a WorkloadGroup of the config: the template and the
// readiness probe of the VMs that register under it. The model serves it
// to the VMs' agents (their probe comes from it); it makes no endpoints by
// itself.
type WorkloadGroup struct {
	Namespace, Name string
	Spec            *networking.WorkloadGroup
}

// addWorkloadGroups adds the snapshot's WorkloadGroups, sorted by
// namespace and name (the Store's order).
func (b *builder) addWorkloadGroups(objs []*store.Object) {
	for _, o := range objs {
		spec, ok := o.Spec.(*networking.WorkloadGroup)
		if !ok {
			continue
		}
		wg := &WorkloadGroup{Namespace: o.Namespace, Name: o.Name, Spec: spec}
		b.s.WorkloadGroups = append(b.s.WorkloadGroups, wg)
		b.s.wgByNS[o.Namespace] = append(b.s.wgByNS[o.Namespace], wg)
	}
}

// WorkloadGroupsIn returns the WorkloadGroups of a namespace, sorted by
// name. The slice is shared: do not modify it.
func (s *Snapshot) WorkloadGroupsIn(namespace string) []*WorkloadGroup { return s.wgByNS[namespace] }

// WorkloadGroups returns the WorkloadGroups of the proxy's namespace: the
// groups its agent may register under.
func (v *View) WorkloadGroups() []*WorkloadGroup { return v.snap.WorkloadGroupsIn(v.proxy.Namespace) }

// SameWorkloadGroups reports whether two snapshots hold the same
// WorkloadGroups in a namespace.
func SameWorkloadGroups(prev, next *Snapshot, namespace string) bool {
	return slices.EqualFunc(prev.WorkloadGroupsIn(namespace), next.WorkloadGroupsIn(namespace), sameWorkloadGroup)
}

func sameWorkloadGroup(a, b *WorkloadGroup) bool {
	return a == b || (a.Namespace == b.Namespace && a.Name == b.Name && (a.Spec == b.Spec || proto.Equal(a.Spec, b.Spec)))
}
