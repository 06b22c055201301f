// Package mcp serves the Store's config over xDS as Istio's config types
// (MCP over xDS, as istiod's "api" generator serves them and as istiod's
// configSources client, pkg/adsc, reads them): one type URL per kind,
// "networking.istio.io/v1/VirtualService" and the like, each resource an
// istio.mcp.v1alpha1.Resource named "namespace/name" whose body is the
// kind's istio.io/api message. types.go maps Store kinds to type URLs
// (through internal/mcptypes, which vmesh's MCP client shares) and encodes;
// server.go is the state-of-the-world stream loop and the clients' sync
// status.
package mcp

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"

	"github.com/vmesh/vmesh/internal/mcptypes"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/types/known/anypb"
)

// ResourceType is the type URL of every resource of an MCP response: the
// envelope, istio.mcp.v1alpha1.Resource.
const ResourceType = mcptypes.ResourceTypeURL

// MeshConfigType is the type URL istiod's configSources client asks for
// first (Istio's gvk.MeshConfig). vmesh answers it with no resource: the
// mesh settings are the reader's own.
const MeshConfigType = "core/v1alpha1/MeshConfig"

// Kinds returns the Store kinds served over MCP (internal/mcptypes, the
// table vmesh's MCP client reads by too), in store.Kinds order. The
// Gateway API's kinds are not: Istio carries them over MCP as Kubernetes
// objects, not istio.io/api messages, and its configSources client does
// not ask for them.
func Kinds() []store.Kind {
	var out []store.Kind
	for _, t := range mcptypes.Types() {
		out = append(out, store.Kind(t.Kind))
	}
	return out
}

// TypeURL returns the canonical type URL of a kind (the version Istio's
// collections use: networking.istio.io/v1/VirtualService), and false for a
// kind not served over MCP.
func TypeURL(k store.Kind) (string, bool) {
	t, ok := mcptypes.ByKind(string(k))
	return t.URL(), ok
}

// KindOf returns the Store kind a type URL names, by any version Istio
// accepts for it (networking.istio.io/v1alpha3/VirtualService too), and
// false for any other type URL.
func KindOf(typeURL string) (store.Kind, bool) {
	t, _, ok := mcptypes.ByURL(typeURL)
	return store.Kind(t.Kind), ok
}

// IsConfigType reports whether a type URL is one of Istio's config type
// URLs (group/version/kind, as Istio's apigen serves them), served or not,
// rather than an xDS resource type (type.googleapis.com/...).
func IsConfigType(typeURL string) bool {
	_, _, _, ok := split(typeURL)
	return ok
}

func split(typeURL string) (group, version, kind string, ok bool) {
	if strings.HasPrefix(typeURL, "type.googleapis.com/") {
		return "", "", "", false
	}
	parts := strings.Split(typeURL, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// Encode returns an object as the Any of an MCP response, by
// internal/mcptypes' encoder (the one vmesh's MCP client and its tests
// use; deterministic, so equal objects give equal bytes, which is how a
// push tells a type unchanged): metadata name "namespace/name", its labels
// and annotations, a version that changes whenever the resource does (a
// hash of the rest of the resource: vmesh keeps no per-object resource
// version) and the spec as the body. No create time: vmesh keeps none.
func Encode(o *store.Object) (*anypb.Any, error) {
	t, ok := mcptypes.ByKind(string(o.Kind))
	if !ok {
		return nil, fmt.Errorf("%s: not served over MCP", o.Key)
	}
	env, err := t.Envelope(mcptypes.Resource{Namespace: o.Namespace, Name: o.Name, Labels: maps.Clone(o.Labels), Annotations: maps.Clone(o.Annotations), Spec: o.Spec})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Key, err)
	}
	unversioned, err := mcptypes.Pack(env)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Key, err)
	}
	sum := sha256.Sum256(unversioned.GetValue())
	env.Metadata.Version = hex.EncodeToString(sum[:8])
	a, err := mcptypes.Pack(env)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Key, err)
	}
	return a, nil
}

// Decode returns the Store object an MCP resource (the Any of a response)
// of a type URL carries, decoded by mcptypes: its kind, namespace and name,
// labels, annotations and spec. The origin is the caller's to set.
func Decode(typeURL string, a *anypb.Any) (*store.Object, error) {
	t, _, ok := mcptypes.ByURL(typeURL)
	if !ok {
		return nil, fmt.Errorf("type %s: not an Istio config type vmesh reads", typeURL)
	}
	r, err := t.Decode(a)
	if err != nil {
		return nil, err
	}
	if r.Spec == nil {
		return nil, fmt.Errorf("%s %s: no body", t.Kind, mcptypes.ResourceName(r.Namespace, r.Name))
	}
	return &store.Object{
		Key:        store.Key{Kind: store.Kind(t.Kind), Namespace: r.Namespace, Name: r.Name},
		APIVersion: t.APIVersion(),
		Labels:     r.Labels, Annotations: r.Annotations,
		Spec: r.Spec,
	}, nil
}

// compareObjects orders objects by namespace, then name.
func compareObjects(a, b *store.Object) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}
