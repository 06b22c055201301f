package gen

import (
	"sync"

	"github.com/vmesh/vmesh/model"
)

// Flights runs at most one generation of each key at each snapshot at a
// time, outside the cache's lock: the streams that need it meanwhile wait
// for that one (and only they do), so a new group's generation holds up no
// other stream's answers or ACKs.
type Flights[T any] struct {
	mu sync.Mutex
	m  map[flightKey]*flight[T]
}

type flightKey struct {
	snap *model.Snapshot
	key  string
}

type flight[T any] struct {
	done chan struct{}
	v    T
	err  error
}

// Do returns fn's result for (snap, key), running fn unless a call for
// them is under way, whose result it then waits for and returns.
func (f *Flights[T]) Do(snap *model.Snapshot, key string, fn func() (T, error)) (T, error) {
	k := flightKey{snap: snap, key: key}
	f.mu.Lock()
	if fl := f.m[k]; fl != nil {
		f.mu.Unlock()
		<-fl.done
		return fl.v, fl.err
	}
	fl := &flight[T]{done: make(chan struct{})}
	if f.m == nil {
		f.m = map[flightKey]*flight[T]{}
	}
	f.m[k] = fl
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.m, k)
		f.mu.Unlock()
		close(fl.done)
	}()
	fl.v, fl.err = fn()
	return fl.v, fl.err
}
