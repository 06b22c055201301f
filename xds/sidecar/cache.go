package sidecar

import (
	"sync"
	"time"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
)

// cache is the Envoy sidecar's part of a server cache: the scopes' parts
// at the cache's snapshot, by model.OutboundKey (generation.go), from
// which every sidecar group of a scope is composed, and the clusters the
// scopes share (clusterMemo).
type cache struct {
	env gen.Env // the server cache's logger and metrics

	mu   sync.Mutex
	snap *model.Snapshot // the cache's snapshot
	outs map[string]*outboundPart
	// memo is the scopes' shared clusters at its snapshot.
	memo *clusterMemo
	// outFlights generate scope parts outside the cache's lock, one per
	// key and snapshot (gen.Flights).
	outFlights gen.Flights[*outboundPart]
}

func newCache(env gen.Env) *cache {
	return &cache{env: env, outs: map[string]*outboundPart{}}
}

var _ gen.KindCache = (*cache)(nil)

// Build generates a sidecar group on its scope's part at s (outbound).
func (sc *cache) Build(s *model.Snapshot, p model.Workload, key string) (*gen.Generation, error) {
	out, err := sc.outbound(s, p)
	if err != nil {
		return nil, err
	}
	return generateSidecar(s, p, key, out)
}

// outbound returns the part of p's scope at s: the cache's, else
// generated once (outFlights) and kept when s is still the cache's
// snapshot.
func (sc *cache) outbound(s *model.Snapshot, p model.Workload) (*outboundPart, error) {
	key := model.OutboundKey(s, p)
	sc.mu.Lock()
	o := sc.outs[key]
	sc.mu.Unlock()
	if o != nil && o.snap == s {
		return o, nil
	}
	return sc.outFlights.Do(s, key, func() (*outboundPart, error) {
		sc.mu.Lock()
		o := sc.outs[key]
		sc.mu.Unlock()
		if o != nil && o.snap == s {
			return o, nil
		}
		o, err := generateOutbound(s, p, key, sc.clusterMemoFor(s))
		if err != nil {
			return nil, err
		}
		sc.mu.Lock()
		if sc.snap == s {
			sc.outs[key] = o
		}
		sc.mu.Unlock()
		return o, nil
	})
}

// clusterMemoFor returns the memo for snapshot s, a new one when it holds
// another snapshot's.
func (sc *cache) clusterMemoFor(s *model.Snapshot) *clusterMemo {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.memo == nil || sc.memo.snap != s {
		sc.memo = newClusterMemo(s)
	}
	return sc.memo
}

// Push brings the scopes of the live groups to s first, each once: from
// its part at the previous snapshot by what differs (updateOutbound), or
// generated again. Each group is then composed on its scope's new part
// and its own (updateSidecar, or generateSidecar under a new key).
func (sc *cache) Push(s *model.Snapshot, md *model.Diff, live []*gen.Generation) gen.PushStep {
	scopes := map[string]*outboundChange{}
	memo := sc.clusterMemoFor(s)
	var scopeJobs []func()
	for _, g := range live {
		okey := model.OutboundKey(s, g.Workload)
		out := outOf(g)
		if oc := scopes[okey]; oc != nil {
			if oc.base == nil && out != nil && out.key == okey {
				oc.base = out
			}
			continue
		}
		oc := &outboundChange{}
		if out != nil && out.key == okey {
			oc.base = out
		}
		scopes[okey] = oc
		p := g.Workload
		scopeJobs = append(scopeJobs, func() {
			start := time.Now()
			switch {
			case oc.base != nil && md != nil && md.Empty():
				*oc = *rebaseOutbound(oc.base, s)
			case oc.base != nil && md != nil && !md.Global:
				oc.part, oc.changed, oc.err = updateOutbound(oc.base, s, md)
			default:
				oc.part, oc.err = generateOutbound(s, p, okey, memo)
				if oc.err == nil && oc.base != nil {
					oc.changed = diffOutbound(oc.base, oc.part) // once per scope, not per VM
				}
			}
			if oc.err != nil {
				sc.env.Logger.Error("generating xDS config", "scope", okey, "version", gen.Version(s), "error", oc.err)
			}
			sc.env.Generated(start)
		})
	}
	gen.Parallel(scopeJobs)
	return func(old *gen.Generation, key string) (*gen.Generation, *gen.Diff, error) {
		oc := scopes[model.OutboundKey(s, old.Workload)]
		switch {
		case oc.err != nil:
			return nil, nil, oc.err
		case key == old.Key:
			return updateSidecar(old, s, md, oc)
		default:
			g, err := generateSidecar(s, old.Workload, key, oc.part)
			return g, nil, err
		}
	}
}

// Adopt keeps the scope part of a group generated at the cache's
// snapshot.
func (sc *cache) Adopt(g *gen.Generation) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if o := outOf(g); o != nil && sc.outs[o.key] == nil {
		sc.outs[o.key] = o
	}
}

// Installed keeps the scope parts of the groups a push installed.
func (sc *cache) Installed(s *model.Snapshot, gens map[string]*gen.Generation) {
	outs := map[string]*outboundPart{}
	for _, g := range gens {
		if o := outOf(g); o != nil {
			outs[o.key] = o
		}
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.snap, sc.outs = s, outs
}

// Dropped drops a scope's part when no group of the cache uses it any
// more.
func (sc *cache) Dropped(g *gen.Generation, gens map[string]*gen.Generation) {
	o := outOf(g)
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if o == nil || sc.outs[o.key] != o {
		return
	}
	for _, g := range gens {
		if outOf(g) == o {
			return
		}
	}
	delete(sc.outs, o.key)
}
