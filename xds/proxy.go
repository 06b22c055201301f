// Package xds serves the model to proxies over the xDS protocol: it
// identifies proxies from their xDS node, groups proxies with identical
// inputs, generates resources per proxy kind (proxyless gRPC here, Envoy
// sidecars in xds/sidecar), debounces Store changes into pushes (EDS-only
// when only endpoints changed) and serves ADS, state of the world and
// delta, through go-control-plane with a cache of its own.
package xds

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/types/known/structpb"
)

// ProxyKind says which generators serve a proxy (model.ProxyKind).
type ProxyKind = model.ProxyKind

// Proxy kinds. A node whose metadata GENERATOR is "grpc" is a proxyless gRPC
// application; anything else is an Envoy sidecar.
const (
	KindGRPC    = model.KindGRPC
	KindSidecar = model.KindSidecar
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
)

// DefaultNamespace is a proxy's namespace when its node names none.
const DefaultNamespace = "default"

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
	// Network and Locality ("region/zone/subzone") describe where it runs.
	Network  string `json:"network,omitempty"`
	Locality string `json:"locality,omitempty"`
}

// ProxyFromNode reads a Proxy from an xDS node by the documented metadata
// contract (see README.md).
func ProxyFromNode(n *corev3.Node) (*Proxy, error) {
	if n.GetId() == "" {
		return nil, fmt.Errorf("xds node has no id")
	}
	p := &Proxy{ID: n.GetId(), Kind: KindSidecar, Namespace: DefaultNamespace}
	md := n.GetMetadata().GetFields()
	str := func(k string) (string, error) {
		v, ok := md[k]
		if !ok {
			return "", nil
		}
		s, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return "", fmt.Errorf("node %s: metadata %s must be a string", p.ID, k)
		}
		return s.StringValue, nil
	}
	var err error
	var gen, ips string
	for _, f := range []struct {
		key string
		dst *string
	}{{MetaGenerator, &gen}, {MetaServiceAccount, &p.ServiceAccount}, {MetaWorkloadName, &p.WorkloadName}, {MetaInstanceIPs, &ips},
		{MetaAutoRegisterGroup, &p.AutoRegisterGroup}, {MetaNetwork, &p.Network}} {
		if *f.dst, err = str(f.key); err != nil {
			return nil, err
		}
	}
	if ns, err := str(MetaNamespace); err != nil {
		return nil, err
	} else if ns != "" {
		p.Namespace = ns
	}
	if l := n.GetLocality(); l != nil && l.GetRegion() != "" {
		p.Locality = strings.TrimRight(l.GetRegion()+"/"+l.GetZone()+"/"+l.GetSubZone(), "/")
	}
	if gen == string(KindGRPC) {
		p.Kind = KindGRPC
	}
	for ip := range strings.SplitSeq(ips, ",") {
		if ip = strings.TrimSpace(ip); ip != "" {
			p.IPs = append(p.IPs, ip)
		}
	}
	if v, ok := md[MetaLabels]; ok {
		st := v.GetStructValue()
		if st == nil {
			return nil, fmt.Errorf("node %s: metadata %s must be a string map", p.ID, MetaLabels)
		}
		p.Labels = make(map[string]string, len(st.GetFields()))
		for k, lv := range st.GetFields() {
			s, ok := lv.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return nil, fmt.Errorf("node %s: label %s must be a string", p.ID, k)
			}
			p.Labels[k] = s.StringValue
		}
	}
	return p, nil
}

// Workload is what config generation may know about the proxy.
func (p *Proxy) Workload() model.Workload {
	return model.Workload{ID: p.ID, Kind: p.Kind, Namespace: p.Namespace, Labels: p.Labels, IPs: p.IPs, WorkloadName: p.WorkloadName, Locality: p.Locality}
}

// GroupKey returns the key of the proxy's group: proxies with one key get
// identical generated config, so it is generated and serialised once for
// all of them. It is the key of the proxy's model.View, which derives it
// from what the View lets the generators read.
func GroupKey(s *model.Snapshot, p *Proxy) string {
	return model.ViewKey(s, p.Workload())
}
