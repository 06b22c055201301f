package gen

import (
	"log/slog"
	"runtime"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/nds"
)

// Kind is one proxy kind, as the server's one table of kinds (xds/kinds.go)
// holds it: a kind is a package providing a Kind, and a row naming it.
type Kind interface {
	// Name is the kind's name (model.ProxyKind).
	Name() model.ProxyKind
	// Reads declares what the kind's generators read of a proxy's View
	// (its group key derives from it).
	Reads() model.Reads
	// Traits are what the server needs to know of the kind's proxies and
	// streams.
	Traits() Traits
	// Generators are the kind's generators, each reading only a proxy's
	// View (xds.Listeners and its siblings run them).
	Generators() Generators
	// Generate generates the group key of w at s in full, on its own.
	Generate(s *model.Snapshot, w model.Workload, key string) (*Generation, error)
	// NewCache returns the kind's part of one server cache: what it keeps
	// across the cache's groups and how a push brings them forward.
	NewCache(env Env) KindCache
}

// Traits are what the server needs to know of a kind's proxies and
// streams.
type Traits struct {
	// Generator is the node metadata GENERATOR of the kind's nodes; ""
	// for the kind of nodes that name none (or one no kind has).
	Generator string
	// NodeType is the type an Istio-style node id of the kind's nodes
	// starts with ("router" for "router~IP~id~ns.svc.cluster.local"); ""
	// when the id does not decide. It wins over Generator.
	NodeType string
	// Staged: the kind's state-of-the-world streams get make-before-break
	// (xds/staging.go).
	Staged bool
	// AgentStreams: the kind's streams may be a VM agent's own, which ask
	// for the WorkloadGroup they register under.
	AgentStreams bool
	// Envoy: the kind's proxies are Envoys, in front of a workload that
	// takes mTLS.
	Envoy bool
}

// Generators are one proxy kind's generators, each reading only the
// proxy's View.
type Generators struct {
	// Listeners returns the client listeners (LDS).
	Listeners func(*model.View) ([]*listenerv3.Listener, error)
	// Routes returns the route configurations (RDS).
	Routes func(*model.View) ([]*routev3.RouteConfiguration, error)
	// Clusters returns the clusters (CDS).
	Clusters func(*model.View) ([]*clusterv3.Cluster, error)
	// Endpoints returns the load assignments of the EDS clusters.
	Endpoints func(*model.View) ([]*endpointv3.ClusterLoadAssignment, error)
	// Inbound returns a server listener by name; nil when the kind has
	// none (an Envoy sidecar serves inbound on virtualInbound).
	Inbound func(*model.View, string) (*listenerv3.Listener, error)
	// NameTable returns the DNS name table (NDS) the VM's agent asks for
	// on its own stream; nil when the kind's streams never ask for one.
	NameTable func(*model.View) (nds.Table, error)
	// Credentials lists the file credentials (credentialName) the kind's
	// config asks its agent for over SDS; nil when the kind asks for none.
	Credentials func(*model.View) []model.CredentialUse
}

// Env is what a kind's part of a cache may use of the cache: its logger,
// and where generation time is counted.
type Env struct {
	// Logger is the cache's.
	Logger *slog.Logger
	// Generated is told of each generation a kind runs on its own (a
	// shared part of several groups), started at start.
	Generated func(start time.Time)
}

// KindCache is one kind's part of a server cache. The cache calls build
// and push outside its lock, the others under it.
type KindCache interface {
	// Build generates group key of w at s, for the cache (sharing what
	// the kind keeps across groups at s).
	Build(s *model.Snapshot, w model.Workload, key string) (*Generation, error)
	// Push prepares bringing the kind's live groups to s, given what
	// differs from their snapshot (md; nil when there was none), and
	// returns the step that brings one forward under its key at s.
	Push(s *model.Snapshot, md *model.Diff, live []*Generation) PushStep
	// Adopt is told, under the cache's lock, that g, generated at the
	// cache's snapshot, is one of its groups.
	Adopt(g *Generation)
	// Installed is told, under the cache's lock, that a push made gens
	// the cache's groups at s.
	Installed(s *model.Snapshot, gens map[string]*Generation)
	// Dropped is told, under the cache's lock, that g left the cache,
	// whose groups are now gens.
	Dropped(g *Generation, gens map[string]*Generation)
}

// PushStep brings a group forward to a push's snapshot under key: its new
// generation, and the names that changed when known (nil: the cache
// compares the generations).
type PushStep func(old *Generation, key string) (*Generation, *Diff, error)

// Regenerating is the KindCache of a kind without an incremental update:
// every push generates each live group again with generate, and the
// server compares the new generation with the old (Compare), so a proxy
// is sent only the resources that changed. A kind whose generation is
// cheap (a few routers) needs nothing more; it keeps nothing across
// groups.
func Regenerating(generate func(s *model.Snapshot, w model.Workload, key string) (*Generation, error)) KindCache {
	return regenerating{generate: generate}
}

type regenerating struct {
	generate func(s *model.Snapshot, w model.Workload, key string) (*Generation, error)
}

// Build generates the group.
func (r regenerating) Build(s *model.Snapshot, w model.Workload, key string) (*Generation, error) {
	return r.generate(s, w, key)
}

// Push returns the step that generates a live group again at s.
func (r regenerating) Push(s *model.Snapshot, _ *model.Diff, _ []*Generation) PushStep {
	return func(old *Generation, key string) (*Generation, *Diff, error) {
		g, err := r.generate(s, old.Workload, key)
		return g, nil, err
	}
}

// Adopt keeps nothing.
func (regenerating) Adopt(*Generation) {}

// Installed keeps nothing.
func (regenerating) Installed(*model.Snapshot, map[string]*Generation) {}

// Dropped keeps nothing.
func (regenerating) Dropped(*Generation, map[string]*Generation) {}

// Parallel runs fns on GOMAXPROCS goroutines and waits for them.
func Parallel(fns []func()) {
	next := make(chan func())
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(fns)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for fn := range next {
				fn()
			}
		}()
	}
	for _, fn := range fns {
		next <- fn
	}
	close(next)
	wg.Wait()
}
