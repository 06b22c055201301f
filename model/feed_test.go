package model_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/modeltest"
	"github.com/vmesh/vmesh/store"
)

var feedSource = store.Source{Name: "test", Class: store.ClassConfig}

// runFeed runs a Feed of st with settings and returns the updates it hands
// on, the initial one already received.
func runFeed(t *testing.T, st *store.Store, settings model.FeedSettings) <-chan model.Update {
	t.Helper()
	feed, err := model.NewFeed(st, settings)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	updates := make(chan model.Update, 1000)
	done := make(chan struct{})
	go func() { defer close(done); _ = feed.Run(ctx, func(u model.Update) { updates <- u }) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-updates:
	case <-time.After(10 * time.Second):
		t.Fatal("no initial snapshot")
	}
	return updates
}

// endpointObjects are the one service with n endpoints, the last at
// 10.0.0.n.
func endpointObjects(n int) []*store.Object {
	objs := modeltest.Objects(modeltest.Size{Services: 1})
	for j := range n {
		objs = append(objs, modeltest.WorkloadEntry("ns-0", "svc-0000", j, fmt.Sprintf("10.0.0.%d", j+1)))
	}
	return objs
}

// endpoints writes endpointObjects(n) to st.
func endpoints(t *testing.T, st *store.Store, n int) {
	t.Helper()
	if err := st.Replace(feedSource, endpointObjects(n)); err != nil {
		t.Fatal(err)
	}
}

func endpointCount(u model.Update) int {
	_, eps, _ := u.Snapshot.Objects()
	return eps
}

// TestFeedLeadingEdge: the first change after a quiet period is built at
// once, not after the quiet period; changes that follow it within the quiet
// period are one batch, built once the Store is quiet again.
func TestFeedLeadingEdge(t *testing.T) {
	const quiet = time.Second
	st := store.NewStore()
	updates := runFeed(t, st, model.FeedSettings{DebounceQuiet: quiet, DebounceMax: time.Hour})
	// The scenario: the Store has been quiet for longer than the quiet
	// period since the initial snapshot.
	time.Sleep(quiet + 100*time.Millisecond)

	wrote := time.Now()
	endpoints(t, st, 1)
	u := <-updates
	if waited := time.Since(wrote); waited >= quiet {
		t.Errorf("the first change after a quiet period was handed on after %s, not at once (quiet %s)", waited, quiet)
	}
	if !u.Leading || endpointCount(u) != 1 {
		t.Errorf("first change: leading %v, %d endpoints; want leading, 1", u.Leading, endpointCount(u))
	}

	// A burst right after it: batched into one snapshot of the last state.
	for n := 2; n <= 21; n++ {
		endpoints(t, st, n)
	}
	u = <-updates
	if u.Leading || endpointCount(u) != 21 {
		t.Errorf("burst: leading %v, %d endpoints; want one batched snapshot with 21", u.Leading, endpointCount(u))
	}
	select {
	case u := <-updates:
		t.Errorf("a second snapshot for one burst (%d endpoints, leading %v)", endpointCount(u), u.Leading)
	case <-time.After(quiet + 200*time.Millisecond):
	}
}

// TestFeedBurstBoundedByMax: under changes that never stop for the quiet
// period, a snapshot still comes at least every DebounceMax.
func TestFeedBurstBoundedByMax(t *testing.T) {
	st := store.NewStore()
	updates := runFeed(t, st, model.FeedSettings{DebounceQuiet: 200 * time.Millisecond, DebounceMax: 300 * time.Millisecond})
	stop := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		defer close(failed)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				if err := st.Replace(feedSource, endpointObjects(n%200+1)); err != nil {
					failed <- err
					return
				}
			}
		}
	}()
	// The churn goes on until three snapshots were handed on during it:
	// with no bound, the first would be the only one.
	for range 3 {
		select {
		case <-updates:
		case <-time.After(30 * time.Second):
			close(stop)
			t.Fatal("no snapshot under continuous changes")
		}
	}
	close(stop)
	if err := <-failed; err != nil {
		t.Fatal(err)
	}
}
