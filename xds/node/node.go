// Package node is vmesh's node-metadata contract: how a proxy identifies
// itself in the xDS node of its first request (Istio's metadata keys). The
// agent writes it (agents/bootstrap, into Envoy's and grpc-go's
// bootstraps) and the server reads it (xds.ProxyFromNode); both go through
// Identity, so the two sides cannot drift. It imports nothing of vmesh's.
package node

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Node metadata keys (Istio's names).
const (
	MetaNamespace      = "NAMESPACE"
	MetaLabels         = "LABELS"
	MetaServiceAccount = "SERVICE_ACCOUNT"
	MetaWorkloadName   = "WORKLOAD_NAME"
	MetaInstanceIPs    = "INSTANCE_IPS"
	MetaGenerator      = "GENERATOR"
	// MetaAutoRegisterGroup names the WorkloadGroup (in NAMESPACE) an agent
	// registers its VM under.
	MetaAutoRegisterGroup = "AUTO_REGISTER_GROUP"
	// MetaNetwork is the workload's network.
	MetaNetwork = "NETWORK"
	// MetaWorkloadEntry names the WorkloadEntry (in NAMESPACE), defined in
	// config, whose health the agent's reports decide when it carries
	// proxy.istio.io/health-checks-enabled (Istio's WORKLOAD_ENTRY).
	MetaWorkloadEntry = "WORKLOAD_ENTRY"
)

// GeneratorGRPC is the GENERATOR of proxyless gRPC applications; an Envoy
// sidecar's node carries none (any other value also means Envoy).
const GeneratorGRPC = "grpc"

// NodeTypeRouter is the type of a router's node id (Istio's gateways):
// "router~IP~id~namespace.svc.cluster.local".
const NodeTypeRouter = "router"

// DefaultNamespace is a proxy's namespace when its node names none.
const DefaultNamespace = "default"

// Identity is everything a node says about its proxy.
type Identity struct {
	// ID is the node id: unique per process.
	ID string
	// Type is the proxy type an Istio-style node id starts with
	// ("type~IP~id~namespace.svc.cluster.local": "sidecar", "router"); ""
	// for an id of another form.
	Type string
	// Cluster is the node's service cluster ("<workload>.<namespace>" from
	// the agent); the server does not read it.
	Cluster   string
	Generator string
	Namespace string
	Labels    map[string]string
	// ServiceAccount and WorkloadName name the workload.
	ServiceAccount, WorkloadName string
	// IPs are the workload's addresses, first the one it is reached at.
	IPs []string
	// WorkloadGroup asks the control plane to auto-register the workload
	// under that WorkloadGroup (in Namespace).
	WorkloadGroup string
	// WorkloadEntry names the config-defined WorkloadEntry (in Namespace)
	// the workload's health reports are for.
	WorkloadEntry string
	Network       string
	// Locality is "region/zone/subzone" (the node's locality field).
	Locality string
	// Extra is further metadata (the mesh config's proxyMetadata
	// ISTIO_META_* entries, without the prefix). The keys above win over
	// it; Parse does not fill it.
	Extra map[string]string
}

// Metadata is the node metadata, as a bootstrap file carries it: only the
// keys with a value, labels as a string map.
func (id Identity) Metadata() map[string]any {
	md := map[string]any{}
	for k, v := range id.Extra {
		md[k] = v
	}
	set := func(k, v string) {
		if v != "" {
			md[k] = v
		}
	}
	set(MetaNamespace, id.Namespace)
	set(MetaServiceAccount, id.ServiceAccount)
	set(MetaWorkloadName, id.WorkloadName)
	set(MetaInstanceIPs, strings.Join(id.IPs, ","))
	set(MetaAutoRegisterGroup, id.WorkloadGroup)
	set(MetaWorkloadEntry, id.WorkloadEntry)
	set(MetaNetwork, id.Network)
	set(MetaGenerator, id.Generator)
	if id.Labels != nil {
		labels := map[string]any{}
		for _, k := range slices.Sorted(maps.Keys(id.Labels)) {
			labels[k] = id.Labels[k]
		}
		md[MetaLabels] = labels
	}
	return md
}

// Node is the identity as an xDS node.
func (id Identity) Node() (*corev3.Node, error) {
	md, err := structpb.NewStruct(id.Metadata())
	if err != nil {
		return nil, fmt.Errorf("node %s: metadata: %w", id.ID, err)
	}
	n := &corev3.Node{Id: id.ID, Cluster: id.Cluster, Metadata: md}
	if id.Locality != "" {
		parts := strings.SplitN(id.Locality, "/", 3)
		parts = append(parts, "", "")
		n.Locality = &corev3.Locality{Region: parts[0], Zone: parts[1], SubZone: parts[2]}
	}
	return n, nil
}

// Parse reads the identity of an xDS node. A node without an id, or with a
// non-string value where a string is expected, is refused. A node that
// names no namespace is in DefaultNamespace.
func Parse(n *corev3.Node) (Identity, error) {
	if n.GetId() == "" {
		return Identity{}, fmt.Errorf("xds node has no id")
	}
	id := Identity{ID: n.GetId(), Cluster: n.GetCluster(), Namespace: DefaultNamespace}
	md := n.GetMetadata().GetFields()
	str := func(k string) (string, error) {
		v, ok := md[k]
		if !ok {
			return "", nil
		}
		s, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return "", fmt.Errorf("node %s: metadata %s must be a string", id.ID, k)
		}
		return s.StringValue, nil
	}
	var ns, ips string
	for _, f := range []struct {
		key string
		dst *string
	}{{MetaGenerator, &id.Generator}, {MetaServiceAccount, &id.ServiceAccount}, {MetaWorkloadName, &id.WorkloadName}, {MetaInstanceIPs, &ips},
		{MetaAutoRegisterGroup, &id.WorkloadGroup}, {MetaWorkloadEntry, &id.WorkloadEntry}, {MetaNetwork, &id.Network}, {MetaNamespace, &ns}} {
		var err error
		if *f.dst, err = str(f.key); err != nil {
			return Identity{}, err
		}
	}
	if parts := strings.Split(id.ID, "~"); len(parts) == 4 {
		id.Type = parts[0]
		// Istio's gateways name their namespace in the id's domain too;
		// NAMESPACE wins.
		if dns, _, ok := strings.Cut(parts[3], "."); ok && ns == "" && dns != "" {
			ns = dns
		}
	}
	if ns != "" {
		id.Namespace = ns
	}
	if l := n.GetLocality(); l != nil && l.GetRegion() != "" {
		id.Locality = strings.TrimRight(l.GetRegion()+"/"+l.GetZone()+"/"+l.GetSubZone(), "/")
	}
	for ip := range strings.SplitSeq(ips, ",") {
		if ip = strings.TrimSpace(ip); ip != "" {
			id.IPs = append(id.IPs, ip)
		}
	}
	if v, ok := md[MetaLabels]; ok {
		st := v.GetStructValue()
		if st == nil {
			return Identity{}, fmt.Errorf("node %s: metadata %s must be a string map", id.ID, MetaLabels)
		}
		id.Labels = make(map[string]string, len(st.GetFields()))
		for k, lv := range st.GetFields() {
			s, ok := lv.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return Identity{}, fmt.Errorf("node %s: label %s must be a string", id.ID, k)
			}
			id.Labels[k] = s.StringValue
		}
	}
	return id, nil
}
