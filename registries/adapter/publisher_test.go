package adapter_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
)

func TestPublisherHoldsTheFirstSetUntilReadyOrTimedOut(t *testing.T) {
	st := store.NewStore()
	sink := adapter.NewSink(st, adapter.Meta{Type: "static", Name: "s", Namespace: "default"}, "", nil, nil)
	pub := adapter.NewPublisher()
	var ready, sawTimeout atomic.Bool
	var calls atomic.Int32
	meta := sink.Meta()
	set := adapter.NewSet()
	set.Put("svc", []*store.Object{meta.ServiceEntry("svc", "o", []string{"svc.example"}, nil, nil)})
	var mu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pub.Run(ctx, 300*time.Millisecond, sink, func(timedOut bool) (adapter.Change, bool) {
			calls.Add(1)
			if timedOut {
				sawTimeout.Store(true)
			}
			if !ready.Load() && !timedOut {
				return adapter.Change{}, false
			}
			mu.Lock()
			defer mu.Unlock()
			return set.Changes(), true
		}, func() {})
	}()
	defer func() { cancel(); <-done }()

	pub.Mark()
	pub.Mark() // coalesced with the first while it is pending
	time.Sleep(100 * time.Millisecond)
	if sink.Status().Syncs != 0 {
		t.Fatal("published a set collect said was not ready")
	}
	if n := calls.Load(); n < 1 || n > 2 {
		t.Fatalf("collect called %d times for two marks", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for sink.Status().Syncs == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the initial wait never published")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !sawTimeout.Load() {
		t.Fatal("published without collect being told the initial wait was over")
	}
	if n := st.Snapshot().Len(); n != 1 {
		t.Fatalf("the first set put %d objects in the Store, want 1", n)
	}
	ready.Store(true)
	mu.Lock()
	set.Put("other", []*store.Object{meta.ServiceEntry("other", "o", []string{"other.example"}, nil, nil)})
	mu.Unlock()
	pub.Mark()
	for sink.Status().Syncs < 2 {
		if time.Now().After(deadline) {
			t.Fatal("a marked change was not published")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := st.Snapshot().Len(); n != 2 {
		t.Fatalf("after the second change the Store holds %d objects, want 2", n)
	}
}
