// Package store is the memory config Store that every source writes and
// the model reads: the config objects (Kind, Key, Object with its Origin
// and field lines), the sources' identity and status (Source, SourceClass,
// SourceStatus, ConfigError with the stable warning codes), and the Store
// itself, which picks a winner per key, counts revisions and publishes
// immutable Snapshots. It imports no source: the directory and git
// sources (filestore), the registries and the other writers sit beside
// each other over it.
package store

import (
	"fmt"
	"maps"
	"strings"

	"google.golang.org/protobuf/proto"
)

// Kind names an Istio config kind, e.g. "ServiceEntry".
type Kind string

// The kinds vmesh understands. Their specs are istio.io/api messages.
const (
	KindServiceEntry        Kind = "ServiceEntry"
	KindWorkloadEntry       Kind = "WorkloadEntry"
	KindWorkloadGroup       Kind = "WorkloadGroup"
	KindVirtualService      Kind = "VirtualService"
	KindDestinationRule     Kind = "DestinationRule"
	KindSidecar             Kind = "Sidecar"
	KindGateway             Kind = "Gateway"
	KindPeerAuthentication  Kind = "PeerAuthentication"
	KindAuthorizationPolicy Kind = "AuthorizationPolicy"
	// KindRequestAuthentication is Istio's JWT authentication policy.
	KindRequestAuthentication Kind = "RequestAuthentication"
	// KindTelemetry is Istio's Telemetry (telemetry.istio.io): access
	// logs, tracing and metrics of the workloads it selects.
	KindTelemetry Kind = "Telemetry"
	// KindGatewayClass and the kinds after it are the Kubernetes Gateway
	// API's (gateway.networking.k8s.io, package gatewayapi). Their specs
	// are *structpb.Struct: the spec as JSON, validated against the
	// kind's CRD and its defaults filled in.
	KindGatewayClass Kind = "GatewayClass"
	// KindKubernetesGateway is the Gateway API's Gateway (Istio's name
	// for it, since Istio's own Gateway is KindGateway).
	KindKubernetesGateway Kind = "KubernetesGateway"
	// KindHTTPRoute is the Gateway API's HTTPRoute.
	KindHTTPRoute Kind = "HTTPRoute"
	// KindGRPCRoute is the Gateway API's GRPCRoute.
	KindGRPCRoute Kind = "GRPCRoute"
	// KindTCPRoute is the Gateway API's TCPRoute.
	KindTCPRoute Kind = "TCPRoute"
	// KindTLSRoute is the Gateway API's TLSRoute.
	KindTLSRoute Kind = "TLSRoute"
	// KindReferenceGrant is the Gateway API's ReferenceGrant.
	KindReferenceGrant Kind = "ReferenceGrant"
)

// Kinds lists every supported kind in a fixed order.
var Kinds = []Kind{
	KindServiceEntry, KindWorkloadEntry, KindWorkloadGroup, KindVirtualService,
	KindDestinationRule, KindSidecar, KindGateway, KindPeerAuthentication, KindAuthorizationPolicy,
	KindRequestAuthentication, KindTelemetry, KindGatewayClass, KindKubernetesGateway, KindHTTPRoute, KindGRPCRoute,
	KindTCPRoute, KindTLSRoute, KindReferenceGrant,
}

// KindJWKS is not a config kind users write: it is the kind of the
// objects the JWKS fetcher (writers/jwks) puts in the Store, one per
// RequestAuthentication jwksUri, named by the URI, whose spec is a
// wrapperspb.StringValue holding the JSON Web Key Set fetched from it. The
// decoder does not know it, so no file can define one.
const KindJWKS Kind = "JWKS"

// JWKSErrorAnnotation on a KindJWKS object says why its URI could not be
// fetched; the object's value is then empty, and the JWT filter gets a key
// set no token verifies against (fail closed, as Istio does).
const JWKSErrorAnnotation = "vmesh.io/jwks-error"

// KindMeshConfig is the kind of the one MeshConfig object a config source
// holds when its root has a MeshConfigFile: Istio's MeshConfig
// (*meshv1alpha1.MeshConfig, Istio's defaults filled in), applied with
// the rest of the source's files, in the same snapshot (a git commit's
// mesh settings change with the commit's routes).
const KindMeshConfig Kind = "MeshConfig"

// MeshConfigKey is the key of a source's MeshConfig object.
var MeshConfigKey = Key{Kind: KindMeshConfig, Name: "mesh"}

// Key identifies one object in the Store.
type Key struct {
	Kind      Kind
	Namespace string
	Name      string
}

// String renders the key as kind/namespace/name.
func (k Key) String() string { return fmt.Sprintf("%s/%s/%s", k.Kind, k.Namespace, k.Name) }

// Origin says where an object came from.
type Origin struct {
	// Source is the name of the source that produced the object
	// (e.g. "dir:/etc/vmesh", "git:https://...", "registry:consul").
	Source string `json:"source"`
	// File and Line locate the object's document, for file and git sources.
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	// Commit is the full SHA of the git commit the object was read at, for
	// git sources: the first applied commit in which its file had its
	// current content.
	Commit string `json:"commit,omitempty"`
	// Registry names the registry entry that generated the object, for registries.
	Registry string `json:"registry,omitempty"`
	// Version is the version an MCP server gave the object (its
	// resource's metadata version), for config over xDS; File then names
	// the resource (type URL and namespace/name) and Line is 0.
	Version string `json:"version,omitempty"`
}

// String renders the origin for messages, e.g. "dir:/x (a.yaml:3)".
func (o Origin) String() string {
	s := o.Source
	switch {
	case o.File != "" && o.Commit != "":
		s += fmt.Sprintf(" (%s:%d @ %.12s)", o.File, o.Line, o.Commit)
	case o.File != "" && o.Line == 0 && o.Version != "":
		s += fmt.Sprintf(" (%s @ %s)", o.File, o.Version)
	case o.File != "" && o.Line == 0:
		s += fmt.Sprintf(" (%s)", o.File)
	case o.File != "":
		s += fmt.Sprintf(" (%s:%d)", o.File, o.Line)
	case o.Registry != "":
		s += fmt.Sprintf(" (%s)", o.Registry)
	}
	return s
}

// Object is one config object: metadata plus an istio.io/api spec.
// Objects handed to the Store must not be modified afterwards.
type Object struct {
	Key
	// APIVersion is the group/version the object was written in.
	APIVersion  string            `json:"apiVersion"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Spec is the istio.io/api message for the kind, e.g. *v1alpha3.ServiceEntry.
	Spec proto.Message `json:"-"`
	// Healthy is the WorkloadEntry "Healthy" condition: nil when unknown.
	Healthy *bool `json:"healthy,omitempty"`
	// HealthReason is why the agent reports it unhealthy (its probe's
	// failure), when it said.
	HealthReason string `json:"healthReason,omitempty"`
	// Origin says where the object came from.
	Origin Origin `json:"origin"`
	// lines are the lines of the fields the analysis points at (hosts,
	// subsets, gateways, selectors, delegates), by path inside spec: the
	// decoder sets them (SetFieldLines).
	lines map[string]int
}

// SetFieldLines records the lines of fields inside spec, by path (e.g.
// "http[0].route[1].destination.subset"), for FieldLine. The decoder calls
// it before the object is handed to the Store; lines is kept, not copied.
func (o *Object) SetFieldLines(lines map[string]int) { o.lines = lines }

// FieldLines returns the lines SetFieldLines recorded (nil when none);
// the map is the object's own and must not be changed.
func (o *Object) FieldLines() map[string]int { return o.lines }

// FieldLine returns the line of a field path inside spec (or of its
// nearest parent the decoder kept), else the object's own line.
func (o *Object) FieldLine(path string) int {
	for p := path; p != ""; {
		if l, ok := o.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return o.Origin.Line
}

// sameContent reports whether two objects carry the same config, ignoring
// their origin.
func sameContent(a, b *Object) bool {
	if a.Key != b.Key || a.APIVersion != b.APIVersion ||
		!maps.Equal(a.Labels, b.Labels) || !maps.Equal(a.Annotations, b.Annotations) {
		return false
	}
	if (a.Healthy == nil) != (b.Healthy == nil) || (a.Healthy != nil && *a.Healthy != *b.Healthy) || a.HealthReason != b.HealthReason {
		return false
	}
	return proto.Equal(a.Spec, b.Spec)
}
