// Package router generates the config of vmesh's third proxy kind, the
// router: an Envoy in router mode serving Istio Gateway objects (Istio's
// ingress and egress gateways), with Istio's gateway layout. Its
// generators are pure: a model.View in, Envoy resources out. They read the
// Gateways that select the router (model.View.Gateways) and the
// VirtualServices bound to them, and reuse the sidecar's route and cluster
// translation (xds/sidecar, xds/translate).
package router

import (
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
)

// NodeType is the first field of a router's node id,
// "router~IP~id~namespace.svc.cluster.local", as Istio's gateways have it.
const NodeType = "router"

// Kind is the router: its row in xds's table of proxy kinds
// (xds/kinds.go).
type Kind struct{}

// Name is the kind's name.
func (Kind) Name() model.ProxyKind { return model.KindRouter }

// Reads is what a router's generators read: the Gateways that select its
// labels and the VirtualServices bound to them (its group key names the
// Gateways), no Sidecar, any service with ports (Envoy resolves DNS
// itself), and its locality where locality load balancing applies (its
// EDS, as a sidecar's). Its IPs, workload name and other labels it does
// not read.
func (Kind) Reads() model.Reads { return model.Reads{Gateways: true, Locality: true} }

// Traits: a router's node id is "router~..."; it is an Envoy.
func (Kind) Traits() gen.Traits { return gen.Traits{NodeType: NodeType, Envoy: true} }

// Generators are the router's generators.
func (Kind) Generators() gen.Generators {
	return gen.Generators{Listeners: Listeners, Routes: Routes, Clusters: Clusters, Endpoints: Endpoints, Credentials: Credentials}
}

// Generate generates a router's group in full: LDS, RDS, CDS and EDS,
// checked for references that do not resolve.
func (Kind) Generate(s *model.Snapshot, w model.Workload, key string) (*gen.Generation, error) {
	return generate(s, w, key, nil, nil)
}

// NewCache returns the router's part of a server cache: its groups are
// generated again at every push, but for their clusters and endpoints
// (SNI-DNAT ones included), brought forward from the previous generation
// host by host on a diff that leaves the global inputs alone (cache.Push),
// and the server sends only what changed.
func (Kind) NewCache(gen.Env) gen.KindCache { return cache{} }
