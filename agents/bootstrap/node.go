// Package bootstrap renders what the VM's data planes start from: the xDS
// node (identity and metadata per vmesh's node contract, Istio's keys), the
// grpc-go xDS bootstrap JSON for proxyless gRPC applications, and the Envoy
// bootstrap that sends ADS to the agent's xDS proxy and reads certificates
// from the agent's SDS socket. Everything here is pure: no I/O.
package bootstrap

import (
	"fmt"
	"strings"

	"github.com/vmesh/vmesh/xds/node"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// GeneratorGRPC is the GENERATOR of proxyless gRPC applications; Envoy
// nodes carry no GENERATOR.
const GeneratorGRPC = node.GeneratorGRPC

// Node is the identity a VM's data planes present to the control plane.
type Node struct {
	Namespace      string
	ServiceAccount string
	// WorkloadName names the workload (the VM's host name by default).
	WorkloadName string
	Labels       map[string]string
	// IPs are the VM's addresses, first the one it is reached at.
	IPs []string
	// WorkloadGroup, when set, asks the control plane to auto-register the
	// VM under that WorkloadGroup (in Namespace).
	WorkloadGroup string
	// WorkloadEntry, when set, names the WorkloadEntry (in Namespace),
	// defined in config, that the agent's health reports are for.
	WorkloadEntry string
	// Locality is the VM's region/zone/subzone (LocalityFromLabels), the
	// node's locality field: clients balance by it (locality failover and
	// distribute).
	Locality string
	// Gateway makes the node's Envoy a router (Istio's gateways): its id is
	// RouterID. Proxyless applications and the agent's own stream keep ID.
	Gateway bool
	// ExtraMetadata is further node metadata (the bundle's proxyMetadata
	// ISTIO_META_* entries, without the prefix); the fields above win.
	ExtraMetadata map[string]string
}

// Validate checks the fields every node needs.
func (n Node) Validate() error {
	switch {
	case n.Namespace == "":
		return fmt.Errorf("bootstrap: node has no namespace")
	case n.WorkloadName == "":
		return fmt.Errorf("bootstrap: node has no workload name")
	case len(n.IPs) == 0:
		return fmt.Errorf("bootstrap: node has no IP address")
	}
	return nil
}

// ID is the node id, in Istio's form
// "sidecar~<ip>~<workload>.<namespace>~<namespace>.svc.cluster.local".
func (n Node) ID() string {
	return fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", n.IPs[0], n.WorkloadName, n.Namespace, n.Namespace)
}

// RouterID is a gateway Envoy's node id, in Istio's form
// "router~<ip>~<workload>.<namespace>~<namespace>.svc.cluster.local": the
// id's type makes the control plane serve it as a router.
func (n Node) RouterID() string {
	return fmt.Sprintf("router~%s~%s.%s~%s.svc.cluster.local", n.IPs[0], n.WorkloadName, n.Namespace, n.Namespace)
}

// Cluster is the node's service cluster, "<workload>.<namespace>".
func (n Node) Cluster() string { return n.WorkloadName + "." + n.Namespace }

// Identity is the node a data plane (a proxyless application, Envoy)
// presents, as vmesh's node-metadata contract (xds/node) has it; generator
// is "grpc" for proxyless applications and "" for Envoy. It never names the
// WorkloadGroup: only the agent's own stream (AgentIdentity) registers the
// VM, so the registration ends with the agent, not with the last
// application still connected.
func (n Node) Identity(generator string) node.Identity {
	id := n.AgentIdentity()
	id.Generator, id.WorkloadGroup, id.WorkloadEntry = generator, "", ""
	if n.Gateway && generator == "" {
		id.ID = n.RouterID()
	}
	return id
}

// AgentIdentity is the node of the agent's own xDS stream: GENERATOR=grpc
// (it shares its View and generation with the VM's proxyless
// applications) and, when the bundle names one, the WorkloadGroup
// (AUTO_REGISTER_GROUP) to register under, or the config-defined
// WorkloadEntry (WORKLOAD_ENTRY) its health reports are for.
func (n Node) AgentIdentity() node.Identity {
	labels := n.Labels
	if labels == nil {
		labels = map[string]string{} // LABELS is always written
	}
	return node.Identity{ID: n.ID(), Cluster: n.Cluster(), Generator: GeneratorGRPC, Namespace: n.Namespace, Labels: labels,
		ServiceAccount: n.ServiceAccount, WorkloadName: n.WorkloadName, IPs: n.IPs, WorkloadGroup: n.WorkloadGroup, WorkloadEntry: n.WorkloadEntry,
		Locality: n.Locality, Extra: n.ExtraMetadata}
}

// The labels a workload's locality is read from (Kubernetes' and Istio's
// topology labels).
const (
	LabelRegion  = "topology.kubernetes.io/region"
	LabelZone    = "topology.kubernetes.io/zone"
	LabelSubzone = "topology.istio.io/subzone"
)

// LocalityFromLabels returns the locality "region/zone/subzone" the
// topology labels give (trailing empty parts left out), "" without a
// region.
func LocalityFromLabels(labels map[string]string) string {
	region := labels[LabelRegion]
	if region == "" {
		return ""
	}
	return strings.TrimRight(region+"/"+labels[LabelZone]+"/"+labels[LabelSubzone], "/")
}

// Metadata returns a data plane's node metadata (Identity(generator).Metadata()).
func (n Node) Metadata(generator string) map[string]any { return n.Identity(generator).Metadata() }

// Envoy returns a data plane's node as an xDS Node proto with the given
// generator.
func (n Node) Envoy(generator string) (*corev3.Node, error) { return n.Identity(generator).Node() }

// Agent returns the agent's own node as an xDS Node proto.
func (n Node) Agent() (*corev3.Node, error) { return n.AgentIdentity().Node() }
