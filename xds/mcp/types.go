// Package mcp serves the Store's config over xDS as Istio's config types
// (MCP over xDS, as istiod's "api" generator serves them and as istiod's
// configSources client, pkg/adsc, reads them): one type URL per kind,
// "networking.istio.io/v1/VirtualService" and the like, each resource an
// istio.mcp.v1alpha1.Resource named "namespace/name" whose body is the
// kind's istio.io/api message. types.go is the table of type URLs and the
// encoding; server.go the state-of-the-world stream loop and the clients'
// sync status.
package mcp

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"

	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpv1alpha1 "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
)

// ResourceType is the type URL of every resource of an MCP response: the
// envelope, istio.mcp.v1alpha1.Resource.
const ResourceType = "type.googleapis.com/istio.mcp.v1alpha1.Resource"

// MeshConfigType is the type URL istiod's configSources client asks for
// first (Istio's gvk.MeshConfig). vmesh answers it with no resource: the
// mesh settings are the reader's own.
const MeshConfigType = "core/v1alpha1/MeshConfig"

// kindType is one row of the table: a Store kind, its Istio group and the
// versions a client may name it by (the first is the one Istio's
// collections use, and its type URL the canonical one).
type kindType struct {
	kind     store.Kind
	group    string
	versions []string
	newSpec  func() proto.Message
}

// table lists the kinds served, in store.Kinds order. The Gateway API's
// kinds are not: Istio carries them over MCP as Kubernetes objects, not
// istio.io/api messages, and its configSources client does not ask for
// them.
var table = []kindType{
	{store.KindServiceEntry, networkingGroup, networkingVersions, func() proto.Message { return &networking.ServiceEntry{} }},
	{store.KindWorkloadEntry, networkingGroup, networkingVersions, func() proto.Message { return &networking.WorkloadEntry{} }},
	{store.KindWorkloadGroup, networkingGroup, networkingVersions, func() proto.Message { return &networking.WorkloadGroup{} }},
	{store.KindVirtualService, networkingGroup, networkingVersions, func() proto.Message { return &networking.VirtualService{} }},
	{store.KindDestinationRule, networkingGroup, networkingVersions, func() proto.Message { return &networking.DestinationRule{} }},
	{store.KindSidecar, networkingGroup, networkingVersions, func() proto.Message { return &networking.Sidecar{} }},
	{store.KindGateway, networkingGroup, networkingVersions, func() proto.Message { return &networking.Gateway{} }},
	{store.KindPeerAuthentication, securityGroup, securityVersions, func() proto.Message { return &security.PeerAuthentication{} }},
	{store.KindAuthorizationPolicy, securityGroup, securityVersions, func() proto.Message { return &security.AuthorizationPolicy{} }},
	{store.KindRequestAuthentication, securityGroup, securityVersions, func() proto.Message { return &security.RequestAuthentication{} }},
}

const (
	networkingGroup = "networking.istio.io"
	securityGroup   = "security.istio.io"
)

var (
	networkingVersions = []string{"v1", "v1beta1", "v1alpha3"}
	securityVersions   = []string{"v1", "v1beta1"}
)

// Kinds returns the Store kinds served over MCP, in store.Kinds order.
func Kinds() []store.Kind {
	out := make([]store.Kind, len(table))
	for i, t := range table {
		out[i] = t.kind
	}
	return out
}

// TypeURL returns the canonical type URL of a kind (the version Istio's
// collections use: networking.istio.io/v1/VirtualService), and false for a
// kind not served over MCP.
func TypeURL(k store.Kind) (string, bool) {
	for _, t := range table {
		if t.kind == k {
			return t.group + "/" + t.versions[0] + "/" + string(k), true
		}
	}
	return "", false
}

// KindOf returns the Store kind a type URL names, by any version Istio
// accepts for it (networking.istio.io/v1alpha3/VirtualService too), and
// false for any other type URL.
func KindOf(typeURL string) (store.Kind, bool) {
	group, version, kind, ok := split(typeURL)
	if !ok {
		return "", false
	}
	for _, t := range table {
		if string(t.kind) == kind && t.group == group {
			for _, v := range t.versions {
				if v == version {
					return t.kind, true
				}
			}
		}
	}
	return "", false
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

// Encode returns an object as Istio's MCP resource: metadata name
// "namespace/name", its labels and annotations, a version that changes
// whenever the resource does (a hash of its content: vmesh keeps no
// per-object resource version) and the spec as the body. No create time:
// vmesh keeps none.
func Encode(o *store.Object) (*mcpv1alpha1.Resource, error) {
	if _, ok := TypeURL(o.Kind); !ok {
		return nil, fmt.Errorf("%s: not served over MCP", o.Key)
	}
	body, err := marshalAny(o.Spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Key, err)
	}
	r := &mcpv1alpha1.Resource{
		Metadata: &mcpv1alpha1.Metadata{Name: o.Namespace + "/" + o.Name, Labels: maps.Clone(o.Labels), Annotations: maps.Clone(o.Annotations)},
		Body:     body,
	}
	b, err := deterministic.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Key, err)
	}
	sum := sha256.Sum256(b)
	r.Metadata.Version = hex.EncodeToString(sum[:8])
	return r, nil
}

// Decode returns the Store object an MCP resource of a type URL carries:
// its kind, namespace and name, labels, annotations and spec. The origin
// is the caller's to set.
func Decode(typeURL string, r *mcpv1alpha1.Resource) (*store.Object, error) {
	kind, ok := KindOf(typeURL)
	if !ok {
		return nil, fmt.Errorf("type %s: not an Istio config type vmesh reads", typeURL)
	}
	name := r.GetMetadata().GetName()
	ns, n, ok := strings.Cut(name, "/")
	if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
		return nil, fmt.Errorf("%s %q: the name is not namespace/name", kind, name)
	}
	var t kindType
	for _, row := range table {
		if row.kind == kind {
			t = row
		}
	}
	spec := t.newSpec()
	if r.GetBody() == nil {
		return nil, fmt.Errorf("%s %s: no body", kind, name)
	}
	if err := r.GetBody().UnmarshalTo(spec); err != nil {
		return nil, fmt.Errorf("%s %s: body: %w", kind, name, err)
	}
	return &store.Object{
		Key:        store.Key{Kind: kind, Namespace: ns, Name: n},
		APIVersion: t.group + "/" + t.versions[0],
		Labels:     r.GetMetadata().GetLabels(), Annotations: r.GetMetadata().GetAnnotations(),
		Spec: spec,
	}, nil
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// marshalAny packs m deterministically, so equal specs give equal bytes
// (anypb.New does not sort maps).
func marshalAny(m proto.Message) (*anypb.Any, error) {
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &anypb.Any{TypeUrl: "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName()), Value: b}, nil
}

// compareObjects orders objects by namespace, then name.
func compareObjects(a, b *store.Object) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}
