// Package mcptypes maps Istio's config kinds to the type URLs and the
// resource encoding of config over xDS (MCP over xDS), as Istio 1.31's
// DiscoveryServer serves them with its "api" generator
// (pilot/pkg/networking/apigen) and as istiod's configSources client
// (pkg/adsc) requests them.
//
// A type URL is the kind's group/version/kind, e.g.
// networking.istio.io/v1/VirtualService (Istio's
// config.GroupVersionKind.String()). Each resource of a response is an
// Any of type ResourceTypeURL holding an istio.mcp.v1alpha1.Resource: its
// metadata name is "namespace/name", its labels, annotations and version
// are the object's, and its body is an Any of the kind's istio.io/api spec
// (type.googleapis.com/istio.networking.v1alpha3.VirtualService, …).
//
// It is a leaf both sides share: the client (a source of the Store) and
// the server (vmesh's xDS port). Kinds are plain strings, the names
// store.Kind gives them.
package mcptypes

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// ResourceTypeURL is the Any type of every resource a config type's
// response carries: Istio's MCP Resource envelope.
const ResourceTypeURL = "type.googleapis.com/istio.mcp.v1alpha1.Resource"

// GeneratorMetadata is the node metadata key and value istiod's
// configSources client sends (GENERATOR: api): Istio's DiscoveryServer
// then answers every type URL with its "api" generator.
const (
	GeneratorMetadataKey = "GENERATOR"
	GeneratorAPI         = "api"
)

// Type is one Istio config kind as MCP over xDS carries it.
type Type struct {
	// Kind is the kind's name (store.Kind), e.g. "VirtualService".
	Kind string
	// Group is the kind's API group, e.g. "networking.istio.io".
	Group string
	// Version is the version Istio 1.31 serves and requests
	// (collections.Pilot): "v1" for every kind here.
	Version string
	// Aliases are the other versions of the kind a server may name in a
	// type URL (v1alpha3, v1beta1): the same spec message.
	Aliases []string
	newSpec func() proto.Message
}

// URL returns the type URL of the kind at its Version, e.g.
// networking.istio.io/v1/VirtualService.
func (t Type) URL() string { return t.Group + "/" + t.Version + "/" + t.Kind }

// APIVersion returns the kind's apiVersion at its Version, e.g.
// networking.istio.io/v1.
func (t Type) APIVersion() string { return t.Group + "/" + t.Version }

// NewSpec returns an empty spec message of the kind (an istio.io/api
// message, e.g. *v1alpha3.VirtualService).
func (t Type) NewSpec() proto.Message { return t.newSpec() }

// SpecTypeURL returns the Any type URL of the kind's spec, e.g.
// type.googleapis.com/istio.networking.v1alpha3.VirtualService.
func (t Type) SpecTypeURL() string {
	return "type.googleapis.com/" + string(t.newSpec().ProtoReflect().Descriptor().FullName())
}

var (
	networkingAliases = []string{"v1beta1", "v1alpha3"}
	securityAliases   = []string{"v1beta1"}
	telemetryAliases  = []string{"v1alpha1"}
)

// types lists the kinds vmesh reads and serves over MCP, in store.Kinds'
// order: Istio's own config kinds (the Kubernetes Gateway API's are not in
// Istio's MCP collection, collections.Pilot).
func types() []Type {
	return []Type{
		{Kind: "ServiceEntry", Group: "networking.istio.io", Version: "v1", Aliases: networkingAliases, newSpec: func() proto.Message { return &networking.ServiceEntry{} }},
		{Kind: "WorkloadEntry", Group: "networking.istio.io", Version: "v1", Aliases: networkingAliases, newSpec: func() proto.Message { return &networking.WorkloadEntry{} }},
		{Kind: "WorkloadGroup", Group: "networking.istio.io", Version: "v1", Aliases: networkingAliases, newSpec: func() proto.Message { return &networking.WorkloadGroup{} }},
		{Kind: "VirtualService", Group: "networking.istio.io", Version: "v1", Aliases: networkingAliases, newSpec: func() proto.Message { return &networking.VirtualService{} }},
		{Kind: "DestinationRule", Group: "networking.istio.io", Version: "v1", Aliases: networkingAliases, newSpec: func() proto.Message { return &networking.DestinationRule{} }},
		{Kind: "Sidecar", Group: "networking.istio.io", Version: "v1", Aliases: networkingAliases, newSpec: func() proto.Message { return &networking.Sidecar{} }},
		{Kind: "Gateway", Group: "networking.istio.io", Version: "v1", Aliases: networkingAliases, newSpec: func() proto.Message { return &networking.Gateway{} }},
		{Kind: "PeerAuthentication", Group: "security.istio.io", Version: "v1", Aliases: securityAliases, newSpec: func() proto.Message { return &security.PeerAuthentication{} }},
		{Kind: "AuthorizationPolicy", Group: "security.istio.io", Version: "v1", Aliases: securityAliases, newSpec: func() proto.Message { return &security.AuthorizationPolicy{} }},
		{Kind: "RequestAuthentication", Group: "security.istio.io", Version: "v1", Aliases: securityAliases, newSpec: func() proto.Message { return &security.RequestAuthentication{} }},
		{Kind: "Telemetry", Group: "telemetry.istio.io", Version: "v1", Aliases: telemetryAliases, newSpec: func() proto.Message { return &telemetry.Telemetry{} }},
	}
}

// Types returns every kind vmesh carries over MCP, in a fixed order.
func Types() []Type { return types() }

// ByKind returns the type of a kind name (store.Kind), e.g.
// "VirtualService".
func ByKind(kind string) (Type, bool) {
	for _, t := range types() {
		if t.Kind == kind {
			return t, true
		}
	}
	return Type{}, false
}

// ByURL returns the type a type URL names, at its Version or one of its
// Aliases, and the version the URL names.
func ByURL(url string) (t Type, version string, ok bool) {
	parts := strings.Split(url, "/")
	if len(parts) != 3 {
		return Type{}, "", false
	}
	for _, t := range types() {
		if t.Group == parts[0] && t.Kind == parts[2] && (t.Version == parts[1] || slices.Contains(t.Aliases, parts[1])) {
			return t, parts[1], true
		}
	}
	return Type{}, "", false
}

// Resource is one decoded MCP resource: an object's metadata and spec.
type Resource struct {
	Namespace   string
	Name        string
	Labels      map[string]string
	Annotations map[string]string
	// Version is the resource's own version (Istio: the object's
	// resourceVersion), "" when the server gives none.
	Version string
	// Created is the object's creation time, zero when not given.
	Created time.Time
	// Spec is the kind's spec message; nil for a resource without a
	// body, which Istio's apigen documents as an incremental delete.
	Spec proto.Message
}

// ResourceName returns the name MCP gives an object: "namespace/name".
func ResourceName(namespace, name string) string { return namespace + "/" + name }

// SplitName splits an MCP resource name "namespace/name".
func SplitName(name string) (namespace, object string, err error) {
	ns, n, ok := strings.Cut(name, "/")
	if !ok || n == "" || strings.Contains(n, "/") {
		return "", "", fmt.Errorf("resource name %q is not namespace/name", name)
	}
	return ns, n, nil
}

// Encode packs an object as the Any a response carries (ResourceTypeURL),
// as Istio's config.PilotConfigToResource does; spec must be the kind's
// message. It is Envelope then Pack: deterministic, equal resources give
// equal bytes.
func (t Type) Encode(r Resource) (*anypb.Any, error) {
	env, err := t.Envelope(r)
	if err != nil {
		return nil, err
	}
	a, err := Pack(env)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", t.Kind, ResourceName(r.Namespace, r.Name), err)
	}
	return a, nil
}

// Envelope returns an object as Istio's MCP resource: metadata name
// "namespace/name", its labels, annotations, version and create time, and
// the spec (which must be the kind's message) as the body, marshalled
// deterministically. Encode packs it; a server that versions a resource by
// its content (xds/mcp) hashes the envelope, sets Metadata.Version, then
// packs it.
func (t Type) Envelope(r Resource) (*mcp.Resource, error) {
	if r.Spec == nil || r.Spec.ProtoReflect().Descriptor() != t.newSpec().ProtoReflect().Descriptor() {
		return nil, fmt.Errorf("%s %s: spec is %T, not the kind's message", t.Kind, ResourceName(r.Namespace, r.Name), r.Spec)
	}
	body, err := marshalAny(r.Spec)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", t.Kind, ResourceName(r.Namespace, r.Name), err)
	}
	res := &mcp.Resource{
		Metadata: &mcp.Metadata{
			Name:        ResourceName(r.Namespace, r.Name),
			Version:     r.Version,
			Labels:      r.Labels,
			Annotations: r.Annotations,
		},
		Body: body,
	}
	if !r.Created.IsZero() {
		res.Metadata.CreateTime = timestamppb.New(r.Created)
	}
	return res, nil
}

// Pack marshals an MCP resource deterministically (map entries sorted) as
// the Any a response carries, of type ResourceTypeURL.
func Pack(res *mcp.Resource) (*anypb.Any, error) { return marshalAny(res) }

// marshalAny packs m with map entries (labels, annotations, a spec's maps)
// in key order: anypb.New does not, so equal objects could give other
// bytes.
func marshalAny(m proto.Message) (*anypb.Any, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &anypb.Any{TypeUrl: "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName()), Value: b}, nil
}

// Decode unpacks a resource of the type from the Any a response carries:
// an MCP Resource whose body is the kind's spec. It refuses another
// envelope, a body of another message, a name that is not
// namespace/name, and bytes that do not decode.
func (t Type) Decode(a *anypb.Any) (Resource, error) {
	if a.GetTypeUrl() != ResourceTypeURL {
		return Resource{}, fmt.Errorf("resource of type %q, want %s", a.GetTypeUrl(), ResourceTypeURL)
	}
	res := &mcp.Resource{}
	if err := proto.Unmarshal(a.GetValue(), res); err != nil {
		return Resource{}, fmt.Errorf("decoding the MCP resource: %w", err)
	}
	md := res.GetMetadata()
	ns, name, err := SplitName(md.GetName())
	if err != nil {
		return Resource{}, err
	}
	out := Resource{Namespace: ns, Name: name, Labels: md.GetLabels(), Annotations: md.GetAnnotations(), Version: md.GetVersion()}
	if md.GetCreateTime() != nil {
		out.Created = md.GetCreateTime().AsTime()
	}
	body := res.GetBody()
	if body == nil {
		return out, nil
	}
	if want := t.SpecTypeURL(); body.GetTypeUrl() != want {
		return Resource{}, fmt.Errorf("%s: body of type %q, want %s", md.GetName(), body.GetTypeUrl(), want)
	}
	spec := t.newSpec()
	if err := proto.Unmarshal(body.GetValue(), spec); err != nil {
		return Resource{}, fmt.Errorf("%s: decoding the %s body: %w", md.GetName(), t.Kind, err)
	}
	out.Spec = spec
	return out, nil
}
