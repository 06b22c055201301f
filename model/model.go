// Package model builds the immutable service model that the xDS generators
// read: services with their ports, addresses and endpoints, the
// VirtualServices and DestinationRules bound to each host, and the Sidecar
// scopes that limit what a proxy sees. A Snapshot is built from a
// store.Snapshot by a pure function and never changes afterwards.
package model

import (
	"github.com/vmesh/vmesh/store"
	networking "istio.io/api/networking/v1alpha3"
)

// Resolution says how a client finds a service's endpoints. The values
// mirror ServiceEntry.resolution.
type Resolution int

// Resolutions, as in ServiceEntry.
const (
	ResolutionNone Resolution = iota
	ResolutionStatic
	ResolutionDNS
	ResolutionDNSRoundRobin
)

// String names the resolution as Istio does.
func (r Resolution) String() string {
	switch r {
	case ResolutionNone:
		return "NONE"
	case ResolutionStatic:
		return "STATIC"
	case ResolutionDNS:
		return "DNS"
	case ResolutionDNSRoundRobin:
		return "DNS_ROUND_ROBIN"
	}
	return "UNKNOWN"
}

// Snapshot is a point-in-time coherent model of the mesh. It is built once by
// Build and is never modified: readers use it without locks.
type Snapshot struct {
	// Revision is the Store revision the snapshot was built from.
	Revision int64
	// Commit is the short git commit of the config, or "".
	Commit string
	// Services holds one entry per (ServiceEntry namespace, host), sorted by
	// host, then namespace.
	Services []*Service
	// VirtualServices are sorted by namespace and name.
	VirtualServices []*VirtualService
	// DestinationRules are sorted by namespace and name.
	DestinationRules []*DestinationRule
	// Sidecars are sorted by namespace and name.
	Sidecars []*Sidecar
	// Gateways are sorted by namespace and name.
	Gateways []*Gateway
	// GatewayVirtualServices are the VirtualServices bound to a gateway
	// (gateways names one besides "mesh"), sorted by namespace and name.
	// One bound to the mesh too is also in VirtualServices.
	GatewayVirtualServices []*VirtualService
	// PeerAuthentications are sorted by namespace and name.
	PeerAuthentications []*PeerAuthentication
	// AuthorizationPolicies (ALLOW and DENY) are sorted by namespace and name.
	AuthorizationPolicies []*AuthorizationPolicy
	// WorkloadGroups are sorted by namespace and name.
	WorkloadGroups []*WorkloadGroup
	// RequestAuthentications are sorted by namespace and name.
	RequestAuthentications []*RequestAuthentication
	// Telemetries are sorted by namespace and name (those with targetRefs
	// left out).
	Telemetries []*Telemetry
	// Mesh holds the root namespace and trust domain the snapshot was built
	// with.
	Mesh Mesh
	// Problems lists config that was ignored while building, sorted.
	Problems []Problem

	// byHost maps a host to its services' range in Services (contiguous:
	// Services is sorted by host), so a snapshot that replaces services in
	// place (Rebuild) shares it.
	byHost     map[string]hostRange
	vsByHost   map[string][]*VirtualService
	drByHost   map[string][]*DestinationRule
	sidecarsNS map[string][]*Sidecar
	paByNS     map[string][]*PeerAuthentication
	apByNS     map[string][]*AuthorizationPolicy
	wgByNS     map[string][]*WorkloadGroup
	// baseMesh is the mesh BuildWith was given, before the config's own
	// MeshConfig (Rebuild starts from it again).
	baseMesh Mesh
	raByNS   map[string][]*RequestAuthentication
	tmByNS   map[string][]*Telemetry
	// jwks holds the key sets fetched for jwksUris, by URI.
	jwks map[string]JWKS

	// id tells this snapshot apart from others built from the same Store
	// revision; delta, when set, says what Rebuild changed from the
	// snapshot whose id it names (Compare then looks at no more).
	id    *snapshotID
	delta *rebuildDelta
	// source is the Store snapshot this one was built from: Rebuild reads
	// the earlier versions of changed WorkloadEntries from it.
	source *store.Snapshot
	// seIndex finds the ServiceEntries whose selector may match a
	// WorkloadEntry, and servicesOf each ServiceEntry's services (their
	// indexes in Services); both are shared by the snapshots Rebuild
	// makes without changing ServiceEntries.
	seIndex    *selectorIndex
	servicesOf map[store.Key][]int
	// sourceLabelKeys are the label keys any VirtualService's sourceLabels
	// name, sorted: the only labels a sidecar's outbound part reads.
	sourceLabelKeys []string
	// localityMatters: a locality setting or outlier detection applies to
	// some cluster, so a kind that reads the locality where it matters
	// (Reads.Locality) sees it; failoverLabelKeys are the label keys
	// failoverPriority lists name, sorted, which it sees then too.
	localityMatters   bool
	failoverLabelKeys []string
}

// hostRange is the range [lo, hi) of Services holding one host.
type hostRange struct{ lo, hi int }

// snapshotID is a snapshot's identity (not zero-sized: distinct values
// must have distinct addresses).
type snapshotID struct{ _ byte }

// rebuildDelta is what an endpoints-only Rebuild changed: the hosts whose
// services it replaced, relative to the snapshot from.
type rebuildDelta struct {
	from  *snapshotID
	hosts map[string]bool
}

// Problem is a piece of config the model could not use.
type Problem struct {
	Object  string `json:"object"`
	Message string `json:"message"`
}

// Port is one port of a service.
type Port struct {
	Name     string
	Number   uint32
	Protocol string
	// TargetPort is the endpoint port when an endpoint does not name one; 0
	// means Number.
	TargetPort uint32
}

// Service is one host of a ServiceEntry, with all of its ports.
type Service struct {
	Hostname string
	// Namespace and Name identify the ServiceEntry.
	Namespace string
	Name      string
	Ports     []Port
	// Resolution and MeshExternal come from the ServiceEntry.
	Resolution   Resolution
	MeshExternal bool
	// ExportTo is the normalised visibility: "*" (everyone), or namespace
	// names; empty means visible to nobody ("~").
	ExportTo []string
	// Addresses are the service's VIPs: the ServiceEntry's addresses, or one
	// automatic VIP from 240.240.0.0/16 (AutoAddress true).
	Addresses   []string
	AutoAddress bool
	// Endpoints are sorted by address, then origin.
	Endpoints []*Endpoint
	// SubjectAltNames are the identities the service's endpoints present.
	SubjectAltNames []string
}

// Endpoint is one workload instance of a service.
type Endpoint struct {
	// Address is an IP, a hostname (DNS resolution) or a unix socket path.
	Address string
	// Ports maps service port names to endpoint ports; a missing name means
	// the service port's TargetPort (or Number).
	Ports          map[string]uint32
	Labels         map[string]string
	Locality       string // region/zone/subzone
	Weight         uint32 // 0 means 1
	Network        string
	ServiceAccount string
	// Origin names the WorkloadEntry (namespace/name) or, for an inline
	// endpoint, the ServiceEntry with "#index".
	Origin string
}

// PortFor returns the endpoint port that serves the service port p.
func (e *Endpoint) PortFor(p Port) uint32 {
	if n, ok := e.Ports[p.Name]; ok && n != 0 {
		return n
	}
	if p.TargetPort != 0 {
		return p.TargetPort
	}
	return p.Number
}

// EffectiveWeight returns the endpoint weight, 1 when unset.
func (e *Endpoint) EffectiveWeight() uint32 {
	if e.Weight == 0 {
		return 1
	}
	return e.Weight
}

// VirtualService is a VirtualService bound to fully qualified hosts.
type VirtualService struct {
	Namespace string
	Name      string
	// Hosts are the spec's hosts, short names expanded to
	// name.namespace.svc.cluster.local.
	Hosts    []string
	ExportTo []string
	// Gateways are the gateways it binds to besides the mesh, resolved to
	// "namespace/name" (ResolveGatewayName); nil for mesh clients only.
	Gateways []string
	Spec     *networking.VirtualService
	// GatewaySemantics is set for a VirtualService made from Gateway API
	// routes (annotation internal.istio.io/route-semantics: gateway, as
	// Istio's converter marks them): a destination whose cluster the proxy
	// lacks answers 500, as the Gateway API requires and Istio does.
	GatewaySemantics bool
	// FromTLSRoute is set for a VirtualService made from a Gateway API
	// TLSRoute (annotation internal.istio.io/parents: TLSRoute/...): on a
	// gateway server that terminates TLS (or is plain TCP) its tls routes
	// apply when it has no tcp route, as Istio's gateways take them.
	FromTLSRoute bool
}

// DestinationRule is a DestinationRule bound to a fully qualified host.
type DestinationRule struct {
	Namespace string
	Name      string
	Host      string
	ExportTo  []string
	Spec      *networking.DestinationRule
}

// Sidecar is one Sidecar: the egress scope the model applies to what a
// workload sees, and the spec, whose ingress listeners, egress ports and
// outboundTrafficPolicy the Envoy sidecar generator reads.
type Sidecar struct {
	Namespace string
	Name      string
	// Spec is the Sidecar as written; shared, never modified.
	Spec *networking.Sidecar
	// Selector is the workloadSelector; nil selects every workload in the
	// namespace.
	Selector map[string]string
	// Egress lists the namespace/host patterns the workloads may reach; nil
	// means everything.
	Egress []EgressHost
}

// EgressHost is one "namespace/host" entry of a Sidecar egress listener.
type EgressHost struct {
	// Namespace is a namespace or "*" (any); "." is resolved to the
	// Sidecar's own.
	Namespace string
	// Host is a host, "*" or a "*.suffix" wildcard.
	Host string
	// Exclude is Istio's "~" prefix ("~ns/host", "~/host" for every
	// namespace): the services it matches are hidden even when another
	// entry imports them.
	Exclude bool
}

// Key returns "namespace/name" for the Sidecar.
func (s *Sidecar) Key() string { return s.Namespace + "/" + s.Name }

// ServicesForHost returns the services (one per defining namespace) for a
// host, sorted by namespace.
func (s *Snapshot) ServicesForHost(host string) []*Service {
	r, ok := s.byHost[host]
	if !ok {
		return nil
	}
	return s.Services[r.lo:r.hi:r.hi]
}

// VirtualServicesForHost returns the VirtualServices whose hosts match host
// exactly or by wildcard, exact matches first, then by namespace and name.
func (s *Snapshot) VirtualServicesForHost(host string) []*VirtualService { return s.vsByHost[host] }

// DestinationRulesForHost returns the DestinationRules for a host, exact
// matches first, then by namespace and name.
func (s *Snapshot) DestinationRulesForHost(host string) []*DestinationRule { return s.drByHost[host] }

// Source returns the Store snapshot s was built from: the objects as their
// sources wrote them, with their origins (file:line).
func (s *Snapshot) Source() *store.Snapshot { return s.source }

// IsTLS reports whether the port carries TLS (protocol HTTPS or TLS): a
// sidecar routes it by a VirtualService's tls routes only, as Istio's do.
func (p Port) IsTLS() bool { return p.Protocol == "HTTPS" || p.Protocol == "TLS" }

// Objects returns the number of services, endpoints and routing objects, for
// logs and metrics.
func (s *Snapshot) Objects() (services, endpoints, routing int) {
	for _, svc := range s.Services {
		endpoints += len(svc.Endpoints)
	}
	return len(s.Services), endpoints, len(s.VirtualServices) + len(s.DestinationRules) + len(s.Sidecars)
}
