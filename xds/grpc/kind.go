package grpc

import "github.com/vmesh/vmesh/model"

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
