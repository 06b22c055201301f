package sidecar

import (
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
)

// Kind is the Envoy sidecar: its row in xds's table of proxy kinds
// (xds/kinds.go).
type Kind struct{}

// Name is the kind's name (a node whose GENERATOR names no other kind).
func (Kind) Name() model.ProxyKind { return model.KindSidecar }

// Reads is what an Envoy sidecar's generators read: the whole workload (its
// labels, IPs, workload name and locality make its inbound side and its
// locality load balancing), the Sidecar's egress ports (Envoy applies
// them), and any service with ports (Envoy resolves DNS and matches
// wildcard hosts itself).
func (Kind) Reads() model.Reads { return model.Reads{Workload: true, EgressPorts: true} }

// Traits: a sidecar's nodes name no GENERATOR (or one no kind has); its
// proxies are Envoys.
func (Kind) Traits() gen.Traits { return gen.Traits{Envoy: true} }

// Generators are the sidecar generators.
func (Kind) Generators() gen.Generators {
	return gen.Generators{Listeners: Listeners, Routes: Routes, Clusters: Clusters, Endpoints: Endpoints, Credentials: Credentials}
}

// Generate generates a sidecar group in full: its scope's part and its
// own.
func (Kind) Generate(s *model.Snapshot, w model.Workload, key string) (*gen.Generation, error) {
	return generateSidecar(s, w, key, nil)
}

// NewCache returns the sidecar's part of a server cache: the scopes'
// parts, shared by the groups of a scope, and the clusters the scopes
// share.
func (Kind) NewCache(env gen.Env) gen.KindCache { return newCache(env) }
