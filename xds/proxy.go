// Package xds serves the model to proxies over the xDS protocol: it
// identifies proxies from their xDS node, groups proxies with identical
// inputs, generates resources per proxy kind (proxyless gRPC here, Envoy
// sidecars in xds/sidecar), debounces Store changes into pushes (EDS-only
// when only endpoints changed) and serves ADS, state of the world and
// delta, through go-control-plane with a cache of its own.
package xds

import (
	"github.com/vmesh/vmesh/xds/node"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/vmesh/vmesh/model"
)

// ProxyKind says which generators serve a proxy (model.ProxyKind).
type ProxyKind = model.ProxyKind

// Proxy kinds. A node whose id starts "router~" (Istio's gateways) is a
// router; else a node whose metadata GENERATOR is "grpc" is a proxyless
// gRPC application; anything else is an Envoy sidecar.
const (
	KindGRPC    = model.KindGRPC
	KindSidecar = model.KindSidecar
	KindRouter  = model.KindRouter
)

// DefaultNamespace is a proxy's namespace when its node names none.
const DefaultNamespace = node.DefaultNamespace

// Proxy is one xDS client as identified by its node.
type Proxy struct {
	ID             string            `json:"id"`
	Kind           ProxyKind         `json:"kind"`
	Namespace      string            `json:"namespace"`
	Labels         map[string]string `json:"labels,omitempty"`
	ServiceAccount string            `json:"serviceAccount,omitempty"`
	WorkloadName   string            `json:"workloadName,omitempty"`
	IPs            []string          `json:"ips,omitempty"`
	// AutoRegisterGroup is the WorkloadGroup an agent registers under.
	AutoRegisterGroup string `json:"autoRegisterGroup,omitempty"`
	// WorkloadEntry names the config-defined WorkloadEntry whose health
	// the agent reports (Istio's WORKLOAD_ENTRY).
	WorkloadEntry string `json:"workloadEntry,omitempty"`
	// Network and Locality ("region/zone/subzone") describe where it runs.
	Network  string `json:"network,omitempty"`
	Locality string `json:"locality,omitempty"`
}

// ProxyFromNode reads a Proxy from an xDS node by vmesh's node-metadata
// contract (xds/node; see README.md).
func ProxyFromNode(n *corev3.Node) (*Proxy, error) {
	id, err := node.Parse(n)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ID: id.ID, Kind: kindOf(id), Namespace: id.Namespace, Labels: id.Labels, ServiceAccount: id.ServiceAccount,
		WorkloadName: id.WorkloadName, IPs: id.IPs, AutoRegisterGroup: id.WorkloadGroup, WorkloadEntry: id.WorkloadEntry, Network: id.Network, Locality: id.Locality}
	return p, nil
}

// Workload is what config generation may know about the proxy, with what
// its kind's generators read (the kind table's Reads; none for an unknown
// kind, whose generation fails).
func (p *Proxy) Workload() model.Workload {
	var reads model.Reads
	if k, err := kindNamed(p.Kind); err == nil {
		reads = k.reads
	}
	return model.Workload{ID: p.ID, Kind: p.Kind, Reads: reads, Namespace: p.Namespace, Labels: p.Labels, IPs: p.IPs, WorkloadName: p.WorkloadName, Locality: p.Locality}
}

// RunsEnvoy reports whether the proxy is an Envoy (its kind's row in the
// table says so), in front of a workload that takes mTLS.
func (p *Proxy) RunsEnvoy() bool {
	k, err := kindNamed(p.Kind)
	return err == nil && k.Envoy
}

// GroupKey returns the key of the proxy's group: proxies with one key get
// identical generated config, so it is generated and serialised once for
// all of them. It is the key of the proxy's model.View, which derives it
// from what the View lets the generators read.
func GroupKey(s *model.Snapshot, p *Proxy) string {
	return model.ViewKey(s, p.Workload())
}
