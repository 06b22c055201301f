package xds

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/vmesh/vmesh/internal/cowmap"
	"github.com/vmesh/vmesh/model"
)

// groups is the cache's generation side, as go-control-plane keeps
// snapshot content apart from watch status: the generation of every group
// at the current snapshot, what the last push changed in each, and each
// proxy kind's part (kinds.go). The stream side (cache.go: watches, what
// was sent, members) reads it; it reads nothing of the streams. Guarded
// by cache.mu.
type groups struct {
	snap    *model.Snapshot
	gens    map[string]*generation // by group key, for snap
	genErrs map[string]error       // groups that failed to generate, for snap
	// diffs says, for each generation made by the last push from an older
	// one, which resource names changed: watches whose names did not change
	// are not re-examined.
	diffs map[*generation]*genDiff
	// kinds are the proxy kinds of the table (kinds.go), each with what
	// it keeps across the cache's groups (an Envoy sidecar's scope parts).
	kinds map[model.ProxyKind]*cacheKind
	// groupFlights generate new groups outside mu, one per key and
	// snapshot (flight.go).
	groupFlights flights[*generation]
	// generating, when set (tests), is called with a group's key before
	// the group is generated outside mu.
	generating func(key string)
}

// genDiff is what changed between a group's previous generation and its
// current one, per type URL.
type genDiff struct {
	prev    *generation
	changed map[string]map[string]bool
	// inboundSame says the on-demand server listeners cannot differ (the
	// generation was updated, not generated again), so changed covers
	// every listener name.
	inboundSame bool
}

// diffGenerations compares two generations of a group resource by resource.
func diffGenerations(prev, next *generation) *genDiff {
	d := &genDiff{prev: prev, changed: make(map[string]map[string]bool, len(typeURLs))}
	same := func(a, b *resource) bool { return a == b || a.hash == b.hash }
	for _, t := range typeURLs {
		ch := map[string]bool{}
		if prev.types[t] != nil && next.types[t] != nil {
			for n := range cowmap.Changed(prev.types[t], next.types[t], same) {
				ch[n] = true
			}
		}
		d.changed[t] = ch
	}
	return d
}

// cacheKind is one kind of the table and its part of the cache.
type cacheKind struct {
	row   kindRow
	cache kindCache
}

// kindFor returns p's kind in the cache; for an unknown kind, one whose
// every generation fails.
func (c *cache) kindFor(p *Proxy) *cacheKind {
	if k := c.kinds[p.Kind]; k != nil {
		return k
	}
	return &cacheKind{cache: unknownKind{}}
}

// unknownKind is the cache's part of a kind the table does not have.
type unknownKind struct{}

func (unknownKind) build(_ *model.Snapshot, p *Proxy, _ string) (*generation, error) {
	return nil, fmt.Errorf("proxy %s: unknown proxy kind %q", p.ID, p.Kind)
}

func (unknownKind) push(*model.Snapshot, *model.Diff, []*generation) pushStep {
	return func(old *generation, _ string) (*generation, *genDiff, error) {
		return nil, nil, fmt.Errorf("proxy %s: unknown proxy kind %q", old.proxy.ID, old.proxy.Kind)
	}
}

func (unknownKind) adopt(*generation)                                 {}
func (unknownKind) installed(*model.Snapshot, map[string]*generation) {}
func (unknownKind) dropped(*generation, map[string]*generation)       {}

// ensureGenerationLocked returns the group generation of w's proxy for
// the current snapshot, generating it on first use; nil when generation
// fails (the error is logged once per group and snapshot). A new group is
// generated with c.mu released (other streams are answered meanwhile) and
// the lock taken again; when a push installed a newer snapshot in between,
// the group is looked up or generated at that one. Callers hold c.mu and
// c.snap is not nil.
func (c *cache) ensureGenerationLocked(w *watch) *generation {
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
	_, _ = c.groupFlights.do(s, key, func() (*generation, error) {
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
			c.kindFor(p).cache.adopt(g)
		}
		c.metrics.groups.Set(float64(len(c.gens)))
		return g, nil
	})
}

// build generates a group at s, by its kind's part of the cache.
func (c *cache) build(s *model.Snapshot, p *Proxy, key string) (*generation, error) {
	return c.kindFor(p).cache.build(s, p, key)
}

// advance brings the live groups (those with open watches; liveKeys are
// their keys at oldSnap) to s, outside the cache's lock: it returns the
// new generations by key, the names each changed when known, the groups
// that failed, and what differs between the snapshots (nil without an
// oldSnap). Groups are brought forward by what differs (model.Compare):
// each kind readies its groups' push first, then the groups are brought
// forward on all cores.
func (c *cache) advance(oldSnap, s *model.Snapshot, live []*generation, liveKeys map[*generation]string) (map[string]*generation, map[*generation]*genDiff, map[string]error, *model.Diff) {
	type job struct {
		key  string
		old  *generation
		gen  *generation
		diff *genDiff
		err  error
	}
	var md *model.Diff
	if oldSnap != nil {
		md = model.Compare(oldSnap, s)
	}
	var jobs []*job
	keys := map[string]bool{}
	newKey := func(g *generation) string {
		if md.SameViewKeys() {
			return liveKeys[g]
		}
		return GroupKey(s, g.proxy)
	}
	// Each kind readies its groups' push first (an Envoy sidecar's scope
	// parts, once per scope), then the groups are brought forward on all
	// cores.
	byKind := map[*cacheKind][]*generation{}
	var kinds []*cacheKind
	for _, g := range live {
		key := newKey(g)
		if !keys[key] {
			keys[key] = true
			jobs = append(jobs, &job{key: key, old: g})
		}
		k := c.kindFor(g.proxy)
		if _, ok := byKind[k]; !ok {
			kinds = append(kinds, k)
		}
		byKind[k] = append(byKind[k], g)
	}
	steps := make(map[*cacheKind]pushStep, len(kinds))
	for _, k := range kinds {
		steps[k] = k.cache.push(s, md, byKind[k])
	}
	var groupJobs []func()
	for _, j := range jobs {
		step := steps[c.kindFor(j.old.proxy)]
		groupJobs = append(groupJobs, func() {
			start := time.Now()
			j.gen, j.diff, j.err = step(j.old, j.key)
			c.metrics.generations.Inc()
			c.metrics.generateSeconds.Observe(time.Since(start).Seconds())
		})
	}
	parallel(groupJobs)
	gens := make(map[string]*generation, len(jobs))
	diffs := make(map[*generation]*genDiff, len(jobs))
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
		case j.key == j.old.key:
			diffs[j.gen] = diffGenerations(j.old, j.gen)
		}
	}
	return gens, diffs, errs, md
}

// install makes gens (and errs, diffs) the groups at s. Callers hold c.mu.
func (c *cache) install(s *model.Snapshot, gens map[string]*generation, errs map[string]error, diffs map[*generation]*genDiff) {
	c.snap, c.gens, c.genErrs, c.diffs = s, gens, errs, diffs
	for _, k := range c.kinds {
		k.cache.installed(s, gens)
	}
}

// parallel runs fns on GOMAXPROCS goroutines and waits for them.
func parallel(fns []func()) {
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

// generationFor returns the current generation for a proxy, for debug output.
func (c *cache) generationFor(p *Proxy) *generation {
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
