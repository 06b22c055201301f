// Package xds serves the model to proxies over the xDS protocol: it
// identifies proxies from their xDS node, groups proxies with identical
// inputs, generates resources per proxy kind (proxyless gRPC here, Envoy
// sidecars in xds/sidecar), debounces Store changes into pushes (EDS-only
// when only endpoints changed) and serves ADS, state of the world and
// delta, through go-control-plane with a cache of its own.
package xds

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/xds/sidecar"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/protobuf/types/known/structpb"
)

// ProxyKind says which generator serves a proxy.
type ProxyKind string

// Proxy kinds. A node whose metadata GENERATOR is "grpc" is a proxyless gRPC
// application; anything else is an Envoy sidecar.
const (
	KindGRPC    ProxyKind = "grpc"
	KindSidecar ProxyKind = "sidecar"
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

// GroupKey returns the key of the proxy's group under snapshot s. Proxies
// with one key get identical generated config, so it is generated and
// serialised once for all of them. The key holds every input the generators
// read about a proxy: its kind, namespace (visibility, rule lookup order,
// namespace-wide policies), the Sidecar that scopes it, and the
// workload-scoped PeerAuthentications and AuthorizationPolicies that select
// it (which is how labels matter to proxyless gRPC, whose server listeners
// are named by the proxy, IP:port, and depend on nothing else about it).
//
// An Envoy sidecar's config also depends on its labels (VirtualService
// sourceLabels), its IPs and workload name (which endpoints are its own:
// the inbound listener and clusters) and its locality (locality load
// balancing), so those are in its key too: sidecars of one workload
// instance group together, distinct VMs do not. When a generator starts
// reading more of the proxy, the key must grow with it.
func GroupKey(s *model.Snapshot, p *Proxy) string {
	sc := "-"
	if c := s.SidecarFor(p.Namespace, p.Labels); c != nil {
		sc = c.Key()
	}
	key := string(p.Kind) + "|" + p.Namespace + "|" + sc
	if pk := s.WorkloadPolicyKey(p.Namespace, p.Labels); pk != "" {
		key += "|" + pk
	}
	if p.Kind == KindSidecar {
		key += "|labels=" + labelString(p.Labels) + "|ips=" + strings.Join(p.IPs, ",") + "|workload=" + p.WorkloadName + "|locality=" + p.Locality
	}
	return key
}

// toSidecar is what the Envoy sidecar generator reads about a proxy.
func toSidecar(p *Proxy) *sidecar.Proxy {
	return &sidecar.Proxy{ID: p.ID, Namespace: p.Namespace, Labels: p.Labels, IPs: p.IPs, WorkloadName: p.WorkloadName, Locality: p.Locality}
}

// labelString renders labels deterministically, for debug output.
func labelString(l map[string]string) string {
	keys := slices.Sorted(maps.Keys(l))
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + l[k])
	}
	return b.String()
}
