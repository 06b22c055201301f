package store

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmesh/vmesh/internal/cowmap"
)

// SourceClass ranks sources when two of them define the same object: the
// lower class wins, so files and git beat registries, and registries beat
// agent registrations.
type SourceClass int

// Source classes, strongest first.
const (
	ClassConfig       SourceClass = iota // files and git
	ClassRegistry                        // Consul, ZooKeeper, static registries
	ClassRegistration                    // agent auto-registrations
)

// String names the class.
func (c SourceClass) String() string {
	switch c {
	case ClassConfig:
		return "config"
	case ClassRegistry:
		return "registry"
	case ClassRegistration:
		return "registration"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Source names one writer of the Store.
type Source struct {
	Name  string
	Class SourceClass
}

// SourceStatus is what a source last reported about itself.
type SourceStatus struct {
	Source string `json:"source"`
	Class  string `json:"class"`
	// Revision is the source's own version: a git commit SHA, or empty.
	Revision string        `json:"revision,omitempty"`
	Objects  int           `json:"objects"`
	Errors   []ConfigError `json:"errors,omitempty"`
	// Warnings are the source's files' warnings: config that applies
	// but is not (fully) enforced (an Istio kind vmesh does not
	// implement, a policy field it cannot enforce). The analysis across
	// sources is model/analysis's (analysis.Cache).
	Warnings []ConfigError `json:"warnings,omitempty"`
	// Held says, in one line, what the source keeps serving while it has
	// errors: the rejected commit and the commit still served, the files
	// keeping their last good version. It is not an error: one mistake
	// counts once, in Errors.
	Held string `json:"held,omitempty"`
	// Connection is the state of a source's connection to its server,
	// for sources that hold one (config over xDS): "connected",
	// "disconnected: <why>"; empty for the others.
	Connection string    `json:"connection,omitempty"`
	LastUpdate time.Time `json:"lastUpdate"`
}

// Conflict records two or more sources defining the same object.
type Conflict struct {
	Key    Key      `json:"-"`
	Object string   `json:"object"`
	Winner Origin   `json:"winner"`
	Losers []Origin `json:"losers"`
}

// Snapshot is an immutable, point-in-time view of the Store. Readers may use
// it without locks; it is never modified after it is published.
type Snapshot struct {
	// Revision counts effective changes to the Store since it was created.
	Revision int64
	// configRevision is the Revision of the last change to anything but
	// WorkloadEntries no file defines, before or after (ConfigRevision).
	configRevision int64
	byKind         map[Kind]*sortedList
	byKey          *cowmap.Map[Key, *Object]
	// Sources holds every source's status, sorted by name.
	Sources []SourceStatus
	// Conflicts lists objects defined by more than one source, sorted by key.
	Conflicts []Conflict
}

// List returns the objects of one kind sorted by namespace and name. The
// slice is shared: do not modify it.
func (s *Snapshot) List(kind Kind) []*Object {
	if l := s.byKind[kind]; l != nil {
		return l.get(s.byKey)
	}
	return nil
}

// Get returns the object with the key, or nil.
func (s *Snapshot) Get(k Key) *Object {
	o, _ := s.byKey.Get(k)
	return o
}

// ConfigRevision is the Revision of the last change to anything but the
// WorkloadEntries that no file defines (a registry's endpoints, agents'
// registrations): what reads only the configured objects, like the
// analysis, is computed again only when it moves.
func (s *Snapshot) ConfigRevision() int64 { return s.configRevision }

// Len returns the number of objects in the snapshot.
func (s *Snapshot) Len() int { return s.byKey.Len() }

// Commit returns the git commit of the first git source, or "".
func (s *Snapshot) Commit() string {
	for _, st := range s.Sources {
		if st.Revision != "" && len(st.Source) > 4 && st.Source[:4] == "git:" {
			return st.Revision
		}
	}
	return ""
}

// Changes is the set of keys whose winning object changed, up to a revision.
type Changes struct {
	Revision int64
	// Keys may be shared with other subscribers: read it, never modify it.
	Keys map[Key]struct{}
}

// Kinds reports which kinds appear in the changes.
func (c Changes) Kinds() map[Kind]bool {
	out := make(map[Kind]bool)
	for k := range c.Keys {
		out[k.Kind] = true
	}
	return out
}

// Store is the memory config store. Sources write it only with Replace;
// readers take Snapshots. It is safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	sources  map[string]*sourceState
	current  *Snapshot
	subs     map[*Subscription]struct{}
	revision int64
	// health holds agents' reports on config-defined WorkloadEntries
	// (SetHealth, SetRemoteHealth).
	health healthReports
}

type sourceState struct {
	src     Source
	objects map[Key]*Object
	status  SourceStatus
}

// NewStore returns an empty Store at revision 0.
func NewStore() *Store {
	return &Store{
		sources: make(map[string]*sourceState),
		current: &Snapshot{byKind: map[Kind]*sortedList{}, byKey: cowmap.New[Key, *Object]()},
		subs:    make(map[*Subscription]struct{}),
	}
}

// Snapshot returns the current immutable snapshot.
func (s *Store) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// Replace sets the complete object set of one source. The Store computes the
// difference against the source's previous set, resolves which source wins
// each key, and notifies subscribers of the keys whose winner changed. It
// rejects a set that names one key twice, changing nothing.
func (s *Store) Replace(src Source, objects []*Object) error {
	return s.replace(src, objects, nil)
}

// StatusChange is a source's revision and current problems (errors and
// warnings, kept apart by Severity) with the line saying what it keeps
// serving while it has errors: what SetStatusHeld records.
type StatusChange struct {
	Revision string
	Problems []ConfigError
	Held     string
}

// ReplaceWithStatus is Replace and SetStatusHeld in one snapshot: no
// reader sees the source's new objects with its old problems or the
// other way round (a fetcher whose warnings describe the objects it
// stores needs both at once).
func (s *Store) ReplaceWithStatus(src Source, objects []*Object, status StatusChange) error {
	return s.replace(src, objects, &status)
}

func (s *Store) replace(src Source, objects []*Object, status *StatusChange) error {
	next := make(map[Key]*Object, len(objects))
	for _, o := range objects {
		n := len(next)
		if next[o.Key] = o; len(next) == n {
			return duplicateError(src, objects, o)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sourceLocked(src)
	// The keys whose object changed, each once: those gone or replaced,
	// then those new.
	touched := make([]Key, 0, max(len(next), len(st.objects)))
	for k, o := range st.objects {
		if n, ok := next[k]; !ok || n != o {
			touched = append(touched, k)
		}
	}
	for k := range next {
		if _, ok := st.objects[k]; !ok {
			touched = append(touched, k)
		}
	}
	st.objects = next
	st.status.Objects = len(next)
	st.status.LastUpdate = time.Now()
	if status != nil {
		st.setStatus(*status)
	}
	s.publish(touched)
	return nil
}

// duplicateError names the two objects of objects with dup's key (dup
// being the second of them).
func duplicateError(src Source, objects []*Object, dup *Object) error {
	first := dup
	for _, o := range objects {
		if o.Key == dup.Key {
			first = o
			break
		}
	}
	return fmt.Errorf("source %s: %s defined twice: %s and %s", src.Name, dup.Key, first.Origin, dup.Origin)
}

// Update changes part of one source's object set: it adds or replaces the
// objects in set and removes the keys in remove, leaving the source's
// other objects as they are. It costs what changed, not the source's size
// (a file source uses it for one edited file). It rejects a key named
// twice, changing nothing.
func (s *Store) Update(src Source, set []*Object, remove []Key) error {
	return s.update(src, set, remove, nil)
}

// UpdateWithStatus is Update and SetStatusHeld in one snapshot: a file
// source's edited objects and the problems of its files change together,
// and a git source's objects and the commit they are at (the status's
// Revision), so no snapshot labels one commit's objects with another's SHA.
func (s *Store) UpdateWithStatus(src Source, set []*Object, remove []Key, status StatusChange) error {
	return s.update(src, set, remove, &status)
}

func (s *Store) update(src Source, set []*Object, remove []Key, status *StatusChange) error {
	seen := make(map[Key]*Object, len(set)+len(remove))
	for _, o := range set {
		n := len(seen)
		if seen[o.Key] = o; len(seen) == n {
			return duplicateError(src, set, o)
		}
	}
	for _, k := range remove {
		if o, dup := seen[k]; dup {
			return fmt.Errorf("source %s: %s both set (%s) and removed", src.Name, k, o.Origin)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sourceLocked(src)
	if st.objects == nil {
		st.objects = map[Key]*Object{}
	}
	// Each key once: set's are distinct and not in remove, and a key
	// removed twice is found only the first time.
	touched := make([]Key, 0, len(set)+len(remove))
	for _, o := range set {
		if st.objects[o.Key] != o {
			st.objects[o.Key] = o
			touched = append(touched, o.Key)
		}
	}
	for _, k := range remove {
		if _, ok := st.objects[k]; ok {
			delete(st.objects, k)
			touched = append(touched, k)
		}
	}
	st.status.Objects = len(st.objects)
	st.status.LastUpdate = time.Now()
	if status != nil {
		st.setStatus(*status)
	}
	s.publish(touched)
	return nil
}

// sourceLocked returns src's state, creating it. Callers hold s.mu.
func (s *Store) sourceLocked(src Source) *sourceState {
	st := s.sources[src.Name]
	if st == nil {
		st = &sourceState{src: src, status: SourceStatus{Source: src.Name, Class: src.Class.String()}}
		s.sources[src.Name] = st
	}
	return st
}

// SetStatus records a source's revision and current problems: errors,
// and warnings (any other Severity), kept apart in its status. Neither
// changes config: the source's last good objects keep serving.
func (s *Store) SetStatus(src Source, revision string, errs []ConfigError) {
	s.SetStatusHeld(src, revision, errs, "")
}

// SetStatusHeld is SetStatus with the line saying what the source keeps
// serving while it has errors (SourceStatus.Held).
func (s *Store) SetStatusHeld(src Source, revision string, errs []ConfigError, held string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sourceLocked(src).setStatus(StatusChange{Revision: revision, Problems: errs, Held: held})
	s.publish(nil)
}

// setStatus records c on the source's status, its problems split into
// errors and warnings. Callers hold the Store's lock.
func (st *sourceState) setStatus(c StatusChange) {
	var bad, warn []ConfigError
	for _, e := range c.Problems {
		if e.Severity == SeverityError {
			bad = append(bad, e)
		} else {
			warn = append(warn, e)
		}
	}
	st.status.Revision = c.Revision
	st.status.Errors, st.status.Warnings, st.status.Held = bad, warn, c.Held
	st.status.LastUpdate = time.Now()
}

// SetConnection records the state of a source's connection to its
// server (SourceStatus.Connection); it changes no config.
func (s *Store) SetConnection(src Source, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sourceLocked(src)
	if st.status.Connection == state {
		return
	}
	st.status.Connection = state
	s.publish(nil)
}

// publish builds the next snapshot after the keys in touched (each named
// once) may have changed. Callers hold s.mu.
func (s *Store) publish(touched []Key) {
	old := s.current
	order := s.sourceOrder()
	changed := make(map[Key]struct{}, len(touched))
	byKey := old.byKey
	kindsDirty := make(map[Kind][]Key) // the touched keys by kind
	configChanged := false             // a change to the configured objects (ConfigRevision)
	if len(touched) > 0 {
		edit := old.byKey.Edit()
		wasEmpty := old.byKey.Len() == 0 // a first set: no previous object to look up
		for _, k := range touched {
			var winner *Object
			for _, st := range order {
				if o := st.objects[k]; o != nil {
					winner = o
					break
				}
			}
			if winner != nil {
				winner = s.withHealth(winner)
			}
			var prev *Object
			if !wasEmpty {
				prev, _ = old.byKey.Get(k)
			}
			switch {
			case winner == nil && prev == nil:
				continue
			case winner == nil:
				edit.Delete(k)
			default:
				edit.Set(k, winner)
			}
			if winner == nil || prev == nil || !sameContent(prev, winner) {
				changed[k] = struct{}{}
				if !configChanged {
					configChanged = k.Kind != KindWorkloadEntry || (prev != nil && prev.Origin.File != "") || (winner != nil && winner.Origin.File != "")
				}
			}
			kindsDirty[k.Kind] = append(kindsDirty[k.Kind], k)
		}
		byKey = edit.Map()
	}
	if len(changed) > 0 {
		s.revision++
	}
	next := &Snapshot{Revision: s.revision, configRevision: old.configRevision, byKey: byKey, byKind: old.byKind}
	if configChanged {
		next.configRevision = s.revision
	}
	if len(kindsDirty) > 0 {
		next.byKind = maps.Clone(old.byKind)
		for kind, keys := range kindsDirty {
			next.byKind[kind] = nextList(old.byKind[kind], kind, keys, byKey)
		}
	}
	for _, st := range order {
		next.Sources = append(next.Sources, st.status)
	}
	slices.SortFunc(next.Sources, func(a, b SourceStatus) int { return cmp.Compare(a.Source, b.Source) })
	next.Conflicts = s.conflicts(order, old.Conflicts, touched, byKey)
	s.current = next
	if len(changed) > 0 {
		for sub := range s.subs {
			sub.add(s.revision, changed)
		}
	}
}

// CompareObjects orders objects by namespace, then name.
func CompareObjects(a, b *Object) int { return compareNames(a.Namespace, a.Name, b.Namespace, b.Name) }

// compareNames orders (namespace, name) pairs. Namespaces are nearly
// always equal, so they are tested for equality first: one comparison
// per pair where cmp.Compare makes two.
func compareNames(ns1, name1, ns2, name2 string) int {
	if ns1 != ns2 {
		return strings.Compare(ns1, ns2)
	}
	return strings.Compare(name1, name2)
}

// conflicts recomputes the conflict list for touched keys, keeping the rest.
func (s *Store) conflicts(order []*sourceState, prev []Conflict, touched []Key, byKey *cowmap.Map[Key, *Object]) []Conflict {
	switch {
	case len(touched) == 0:
		return prev
	case len(order) < 2:
		return nil // one source defines each key once
	}
	var out []Conflict
	if len(prev) > 0 {
		retold := make(map[Key]bool, len(touched))
		for _, k := range touched {
			retold[k] = true
		}
		for _, c := range prev {
			if !retold[c.Key] {
				out = append(out, c)
			}
		}
	}
	for _, k := range touched {
		var losers []Origin
		winner, _ := byKey.Get(k)
		for _, st := range order {
			if o := st.objects[k]; o != nil && o != winner {
				losers = append(losers, o.Origin)
			}
		}
		if len(losers) > 0 {
			out = append(out, Conflict{Key: k, Object: k.String(), Winner: winner.Origin, Losers: losers})
		}
	}
	slices.SortFunc(out, func(a, b Conflict) int { return cmp.Compare(a.Object, b.Object) })
	return out
}

// sourceOrder returns sources strongest first: by class, then by name.
func (s *Store) sourceOrder() []*sourceState {
	out := make([]*sourceState, 0, len(s.sources))
	for _, st := range s.sources {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *sourceState) int {
		return cmp.Or(cmp.Compare(a.src.Class, b.src.Class), cmp.Compare(a.src.Name, b.src.Name))
	})
	return out
}

// Subscription delivers change notifications. Changes accumulate until read,
// so a slow reader never loses one and never blocks the Store.
type Subscription struct {
	store   *Store
	c       chan struct{}
	mu      sync.Mutex
	pending Changes
	// shared says pending.Keys is a publication's own set (every
	// subscriber's, never written again), to be copied before adding.
	shared bool
}

// Subscribe registers for change notifications. Call Close when done.
func (s *Store) Subscribe() *Subscription {
	sub := &Subscription{store: s, c: make(chan struct{}, 1)}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	return sub
}

// C is signalled (without blocking the Store) when changes are pending.
func (sub *Subscription) C() <-chan struct{} { return sub.c }

// Take returns and clears the pending changes.
func (sub *Subscription) Take() Changes {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	c := sub.pending
	sub.pending, sub.shared = Changes{}, false
	return c
}

// Close unregisters the subscription.
func (sub *Subscription) Close() {
	sub.store.mu.Lock()
	delete(sub.store.subs, sub)
	sub.store.mu.Unlock()
}

func (sub *Subscription) add(rev int64, keys map[Key]struct{}) {
	sub.mu.Lock()
	switch {
	case sub.pending.Keys == nil:
		// The publication's set as it is: a registry's first set is
		// 100,000 keys, and every subscriber would copy it.
		sub.pending.Keys, sub.shared = keys, true
	default:
		if sub.shared {
			sub.pending.Keys, sub.shared = maps.Clone(sub.pending.Keys), false
		}
		for k := range keys {
			sub.pending.Keys[k] = struct{}{}
		}
	}
	sub.pending.Revision = rev
	sub.mu.Unlock()
	select {
	case sub.c <- struct{}{}:
	default:
	}
}

// SourceObjects returns a copy of the objects of the source named name and
// its revision (SourceStatus.Revision).
func (s *Store) SourceObjects(name string) (map[Key]*Object, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sources[name]
	if st == nil {
		return nil, ""
	}
	return maps.Clone(st.objects), st.status.Revision
}

// SnapshotWith returns a snapshot of the Store as it would be were the
// objects of the source named name objects, at revision: what a staged
// rollout serves the proxies that keep the last good commit of a git
// source while the Store holds its next one. The Store is not changed and
// its subscribers learn nothing; the snapshot has the Store's Revision.
func (s *Store) SnapshotWith(name string, objects map[Key]*Object, revision string) *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	tmp := &Store{sources: make(map[string]*sourceState, len(s.sources)), health: s.health,
		current: &Snapshot{byKind: map[Kind]*sortedList{}, byKey: cowmap.New[Key, *Object]()}}
	keys := map[Key]struct{}{}
	for n, st := range s.sources {
		c := *st
		if n == name {
			c.objects = objects
			c.status.Revision = revision
			c.status.Objects = len(objects)
		}
		for k := range c.objects {
			keys[k] = struct{}{}
		}
		tmp.sources[n] = &c
	}
	tmp.publish(slices.Collect(maps.Keys(keys)))
	snap := tmp.current
	snap.Revision, snap.configRevision = s.current.Revision, s.current.configRevision
	return snap
}
