package xds

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
	grpcgen "github.com/vmesh/vmesh/xds/grpc"
	"github.com/vmesh/vmesh/xds/node"
	"github.com/vmesh/vmesh/xds/router"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// InboundListenerPrefix starts the names of the server listeners that
// xds.NewGRPCServer asks for (grpc.InboundListenerPrefix).
const InboundListenerPrefix = grpcgen.InboundListenerPrefix

// ListenerName is a proxyless client listener's (and route
// configuration's) name for a service port: "host:port".
func ListenerName(host string, port uint32) string { return grpcgen.ListenerName(host, port) }

// NameTableType is the type URL of the name table (Istio's NDS): the hosts
// a proxy can see and the IPs that answer for them, which a VM's agent
// serves from its DNS proxy. The agent's own stream asks for it (a
// wildcard subscription, as Istio's agent does); the response carries one
// resource, NameTableName.
const NameTableType = gen.NameTableType

// NameTableName names the one name table resource of a proxy.
const NameTableName = gen.NameTableName

// WorkloadGroupType is the type URL of the WorkloadGroups served to VM
// agents: istio.io/api's WorkloadGroup message, one resource per group of
// the proxy's namespace, named by the group's name. An agent subscribes
// on its own stream to the group it registers under and runs the group's
// readiness probe, so the probe follows the config (Istio writes it into
// the VM's files at onboarding instead).
const WorkloadGroupType = gen.WorkloadGroupType

// Version returns the version_info for config generated from s: "r<store
// revision>", plus "@<short commit>" when the config came from git.
func Version(s *model.Snapshot) string { return gen.Version(s) }

// Consistent checks the references between a proxyless client's
// generated resources (grpc.Consistent): every RDS name an LDS listener
// uses is in rds, every cluster a route names is in cds or missing, and
// every EDS cluster has an assignment in eds (when eds is not nil).
func Consistent(lds []*listenerv3.Listener, rds []*routev3.RouteConfiguration, cds []*clusterv3.Cluster, eds map[string]bool, missing func(string) bool) error {
	return grpcgen.Consistent(lds, rds, cds, eds, missing)
}

// ClusterName returns Istio's outbound cluster name (model.ClusterName).
func ClusterName(port uint32, subset, host string) string {
	return model.ClusterName(port, subset, host)
}

// kindRow is one proxy kind in the table: the kind's package provides
// everything of it (gen.Kind); the row keeps what the server reads of it
// on every lookup.
type kindRow struct {
	name  model.ProxyKind
	reads model.Reads
	gen.Traits
	kind gen.Kind
}

// rowOf makes the table's row of kind k.
func rowOf(k gen.Kind) kindRow {
	return kindRow{name: k.Name(), reads: k.Reads(), Traits: k.Traits(), kind: k}
}

// kindTable is the one table of proxy kinds vmesh serves, in order. Adding
// a kind is one package under xds providing a gen.Kind and one row here
// (and one more in the array's length: an array, so that looking a kind up
// allocates nothing).
func kindTable() [3]kindRow {
	return [...]kindRow{
		rowOf(sidecar.Kind{}),
		rowOf(grpcgen.Kind{}),
		rowOf(router.Kind{}),
	}
}

// kindNamed returns the table's row of kind k; an unknown kind is an
// error.
func kindNamed(k model.ProxyKind) (kindRow, error) {
	for _, r := range kindTable() {
		if r.name == k {
			return r, nil
		}
	}
	return kindRow{}, fmt.Errorf("unknown proxy kind %q", k)
}

// kindOf returns the kind of a node: the row whose NodeType its id's type
// is, else by its GENERATOR (kindOfGenerator).
func kindOf(id node.Identity) model.ProxyKind {
	for _, r := range kindTable() {
		if r.NodeType != "" && r.NodeType == id.Type {
			return r.name
		}
	}
	return kindOfGenerator(id.Generator)
}

// kindOfGenerator returns the kind of a node whose metadata GENERATOR is
// gen: the row that names it, else the row that names none.
func kindOfGenerator(gen string) model.ProxyKind {
	var def model.ProxyKind
	for _, r := range kindTable() {
		switch r.Generator {
		case gen:
			return r.name
		case "":
			def = r.name
		}
	}
	return def
}

// kindNames are the names of every kind in the table.
func kindNames() []model.ProxyKind {
	var out []model.ProxyKind
	for _, r := range kindTable() {
		out = append(out, r.name)
	}
	return out
}

// generate builds all resource types for a group, by its kind's row.
func generate(s *model.Snapshot, p *Proxy, key string) (*gen.Generation, error) {
	k, err := kindNamed(p.Kind)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", p.ID, err)
	}
	return k.kind.Generate(s, p.Workload(), key)
}

// generatorsFor returns the generators of w's kind.
func generatorsFor(w model.Workload) (gen.Generators, error) {
	r, err := kindNamed(w.Kind)
	if err != nil {
		return gen.Generators{}, fmt.Errorf("proxy %s: %w", w.ID, err)
	}
	return r.kind.Generators(), nil
}

// Credentials lists the file credentials (credentialName) w's config
// asks its agent for over SDS, by its kind's generators; none for a kind
// that asks for none.
func Credentials(s *model.Snapshot, w model.Workload) []model.CredentialUse {
	gens, err := generatorsFor(w)
	if err != nil || gens.Credentials == nil {
		return nil
	}
	return gens.Credentials(model.NewView(s, w))
}

// generateWith runs one generator of p's kind on p's View of s.
func generateWith[T any](s *model.Snapshot, p *Proxy, pick func(gen.Generators) func(*model.View) ([]T, error)) ([]T, error) {
	w := p.Workload()
	gens, err := generatorsFor(w)
	if err != nil {
		return nil, err
	}
	return pick(gens)(model.NewView(s, w))
}

// Listeners returns the client listeners for a proxy.
func Listeners(s *model.Snapshot, p *Proxy) ([]*listenerv3.Listener, error) {
	return generateWith(s, p, func(g gen.Generators) func(*model.View) ([]*listenerv3.Listener, error) { return g.Listeners })
}

// Routes returns the route configurations for a proxy.
func Routes(s *model.Snapshot, p *Proxy) ([]*routev3.RouteConfiguration, error) {
	return generateWith(s, p, func(g gen.Generators) func(*model.View) ([]*routev3.RouteConfiguration, error) { return g.Routes })
}

// Clusters returns the outbound clusters for a proxy.
func Clusters(s *model.Snapshot, p *Proxy) ([]*clusterv3.Cluster, error) {
	return generateWith(s, p, func(g gen.Generators) func(*model.View) ([]*clusterv3.Cluster, error) { return g.Clusters })
}

// Endpoints returns the ClusterLoadAssignments for a proxy's EDS clusters.
func Endpoints(s *model.Snapshot, p *Proxy) ([]*endpointv3.ClusterLoadAssignment, error) {
	return generateWith(s, p, func(g gen.Generators) func(*model.View) ([]*endpointv3.ClusterLoadAssignment, error) {
		return g.Endpoints
	})
}

// InboundListener returns the server listener named name
// (InboundListenerPrefix + "IP:port") for a proxyless gRPC server. Envoy
// sidecars serve inbound traffic on their virtualInbound listener, so for
// them there is no such listener (an error: the name is not found).
func InboundListener(s *model.Snapshot, p *Proxy, name string) (*listenerv3.Listener, error) {
	w := p.Workload()
	gens, err := generatorsFor(w)
	if err != nil {
		return nil, err
	}
	if gens.Inbound == nil {
		return nil, fmt.Errorf("proxy %s: Envoy sidecars have no per-address server listeners (%s)", p.ID, name)
	}
	return gens.Inbound(model.NewView(s, w), name)
}
