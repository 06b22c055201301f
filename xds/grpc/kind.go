package grpc

import (
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
	"github.com/vmesh/vmesh/xds/node"
)

// Kind is the proxyless gRPC application: its row in xds's table of proxy
// kinds (xds/kinds.go).
type Kind struct{}

// Name is the kind's name, which is also the GENERATOR its nodes send
// (node.GeneratorGRPC).
func (Kind) Name() model.ProxyKind { return model.KindGRPC }

// Reads is what a proxyless gRPC client's generators read: of the workload
// only its namespace and the labels VirtualService sourceLabels name (its
// routes' source matches); the Sidecar's hosts but not its egress ports;
// only resolvable, non-wildcard hosts (grpc-go resolves no DNS and
// matches no wildcard); and its locality (and the labels failoverPriority
// names) where a locality setting or outlier detection applies: its EDS
// priorities and weights, as Istio's.
func (Kind) Reads() model.Reads { return model.Reads{Resolvable: true, Locality: true} }

// Traits: a proxyless client's nodes name GENERATOR grpc; its
// state-of-the-world streams get make-before-break; a VM agent's own
// stream is one of its streams.
func (Kind) Traits() gen.Traits {
	return gen.Traits{Generator: node.GeneratorGRPC, Staged: true, AgentStreams: true}
}

// Generators are the proxyless generators.
func (Kind) Generators() gen.Generators {
	return gen.Generators{Listeners: Listeners, Routes: Routes, Clusters: Clusters, Endpoints: Endpoints, Inbound: InboundListener, NameTable: NameTable}
}

// Generate generates a proxyless group in full.
func (Kind) Generate(s *model.Snapshot, w model.Workload, key string) (*gen.Generation, error) {
	return generate(s, w, key)
}

// NewCache returns proxyless gRPC's part of a server cache, which shares
// EDS assignments across groups at a snapshot and brings a group forward
// by what differs.
func (Kind) NewCache(gen.Env) gen.KindCache { return &cache{} }
