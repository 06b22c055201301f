package xds

import (
	"fmt"
	"time"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/gen"
)

// groups is the cache's generation side, as go-control-plane keeps
// snapshot content apart from watch status: the generation of every group
// at the current snapshot, what the last push changed in each, and each
// proxy kind's part (kinds.go). The stream side (cache.go: watches, what
// was sent, members) reads it; it reads nothing of the streams. Guarded
// by cache.mu.
type groups struct {
	snap    *model.Snapshot
	gens    map[string]*gen.Generation // by group key, for snap
	genErrs map[string]error           // groups that failed to generate, for snap
	// diffs says, for each generation made by the last push from an older
	// one, which resource names changed: watches whose names did not change
	// are not re-examined.
	diffs map[*gen.Generation]*gen.Diff
	// kinds are the proxy kinds of the table (kinds.go), each with what
	// it keeps across the cache's groups (an Envoy sidecar's scope parts).
	kinds map[model.ProxyKind]*cacheKind
	// groupFlights generate new groups outside mu, one per key and
	// snapshot (gen.Flights).
	groupFlights gen.Flights[*gen.Generation]
	// generating, when set (tests), is called with a group's key before
	// the group is generated outside mu.
	generating func(key string)
}

// cacheKind is one kind of the table and its part of the cache.
type cacheKind struct {
	row   kindRow
	cache gen.KindCache
}

// kindFor returns kind k in the cache; for an unknown kind, one whose
// every generation fails.
func (c *cache) kindFor(k model.ProxyKind) *cacheKind {
	if k := c.kinds[k]; k != nil {
		return k
	}
	return &cacheKind{cache: unknownKind{}}
}

// unknownKind is the cache's part of a kind the table does not have.
type unknownKind struct{}

// Build fails: the kind is unknown.
func (unknownKind) Build(_ *model.Snapshot, w model.Workload, _ string) (*gen.Generation, error) {
	return nil, fmt.Errorf("proxy %s: unknown proxy kind %q", w.ID, w.Kind)
}

// Push returns a step that fails: the kind is unknown.
func (unknownKind) Push(*model.Snapshot, *model.Diff, []*gen.Generation) gen.PushStep {
	return func(old *gen.Generation, _ string) (*gen.Generation, *gen.Diff, error) {
		return nil, nil, fmt.Errorf("proxy %s: unknown proxy kind %q", old.Workload.ID, old.Workload.Kind)
	}
}

// Adopt keeps nothing.
func (unknownKind) Adopt(*gen.Generation) {}

// Installed keeps nothing.
func (unknownKind) Installed(*model.Snapshot, map[string]*gen.Generation) {}

// Dropped keeps nothing.
func (unknownKind) Dropped(*gen.Generation, map[string]*gen.Generation) {}

// ensureGenerationLocked returns the group generation of w's proxy for
// the current snapshot, generating it on first use; nil when generation
// fails (the error is logged once per group and snapshot). A new group is
// generated with c.mu released (other streams are answered meanwhile) and
// the lock taken again; when a push installed a newer snapshot in between,
// the group is looked up or generated at that one. Callers hold c.mu and
// c.snap is not nil.
func (c *cache) ensureGenerationLocked(w *watch) *gen.Generation {
	for {
		s := c.snap
		key := w.groupKey(s)
		if g := c.gens[key]; g != nil {
			return g
		}
		if _, failed := c.genErrs[key]; failed {
			return nil
		}
		c.mu.Unlock()
		c.generateGroup(s, w.proxy, key)
		c.mu.Lock()
		if c.snap == s {
			return c.gens[key]
		}
	}
}

// generateGroup generates the group key of proxy p at snapshot s, unless
// another stream is generating it (then it waits for that), and installs it
// (or its error) when s is still the cache's snapshot. Callers do not hold
// c.mu.
func (c *cache) generateGroup(s *model.Snapshot, p *Proxy, key string) {
	_, _ = c.groupFlights.Do(s, key, func() (*gen.Generation, error) {
		c.mu.Lock()
		g, done := c.gens[key], c.snap != s
		c.mu.Unlock()
		if g != nil || done {
			return g, nil
		}
		if c.generating != nil {
			c.generating(key)
		}
		start := time.Now()
		g, err := c.build(s, p, key)
		c.metrics.generations.Inc()
		c.metrics.generateSeconds.Observe(time.Since(start).Seconds())
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.snap != s {
			return g, err // a push replaced the snapshot: its groups are its own
		}
		if err != nil {
			c.genErrs[key] = err
			c.logger.Error("generating xDS config", "group", key, "proxy", p.ID, "version", Version(s), "error", err)
			return nil, err
		}
		if c.gens[key] == nil {
			c.gens[key] = g
			c.kindFor(p.Kind).cache.Adopt(g)
		}
		c.metrics.groups.Set(float64(len(c.gens)))
		return g, nil
	})
}

// build generates a group at s, by its kind's part of the cache.
func (c *cache) build(s *model.Snapshot, p *Proxy, key string) (*gen.Generation, error) {
	return c.kindFor(p.Kind).cache.Build(s, p.Workload(), key)
}

// advance brings the live groups (those with open watches; liveKeys are
// their keys at oldSnap) to s, outside the cache's lock: it returns the
// new generations by key, the names each changed when known, the groups
// that failed, and what differs between the snapshots (nil without an
// oldSnap). Groups are brought forward by what differs (model.Compare):
// each kind readies its groups' push first, then the groups are brought
// forward on all cores.
func (c *cache) advance(oldSnap, s *model.Snapshot, live []*gen.Generation, liveKeys map[*gen.Generation]string) (map[string]*gen.Generation, map[*gen.Generation]*gen.Diff, map[string]error, *model.Diff) {
	type job struct {
		key  string
		old  *gen.Generation
		gen  *gen.Generation
		diff *gen.Diff
		err  error
	}
	var md *model.Diff
	if oldSnap != nil {
		md = model.Compare(oldSnap, s)
	}
	var jobs []*job
	keys := map[string]bool{}
	newKey := func(g *gen.Generation) string {
		if md.SameViewKeys() {
			return liveKeys[g]
		}
		return model.ViewKey(s, g.Workload) // GroupKey of the group's proxies
	}
	// Each kind readies its groups' push first (an Envoy sidecar's scope
	// parts, once per scope), then the groups are brought forward on all
	// cores.
	byKind := map[*cacheKind][]*gen.Generation{}
	var kinds []*cacheKind
	for _, g := range live {
		key := newKey(g)
		if !keys[key] {
			keys[key] = true
			jobs = append(jobs, &job{key: key, old: g})
		}
		k := c.kindFor(g.Workload.Kind)
		if _, ok := byKind[k]; !ok {
			kinds = append(kinds, k)
		}
		byKind[k] = append(byKind[k], g)
	}
	steps := make(map[*cacheKind]gen.PushStep, len(kinds))
	for _, k := range kinds {
		steps[k] = k.cache.Push(s, md, byKind[k])
	}
	var groupJobs []func()
	for _, j := range jobs {
		step := steps[c.kindFor(j.old.Workload.Kind)]
		groupJobs = append(groupJobs, func() {
			start := time.Now()
			j.gen, j.diff, j.err = step(j.old, j.key)
			c.metrics.generations.Inc()
			c.metrics.generateSeconds.Observe(time.Since(start).Seconds())
		})
	}
	gen.Parallel(groupJobs)
	gens := make(map[string]*gen.Generation, len(jobs))
	diffs := make(map[*gen.Generation]*gen.Diff, len(jobs))
	errs := map[string]error{}
	for _, j := range jobs {
		if j.err != nil {
			errs[j.key] = j.err
			c.logger.Error("generating xDS config", "group", j.key, "version", Version(s), "error", j.err)
			continue
		}
		gens[j.key] = j.gen
		switch {
		case j.diff != nil:
			diffs[j.gen] = j.diff
		case j.key == j.old.Key:
			diffs[j.gen] = gen.Compare(j.old, j.gen)
		}
	}
	return gens, diffs, errs, md
}

// install makes gens (and errs, diffs) the groups at s. Callers hold c.mu.
func (c *cache) install(s *model.Snapshot, gens map[string]*gen.Generation, errs map[string]error, diffs map[*gen.Generation]*gen.Diff) {
	c.snap, c.gens, c.genErrs, c.diffs = s, gens, errs, diffs
	for _, k := range c.kinds {
		k.cache.Installed(s, gens)
	}
}

// generationFor returns the current generation for a proxy, for debug output.
func (c *cache) generationFor(p *Proxy) *gen.Generation {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap == nil {
		return nil
	}
	return c.ensureGenerationLocked(&watch{proxy: p})
}

// groupKey returns the proxy's current group key, or "".
func (c *cache) groupKey(p *Proxy) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap == nil {
		return ""
	}
	return GroupKey(c.snap, p)
}
