package model

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/vmesh/vmesh/store"
)

// FeedSettings tune how Store changes become snapshots.
type FeedSettings struct {
	// DebounceQuiet is how long the Store must stay quiet before a new
	// snapshot.
	DebounceQuiet time.Duration
	// DebounceMax bounds how long a snapshot waits under a steady stream of
	// changes.
	DebounceMax time.Duration
	// Mesh names the root namespace of mesh-wide policies and the trust
	// domain of SPIFFE IDs; zero fields take DefaultMesh()'s.
	Mesh Mesh
}

// DefaultFeedSettings returns the defaults: 100ms quiet, 1s max.
func DefaultFeedSettings() FeedSettings {
	return FeedSettings{DebounceQuiet: 100 * time.Millisecond, DebounceMax: time.Second}
}

// Validate checks the settings.
func (s FeedSettings) Validate() error {
	if s.DebounceQuiet < 0 || s.DebounceMax < 0 {
		return fmt.Errorf("model: debounce durations must not be negative (quiet %s, max %s)", s.DebounceQuiet, s.DebounceMax)
	}
	if s.DebounceMax < s.DebounceQuiet {
		return fmt.Errorf("model: debounce max %s is shorter than quiet %s", s.DebounceMax, s.DebounceQuiet)
	}
	return nil
}

// Update is one snapshot a Feed hands on.
type Update struct {
	Snapshot *Snapshot
	// First is when the first Store change in it arrived (when the feed
	// started, for the first snapshot): pushes measure convergence from it.
	First time.Time
	// Changes is how many Store keys changed since the previous snapshot.
	Changes int
	// Built is how long building the snapshot took.
	Built time.Duration
	// Leading is true when the change came after a quiet period and was
	// built at once, without waiting; false when it was batched (it came
	// while a burst or a previous push was going on).
	Leading bool
}

// Feed turns Store changes into snapshots: the one batching between the
// config sources and the proxies, for files, git, registries and
// registrations alike. Pushes are leading-edge: the first change after a
// quiet period (no change and no build for DebounceQuiet) is built and
// handed on at once. A change that arrives while a build is going on or
// within DebounceQuiet of the previous change or build belongs to a burst:
// it waits until the Store has been quiet for DebounceQuiet, at most
// DebounceMax after the burst's first change (as Istio's debounce max). The
// snapshot is rebuilt from the previous one when only that change happened
// (Rebuild), else built afresh.
type Feed struct {
	store    *store.Store
	settings FeedSettings
	// latest is the snapshot last handed to push.
	latest atomic.Pointer[Snapshot]
}

// NewFeed returns a Feed of store; zero settings mean
// DefaultFeedSettings() (with its Mesh).
func NewFeed(store *store.Store, settings FeedSettings) (*Feed, error) {
	if store == nil {
		return nil, errors.New("model: feed of a nil store")
	}
	if settings.DebounceQuiet == 0 && settings.DebounceMax == 0 {
		mesh := settings.Mesh
		settings = DefaultFeedSettings()
		settings.Mesh = mesh
	}
	if err := settings.Validate(); err != nil {
		return nil, err
	}
	return &Feed{store: store, settings: settings}, nil
}

// Run hands push the snapshot of the Store as it is, then one per
// debounced change, until ctx ends. push runs in Run's goroutine.
func (f *Feed) Run(ctx context.Context, push func(Update)) error {
	sub := f.store.Subscribe()
	defer sub.Close()
	sub.Take()
	prev := f.build(nil, store.Changes{}, time.Now(), false, push)
	// last is the end of the latest activity: a build, or the latest
	// change a burst waited for.
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.C():
		}
		first := time.Now()
		leading := first.Sub(last) >= f.settings.DebounceQuiet
		if !leading && !f.debounce(ctx, sub, first) {
			return nil
		}
		ch := sub.Take()
		if len(ch.Keys) == 0 {
			continue
		}
		prev = f.build(prev, ch, first, leading, push)
		last = time.Now()
	}
}

// debounce waits until the Store has been quiet for DebounceQuiet, or
// DebounceMax has passed since first. It returns false when ctx ends.
func (f *Feed) debounce(ctx context.Context, sub *store.Subscription, first time.Time) bool {
	quiet := time.NewTimer(f.settings.DebounceQuiet)
	defer quiet.Stop()
	deadline := time.NewTimer(f.settings.DebounceMax - time.Since(first))
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return true
		case <-quiet.C:
			return true
		case <-sub.C():
			quiet.Reset(f.settings.DebounceQuiet)
		}
	}
}

// build makes the snapshot of the Store's current state and pushes it.
// When the Store is exactly prev's plus ch (no change arrived since ch was
// taken), it is rebuilt from prev: only the affected services' endpoints
// when only WorkloadEntries changed.
func (f *Feed) build(prev *Snapshot, ch store.Changes, first time.Time, leading bool, push func(Update)) *Snapshot {
	start := time.Now()
	fs := f.store.Snapshot()
	var snap *Snapshot
	if prev != nil && fs.Revision == ch.Revision {
		snap = Rebuild(prev, fs, ch.Keys)
	} else {
		snap = BuildWith(fs, f.settings.Mesh)
	}
	f.latest.Store(snap)
	push(Update{Snapshot: snap, First: first, Changes: len(ch.Keys), Built: time.Since(start), Leading: leading})
	return snap
}

// Latest returns the snapshot Run built last (nil before its first): its
// Revision names the Store snapshot it was built from. It lets a reader of
// the same Store state (the analysis) use the model the Feed rebuilt
// incrementally instead of building it again in full.
func (f *Feed) Latest() *Snapshot { return f.latest.Load() }
