package model

import (
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// MergeDelegateRoute merges a delegate VirtualService's HTTP route d into
// the root route that delegates to it, as Istio 1.31 merges them
// (pilot/pkg/model/virtualservice.go): d's matches narrowed by the root's,
// its unset fields taken from the root route. ok is false when a match of d
// fits no match of the root's: Istio then drops the delegate route. d is
// changed and returned; pass a copy.
func MergeDelegateRoute(root, d *networking.HTTPRoute) (*networking.HTTPRoute, bool) {
	return mergeRoute(root, d)
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
