package model

import (
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/filestore"
)

// Delegate VirtualServices, as Istio merges them (pilot/pkg/model
// virtualservice_controller.go and virtualservice.go, Istio 1.31): a
// VirtualService without hosts is a delegate, never bound to a host
// itself; a root VirtualService's HTTP route with `delegate: {name,
// namespace}` is replaced by the delegate's HTTP routes, each merged with
// the root route (its match narrowed by the root's, its unset fields taken
// from the root's). A delegate route whose match conflicts with the root's
// is dropped, as is the root route when the delegate does not exist or is
// not exported to the root's namespace; each drop is a model problem.

// delegates indexes the delegate VirtualServices by namespace/name.
type delegates map[string]*filestore.Object

func delegateKey(ns, name string) string { return ns + "/" + name }

// isRoot reports whether any HTTP route of vs delegates.
func isRoot(vs *networking.VirtualService) bool {
	return slices.ContainsFunc(vs.GetHttp(), func(r *networking.HTTPRoute) bool { return r.GetDelegate() != nil })
}

// merge returns the root's spec with its delegating routes replaced, a
// copy (the Store's objects are never changed).
func (b *builder) merge(o *filestore.Object, root *networking.VirtualService, ds delegates) *networking.VirtualService {
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
		if exp := normaliseExportTo(dvs.GetExportTo(), do.Namespace); exp != nil && !slices.Contains(exp, "*") && !slices.Contains(exp, o.Namespace) {
			b.problem(o, "http[%d].delegate: VirtualService %s/%s is not exported to namespace %s; the route is ignored", i, ns, d.GetName(), o.Namespace)
			continue
		}
		sub := proto.Clone(dvs).(*networking.VirtualService)
		qualifyDestinations(sub, do.Namespace)
		r.Delegate = nil
		for j, dr := range sub.GetHttp() {
			merged, ok := mergeRoute(r, dr)
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
				d.Destination.Host = qualify(d.Destination.Host, ns)
			}
		}
		if r.GetMirror() != nil {
			r.Mirror.Host = qualify(r.Mirror.Host, ns)
		}
		for _, m := range r.GetMirrors() {
			if m.GetDestination() != nil {
				m.Destination.Host = qualify(m.Destination.Host, ns)
			}
		}
	}
}

// mergeRoute merges a delegate route into its root route; ok is false when
// their matches conflict.
func mergeRoute(root, d *networking.HTTPRoute) (*networking.HTTPRoute, bool) {
	matches, ok := mergeMatches(root.GetMatch(), d.GetMatch())
	if !ok {
		return nil, false
	}
	d.Match = matches
	switch {
	case d.Name == "":
		d.Name = root.Name
	case root.Name != "":
		d.Name = root.Name + "-" + d.Name
	}
	if d.Rewrite == nil {
		d.Rewrite = root.Rewrite
	}
	if d.DirectResponse == nil {
		d.DirectResponse = root.DirectResponse
	}
	if d.Timeout == nil {
		d.Timeout = root.Timeout
	}
	if d.Retries == nil {
		d.Retries = root.Retries
	}
	if d.Fault == nil {
		d.Fault = root.Fault
	}
	if d.Mirror == nil {
		d.Mirror = root.Mirror
	}
	if d.MirrorPercentage == nil {
		d.MirrorPercentage = root.MirrorPercentage
	}
	if d.CorsPolicy == nil {
		d.CorsPolicy = root.CorsPolicy
	}
	if d.Mirrors == nil {
		d.Mirrors = root.Mirrors
	}
	if d.Headers == nil {
		d.Headers = root.Headers
	}
	return d, true
}

// mergeMatches narrows each delegate match by every root match it does not
// conflict with; ok is false when a delegate match fits no root match.
func mergeMatches(root, d []*networking.HTTPMatchRequest) ([]*networking.HTTPMatchRequest, bool) {
	if len(root) == 0 {
		return d, true
	}
	if len(d) == 0 {
		return root, true
	}
	var out []*networking.HTTPMatchRequest
	for _, dm := range d {
		found := false
		for _, rm := range root {
			if matchConflict(rm, dm) {
				continue
			}
			out = append(out, mergeMatch(rm, dm))
			found = true
		}
		if !found {
			return nil, false
		}
	}
	return out, len(out) > 0
}

func mergeMatch(root, d *networking.HTTPMatchRequest) *networking.HTTPMatchRequest {
	out := proto.Clone(d).(*networking.HTTPMatchRequest)
	switch {
	case out.Name == "":
		out.Name = root.Name
	case root.Name != "":
		out.Name = root.Name + "-" + out.Name
	}
	if out.Uri == nil {
		out.Uri = root.Uri
	}
	if out.Scheme == nil {
		out.Scheme = root.Scheme
	}
	if out.Method == nil {
		out.Method = root.Method
	}
	if out.Authority == nil {
		out.Authority = root.Authority
	}
	out.Headers = mergedMap(root.Headers, d.Headers)
	out.WithoutHeaders = mergedMap(root.WithoutHeaders, d.WithoutHeaders)
	out.QueryParams = mergedMap(root.QueryParams, d.QueryParams)
	if out.Port == 0 {
		out.Port = root.Port
	}
	out.SourceLabels = mergedMap(root.SourceLabels, d.SourceLabels)
	if out.SourceNamespace == "" {
		out.SourceNamespace = root.SourceNamespace
	}
	if len(out.Gateways) == 0 {
		out.Gateways = root.Gateways
	}
	if out.StatPrefix == "" {
		out.StatPrefix = root.StatPrefix
	}
	return out
}

// mergedMap is root's entries overridden by d's; nil when both are empty.
func mergedMap[V any](root, d map[string]V) map[string]V {
	if len(root) == 0 && len(d) == 0 {
		return nil
	}
	out := maps.Clone(root)
	if out == nil {
		out = make(map[string]V, len(d))
	}
	maps.Copy(out, d)
	return out
}

// matchConflict reports whether a delegate match asks for something the
// root match excludes.
func matchConflict(root, d *networking.HTTPMatchRequest) bool {
	roots := []*networking.StringMatch{root.GetUri(), root.GetScheme(), root.GetMethod(), root.GetAuthority()}
	leaves := []*networking.StringMatch{d.GetUri(), d.GetScheme(), d.GetMethod(), d.GetAuthority()}
	for i := range roots {
		if stringMatchConflict(roots[i], leaves[i]) {
			return true
		}
	}
	for k, v := range d.GetHeaders() {
		if stringMatchConflict(root.GetHeaders()[k], v) {
			return true
		}
	}
	for k, v := range d.GetWithoutHeaders() {
		if stringMatchConflict(root.GetWithoutHeaders()[k], v) {
			return true
		}
	}
	for k, v := range d.GetQueryParams() {
		if stringMatchConflict(root.GetQueryParams()[k], v) {
			return true
		}
	}
	if root.GetIgnoreUriCase() != d.GetIgnoreUriCase() {
		return true
	}
	if root.GetPort() > 0 && d.GetPort() > 0 && root.GetPort() != d.GetPort() {
		return true
	}
	if root.GetSourceNamespace() != "" && d.GetSourceNamespace() != root.GetSourceNamespace() {
		return true
	}
	for k, v := range d.GetSourceLabels() {
		if rv, ok := root.GetSourceLabels()[k]; ok && rv != v {
			return true
		}
	}
	if len(root.GetGateways()) > 0 && len(d.GetGateways()) > 0 {
		for _, g := range d.GetGateways() {
			if !slices.Contains(root.GetGateways(), g) {
				return true
			}
		}
	}
	return false
}

// stringMatchConflict reports whether leaf can match what root cannot: a
// leaf must be as narrow as the root (an exact or longer prefix within a
// prefix, the same exact value); regexes combine with nothing.
func stringMatchConflict(root, leaf *networking.StringMatch) bool {
	if root == nil || leaf == nil {
		return false
	}
	if root.GetRegex() != "" && (leaf.GetRegex() != "" || leaf.GetPrefix() != "" || leaf.GetExact() != "") {
		return true
	}
	if leaf.GetRegex() != "" && (root.GetRegex() != "" || root.GetPrefix() != "" || root.GetExact() != "") {
		return true
	}
	if exact := root.GetExact(); exact != "" {
		return leaf.GetPrefix() != "" || leaf.GetExact() != exact
	}
	if prefix := root.GetPrefix(); prefix != "" {
		if leaf.GetPrefix() != "" {
			return !strings.HasPrefix(leaf.GetPrefix(), prefix)
		}
		if leaf.GetExact() != "" {
			return !strings.HasPrefix(leaf.GetExact(), prefix)
		}
	}
	return true
}
