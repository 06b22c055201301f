package adapter_test

import (
	"log/slog"
	"testing"

	"github.com/vmesh/vmesh/registries/adapter"
)

// TestFirstSyncWaitsForEveryWatch checks the first set's bookkeeping that
// Consul and ZooKeeper share: it waits for the listing and for every watch
// begun before it, publishes what was read on timeout once listed, and
// never waits again.
func TestFirstSyncWaitsForEveryWatch(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	var f adapter.FirstSync
	if f.Ready(false, true, log) {
		t.Fatal("ready before the catalogue was listed, even on timeout")
	}
	f.Begin("a")
	f.Begin("b")
	if f.Ready(true, false, log) {
		t.Fatal("ready with two watches pending")
	}
	f.Done("a")
	if f.Ready(true, false, log) {
		t.Fatal("ready with one watch pending")
	}
	f.Done("b")
	if !f.Ready(true, false, log) {
		t.Fatal("not ready once listed and every watch reported")
	}
	f.Begin("c") // after the first set: nothing waits
	if !f.Ready(true, false, log) {
		t.Fatal("a later set waited for a watch")
	}

	var timed adapter.FirstSync
	timed.Begin("slow")
	if !timed.Ready(true, true, log) {
		t.Fatal("not ready on timeout once listed")
	}
	if !timed.Ready(true, false, log) {
		t.Fatal("the set after a timed-out first one waited")
	}
}
