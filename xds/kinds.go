package xds

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/vmesh/vmesh/model"
	grpcgen "github.com/vmesh/vmesh/xds/grpc"
	"github.com/vmesh/vmesh/xds/nds"
	"github.com/vmesh/vmesh/xds/node"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// InboundListenerPrefix starts the names of the server listeners that
// xds.NewGRPCServer asks for (grpc.InboundListenerPrefix).
const InboundListenerPrefix = grpcgen.InboundListenerPrefix

// ListenerName is a proxyless client listener's (and route
// configuration's) name for a service port: "host:port".
func ListenerName(host string, port uint32) string { return grpcgen.ListenerName(host, port) }

// ClusterName returns Istio's outbound cluster name (model.ClusterName).
func ClusterName(port uint32, subset, host string) string {
	return model.ClusterName(port, subset, host)
}

// generators are one proxy kind's generators, each reading only the
// proxy's View.
type generators struct {
	listeners func(*model.View) ([]*listenerv3.Listener, error)
	routes    func(*model.View) ([]*routev3.RouteConfiguration, error)
	clusters  func(*model.View) ([]*clusterv3.Cluster, error)
	endpoints func(*model.View) ([]*endpointv3.ClusterLoadAssignment, error)
	// inbound returns a server listener by name; nil when the kind has
	// none (an Envoy sidecar serves inbound on virtualInbound).
	inbound func(*model.View, string) (*listenerv3.Listener, error)
	// nameTable returns the DNS name table (NDS) the VM's agent asks for
	// on its own stream; nil when the kind's streams never ask for one.
	nameTable func(*model.View) (nds.Table, error)
}

// kindRow is one proxy kind in the table: its name, the node GENERATOR
// that selects it, what its generators read, its generators, and how the
// server generates, brings forward and serves its groups.
type kindRow struct {
	name model.ProxyKind
	// generator is the node metadata GENERATOR of the kind's nodes; ""
	// for the kind of nodes that name none (or one no row has).
	generator string
	reads     model.Reads
	gens      generators
	// generate generates a group of the kind in full, on its own.
	generate func(s *model.Snapshot, p *Proxy, key string) (*generation, error)
	// newCache returns the kind's part of one cache: what it keeps across
	// the cache's groups and how a push brings them forward.
	newCache func(c *cache) kindCache
	// lookup returns a resource of g the kind makes on demand by name
	// (nil: none); nil when the kind makes none.
	lookup func(g *generation, typeURL, name string) *resource
	// staged: the kind's state-of-the-world streams get make-before-break
	// (staging.go).
	staged bool
	// agentStreams: the kind's streams may be a VM agent's own, which ask
	// for the WorkloadGroup they register under (workloadgroup.go).
	agentStreams bool
	// envoy: the kind's proxies are Envoys, in front of a workload that
	// takes mTLS (Proxy.RunsEnvoy).
	envoy bool
}

// kindCache is one kind's part of a cache.
type kindCache interface {
	// build generates group key of p at s, for the cache (sharing what
	// the kind keeps across groups at s).
	build(s *model.Snapshot, p *Proxy, key string) (*generation, error)
	// push prepares bringing the kind's live groups to s, given what
	// differs from their snapshot (md; nil when there was none), and
	// returns the step that brings one forward under its key at s.
	push(s *model.Snapshot, md *model.Diff, live []*generation) pushStep
	// adopt is told, under the cache's lock, that g, generated at the
	// cache's snapshot, is one of its groups.
	adopt(g *generation)
	// installed is told, under the cache's lock, that a push made gens
	// the cache's groups at s.
	installed(s *model.Snapshot, gens map[string]*generation)
	// dropped is told, under the cache's lock, that g left the cache,
	// whose groups are now gens.
	dropped(g *generation, gens map[string]*generation)
}

// pushStep brings a group forward to a push's snapshot under key: its new
// generation, and the names that changed when known (nil: the cache
// compares the generations).
type pushStep func(old *generation, key string) (*generation, *genDiff, error)

// kindTable is the one table of proxy kinds vmesh serves, in order. Adding
// a kind is one package under xds and one row here (and one more in the
// array's length: an array, so that looking a kind up allocates nothing).
func kindTable() [2]kindRow {
	return [...]kindRow{
		{
			name: sidecar.Kind{}.Name(), reads: sidecar.Kind{}.Reads(),
			gens: generators{sidecar.Listeners, sidecar.Routes, sidecar.Clusters, sidecar.Endpoints, nil, nil},
			generate: func(s *model.Snapshot, p *Proxy, key string) (*generation, error) {
				return generateSidecar(s, p, key, nil)
			},
			newCache: newSidecarCache,
			envoy:    true,
		},
		{
			name: grpcgen.Kind{}.Name(), generator: node.GeneratorGRPC, reads: grpcgen.Kind{}.Reads(),
			gens:     generators{grpcgen.Listeners, grpcgen.Routes, grpcgen.Clusters, grpcgen.Endpoints, grpcgen.InboundListener, grpcgen.NameTable},
			generate: generateProxyless,
			newCache: newProxylessCache,
			lookup:   proxylessLookup,
			staged:   true, agentStreams: true,
		},
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

// kindOfGenerator returns the kind of a node whose metadata GENERATOR is
// gen: the row that names it, else the row that names none.
func kindOfGenerator(gen string) model.ProxyKind {
	var def model.ProxyKind
	for _, r := range kindTable() {
		switch r.generator {
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
func generate(s *model.Snapshot, p *Proxy, key string) (*generation, error) {
	k, err := kindNamed(p.Kind)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", p.ID, err)
	}
	return k.generate(s, p, key)
}

// generatorsFor returns the generators of w's kind.
func generatorsFor(w model.Workload) (generators, error) {
	r, err := kindNamed(w.Kind)
	if err != nil {
		return generators{}, fmt.Errorf("proxy %s: %w", w.ID, err)
	}
	return r.gens, nil
}

// generateWith runs one generator of p's kind on p's View of s.
func generateWith[T any](s *model.Snapshot, p *Proxy, pick func(generators) func(*model.View) ([]T, error)) ([]T, error) {
	w := p.Workload()
	gens, err := generatorsFor(w)
	if err != nil {
		return nil, err
	}
	return pick(gens)(model.NewView(s, w))
}

// Listeners returns the client listeners for a proxy.
func Listeners(s *model.Snapshot, p *Proxy) ([]*listenerv3.Listener, error) {
	return generateWith(s, p, func(g generators) func(*model.View) ([]*listenerv3.Listener, error) { return g.listeners })
}

// Routes returns the route configurations for a proxy.
func Routes(s *model.Snapshot, p *Proxy) ([]*routev3.RouteConfiguration, error) {
	return generateWith(s, p, func(g generators) func(*model.View) ([]*routev3.RouteConfiguration, error) { return g.routes })
}

// Clusters returns the outbound clusters for a proxy.
func Clusters(s *model.Snapshot, p *Proxy) ([]*clusterv3.Cluster, error) {
	return generateWith(s, p, func(g generators) func(*model.View) ([]*clusterv3.Cluster, error) { return g.clusters })
}

// Endpoints returns the ClusterLoadAssignments for a proxy's EDS clusters.
func Endpoints(s *model.Snapshot, p *Proxy) ([]*endpointv3.ClusterLoadAssignment, error) {
	return generateWith(s, p, func(g generators) func(*model.View) ([]*endpointv3.ClusterLoadAssignment, error) { return g.endpoints })
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
	if gens.inbound == nil {
		return nil, fmt.Errorf("proxy %s: Envoy sidecars have no per-address server listeners (%s)", p.ID, name)
	}
	return gens.inbound(model.NewView(s, w), name)
}
