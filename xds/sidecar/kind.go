package sidecar

import "github.com/vmesh/vmesh/model"

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
