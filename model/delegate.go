package model

import (
	"slices"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/store"
)

// Delegate VirtualServices, as Istio merges them (pilot/pkg/model
// virtualservice_controller.go and virtualservice.go, Istio 1.31): a
// VirtualService without hosts is a delegate, never bound to a host
// itself; a root VirtualService's HTTP route with `delegate: {name,
// namespace}` is replaced by the delegate's HTTP routes, each merged with
// the root route (its match narrowed by the root's, its unset fields taken
// from the root's). A delegate route whose match conflicts with the root's
// is dropped, as is the root route when the delegate does not exist or is
// not exported to the root's namespace. Each drop is a warning of the
// analysis (model/analysis: IST0101, VM2005, VM2006) and a model problem.

// delegates indexes the delegate VirtualServices by namespace/name.
type delegates map[string]*store.Object

func delegateKey(ns, name string) string { return ns + "/" + name }

// isRoot reports whether any HTTP route of vs delegates.
func isRoot(vs *networking.VirtualService) bool {
	return slices.ContainsFunc(vs.GetHttp(), func(r *networking.HTTPRoute) bool { return r.GetDelegate() != nil })
}

// DelegateExported reports whether the delegate VirtualService do is
// exported to a root VirtualService's namespace rootNS (its exportTo, else
// the mesh's default for VirtualServices): otherwise the root's route is
// dropped, as Istio drops it. "~" exports it nowhere.
func DelegateExported(do *store.Object, rootNS string, mesh Mesh) bool {
	vs, _ := do.Spec.(*networking.VirtualService)
	return Visible(normaliseExportTo(exportTo(vs.GetExportTo(), mesh.ExportTo.VirtualServices), do.Namespace), rootNS)
}

// merge returns the root's spec with its delegating routes replaced, a
// copy (the Store's objects are never changed).
func (b *builder) merge(o *store.Object, root *networking.VirtualService, ds delegates) *networking.VirtualService {
	out := proto.Clone(root).(*networking.VirtualService)
	var routes []*networking.HTTPRoute
	for i, r := range out.GetHttp() {
		d := r.GetDelegate()
		if d == nil {
			routes = append(routes, r)
			continue
		}
		ns := d.GetNamespace()
		if ns == "" {
			ns = o.Namespace
		}
		do := ds[delegateKey(ns, d.GetName())]
		if do == nil {
			b.problem(o, "http[%d].delegate: VirtualService %s/%s not found (a delegate has no hosts); the route is ignored", i, ns, d.GetName())
			continue
		}
		dvs := do.Spec.(*networking.VirtualService)
		if !DelegateExported(do, o.Namespace, b.s.Mesh) {
			b.problem(o, "http[%d].delegate: VirtualService %s/%s is not exported to namespace %s; the route is ignored", i, ns, d.GetName(), o.Namespace)
			continue
		}
		sub := proto.Clone(dvs).(*networking.VirtualService)
		qualifyDestinations(sub, do.Namespace)
		r.Delegate = nil
		for j, dr := range sub.GetHttp() {
			merged, ok := MergeDelegateRoute(r, dr)
			if !ok {
				b.problem(o, "http[%d].delegate: route %d of %s/%s matches nothing the root route matches; it is ignored", i, j, ns, d.GetName())
				continue
			}
			routes = append(routes, merged)
		}
	}
	out.Http = routes
	return out
}

// qualifyDestinations makes a delegate's destination hosts fully
// qualified in the delegate's own namespace, as Istio resolves them before
// merging.
func qualifyDestinations(vs *networking.VirtualService, ns string) {
	for _, r := range vs.GetHttp() {
		for _, d := range r.GetRoute() {
			if d.GetDestination() != nil {
				d.Destination.Host = QualifyHost(d.Destination.Host, ns)
			}
		}
		if r.GetMirror() != nil {
			r.Mirror.Host = QualifyHost(r.Mirror.Host, ns)
		}
		for _, m := range r.GetMirrors() {
			if m.GetDestination() != nil {
				m.Destination.Host = QualifyHost(m.Destination.Host, ns)
			}
		}
	}
}
