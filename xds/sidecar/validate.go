package sidecar

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Resources is the whole config of one sidecar.
type Resources struct {
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	Clusters  []*clusterv3.Cluster
	Endpoints []*endpointv3.ClusterLoadAssignment
	// Missing says which clusters routes may name on purpose although
	// Clusters does not hold them: destinations the proxy has no cluster
	// for, named as Istio names them (model.View.MissingCluster of the View
	// the resources were generated from). Any other absent cluster is an
	// error; nil allows none.
	Missing func(string) bool
}

// Generate returns all four resource types for a proxy, checked with
// Consistent.
func Generate(v *model.View) (*Resources, error) {
	return GenerateWith(v, Kind{}.Generators())
}

// GenerateWith returns all four resource types gens make for a proxy (an
// Envoy of any kind: a sidecar, a router), checked with Consistent.
func GenerateWith(v *model.View, gens gen.Generators) (*Resources, error) {
	var r Resources
	var err error
	if r.Listeners, err = gens.Listeners(v); err != nil {
		return nil, err
	}
	if r.Routes, err = gens.Routes(v); err != nil {
		return nil, err
	}
	if r.Clusters, err = gens.Clusters(v); err != nil {
		return nil, err
	}
	if r.Endpoints, err = gens.Endpoints(v); err != nil {
		return nil, err
	}
	r.Missing = v.MissingCluster
	if err := r.Consistent(); err != nil {
		return nil, fmt.Errorf("proxy %s: %w", v.Workload().ID, err)
	}
	return &r, nil
}

// Messages returns every resource, listeners first.
func (r *Resources) Messages() []proto.Message {
	var out []proto.Message
	for _, l := range r.Listeners {
		out = append(out, l)
	}
	for _, x := range r.Routes {
		out = append(out, x)
	}
	for _, c := range r.Clusters {
		out = append(out, c)
	}
	for _, e := range r.Endpoints {
		out = append(out, e)
	}
	return out
}

// Validate runs the generated ValidateAll of m and of every message packed
// in an Any anywhere inside it, recursively. An Any whose type is not
// linked in, or a message without a validator, is an error.
func Validate(m proto.Message) error {
	if err := validateOne(m); err != nil {
		return err
	}
	return walk(m.ProtoReflect(), func(inner proto.Message) error {
		if err := validateOne(inner); err != nil {
			return fmt.Errorf("%s: %w", inner.ProtoReflect().Descriptor().FullName(), err)
		}
		return nil
	}, nil)
}

func validateOne(m proto.Message) error {
	v, ok := m.(interface{ ValidateAll() error })
	if !ok {
		return fmt.Errorf("%T has no validator", m)
	}
	return v.ValidateAll()
}

// walk visits every populated message field of m, recursively. onAny is
// called with the content of every Any (which is then walked too); onMsg,
// when not nil, with every message (the reference tests' oracle uses it).
func walk(m protoreflect.Message, onAny, onMsg func(proto.Message) error) error {
	if onMsg != nil {
		if err := onMsg(m.Interface()); err != nil {
			return err
		}
	}
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("unpacking %s: %w", a.GetTypeUrl(), err)
		}
		if onAny != nil {
			if err := onAny(inner); err != nil {
				return err
			}
		}
		return walk(inner.ProtoReflect(), onAny, onMsg)
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = walk(l.Get(i).Message(), onAny, onMsg)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				err = walk(mv.Message(), onAny, onMsg)
				return err == nil
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			err = walk(v.Message(), onAny, onMsg)
		}
		return err == nil
	})
	return err
}

// Consistent checks the references between resources: every RDS name a
// listener uses exists, every cluster a listener or route names exists or
// is in Missing (tcp_proxy, route, weighted clusters, mirrors), every EDS
// cluster has an assignment and every assignment a cluster; names are
// unique per type.
func (r *Resources) Consistent() error {
	routes := make(map[string]bool)
	for _, x := range r.Routes {
		if routes[x.GetName()] {
			return fmt.Errorf("route configuration %q twice", x.GetName())
		}
		routes[x.GetName()] = true
	}
	clusters := make(map[string]bool)
	eds := make(map[string]bool)
	for _, c := range r.Clusters {
		if clusters[c.GetName()] {
			return fmt.Errorf("cluster %q twice", c.GetName())
		}
		clusters[c.GetName()] = true
		if c.GetType() == clusterv3.Cluster_EDS {
			eds[c.GetEdsClusterConfig().GetServiceName()] = true
		}
	}
	cla := make(map[string]bool)
	for _, e := range r.Endpoints {
		if !eds[e.GetClusterName()] {
			return fmt.Errorf("endpoints %q: no EDS cluster", e.GetClusterName())
		}
		cla[e.GetClusterName()] = true
	}
	for n := range eds {
		if !cla[n] {
			return fmt.Errorf("cluster %s: no endpoints resource", n)
		}
	}
	refs := func(where string, m proto.Message) error {
		return CheckReferences(where, m, func(n string) bool { return routes[n] }, func(n string) bool { return clusters[n] || r.Missing != nil && r.Missing(n) })
	}
	seen := make(map[string]bool)
	for _, l := range r.Listeners {
		if seen[l.GetName()] {
			return fmt.Errorf("listener %q twice", l.GetName())
		}
		seen[l.GetName()] = true
		if err := refs("listener "+l.GetName(), l); err != nil {
			return err
		}
	}
	for _, x := range r.Routes {
		if err := refs("route "+x.GetName(), x); err != nil {
			return err
		}
		domains := make(map[string]bool)
		for _, vh := range x.GetVirtualHosts() {
			for _, d := range vh.GetDomains() {
				if domains[d] {
					return fmt.Errorf("route %s: domain %q twice", x.GetName(), d)
				}
				domains[d] = true
			}
		}
	}
	return nil
}

// CheckReferences checks that every route configuration (RDS) and cluster
// that m (a listener or a route configuration) names exists by the given
// lookups; where names m in the error. It is Consistent's check of one
// resource, for config assembled from parts generated apart (a proxy's own
// inbound listener and its scope's clusters).
func CheckReferences(where string, m proto.Message, hasRoute, hasCluster func(string) bool) error {
	return references(m, func(route bool, name string) error {
		switch {
		case name == "":
			return nil
		case route && !hasRoute(name):
			return fmt.Errorf("%s: route configuration %q missing", where, name)
		case !route && !hasCluster(name):
			return fmt.Errorf("%s: cluster %q missing", where, name)
		}
		return nil
	})
}

// references calls visit with every route configuration (route true) and
// cluster name that m, a listener or a route configuration, names: the RDS
// name and inline routes of every HTTP connection manager, the clusters of
// every tcp_proxy, and the cluster, weighted clusters and mirrors of every
// route action. It reads the typed fields and unpacks only the network
// filters that name something; the reflective walk it replaces unpacked
// every Any and was a sixth of a sidecar's connect CPU.
func references(m proto.Message, visit func(route bool, name string) error) error {
	switch v := m.(type) {
	case *listenerv3.Listener:
		chains := v.GetFilterChains()
		if d := v.GetDefaultFilterChain(); d != nil {
			chains = append(chains[:len(chains):len(chains)], d)
		}
		for _, fc := range chains {
			for _, f := range fc.GetFilters() {
				if err := filterReferences(f, visit); err != nil {
					return err
				}
			}
		}
		return nil
	case *routev3.RouteConfiguration:
		return routeReferences(v, visit)
	}
	return fmt.Errorf("references of %T: neither a listener nor a route configuration", m)
}

// The type URLs of the network filters that name route configurations or
// clusters.
const (
	hcmTypeURL      = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	tcpProxyTypeURL = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
)

func filterReferences(f *listenerv3.Filter, visit func(bool, string) error) error {
	a := f.GetTypedConfig()
	switch a.GetTypeUrl() {
	case hcmTypeURL:
		var hcm hcmv3.HttpConnectionManager
		if err := a.UnmarshalTo(&hcm); err != nil {
			return fmt.Errorf("filter %s: %w", f.GetName(), err)
		}
		if err := visit(true, hcm.GetRds().GetRouteConfigName()); err != nil {
			return err
		}
		if rc := hcm.GetRouteConfig(); rc != nil {
			return routeReferences(rc, visit)
		}
	case tcpProxyTypeURL:
		var tp tcpproxyv3.TcpProxy
		if err := a.UnmarshalTo(&tp); err != nil {
			return fmt.Errorf("filter %s: %w", f.GetName(), err)
		}
		if err := visit(false, tp.GetCluster()); err != nil {
			return err
		}
		for _, wc := range tp.GetWeightedClusters().GetClusters() {
			if err := visit(false, wc.GetName()); err != nil {
				return err
			}
		}
	}
	return nil
}

func routeReferences(rc *routev3.RouteConfiguration, visit func(bool, string) error) error {
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			ra := r.GetRoute()
			if ra == nil {
				continue
			}
			names := []string{ra.GetCluster()}
			for _, wc := range ra.GetWeightedClusters().GetClusters() {
				names = append(names, wc.GetName())
			}
			for _, mp := range ra.GetRequestMirrorPolicies() {
				names = append(names, mp.GetCluster())
			}
			for _, n := range names {
				if err := visit(false, n); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
