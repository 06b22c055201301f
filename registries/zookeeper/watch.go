package zookeeper

import (
	"context"
	"errors"
	"hash/crc32"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/vmesh/vmesh/internal/retry"
	"github.com/vmesh/vmesh/registries/adapter"
)

// watcher runs ZooKeeper watches that re-arm themselves: after each event,
// after a lost connection and after an expired session (the client library
// then reports EventNotWatching), the watch reads the node again and
// reports what it finds. While ZooKeeper is unreachable nothing is
// reported, so the last known state stays.
type watcher struct {
	// conns are the adapter's sessions; each path is always read through
	// the same one (connFor), so its watch re-arms where it was set.
	conns   []*zk.Conn
	onError func(path string, err error)
	// retryMax bounds each watch loop's backoff (retry.New).
	retryMax time.Duration
}

// connFor returns the session path is read through: the paths are spread
// over the sessions by a hash of the path.
func (w *watcher) connFor(path string) *zk.Conn {
	return w.conns[crc32.ChecksumIEEE([]byte(path))%uint32(len(w.conns))]
}

// children reports path's children each time they change, until ctx is
// done. A missing node reports exists=false and waits for its creation.
func (w *watcher) children(ctx context.Context, path string, report func(children []string, exists bool)) {
	w.loop(ctx, path, func() (<-chan zk.Event, error) {
		children, _, ch, err := w.connFor(path).ChildrenW(path)
		if err != nil {
			return nil, err
		}
		report(children, true)
		return ch, nil
	}, func() { report(nil, false) })
}

// data reports path's data each time it changes, until ctx is done.
func (w *watcher) data(ctx context.Context, path string, report func(data []byte, exists bool)) {
	w.loop(ctx, path, func() (<-chan zk.Event, error) {
		data, _, ch, err := w.connFor(path).GetW(path)
		if err != nil {
			return nil, err
		}
		report(data, true)
		return ch, nil
	}, func() { report(nil, false) })
}

func (w *watcher) loop(ctx context.Context, path string, read func() (<-chan zk.Event, error), missing func()) {
	b := retry.New(adapter.MinRetry, w.retryMax)
	for ctx.Err() == nil {
		ch, err := read()
		if errors.Is(err, zk.ErrNoNode) {
			missing()
			var ok bool
			ok, _, ch, err = w.connFor(path).ExistsW(path)
			if err == nil && ok {
				continue // created between the two calls
			}
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, zk.ErrClosing) {
				return
			}
			w.onError(path, err)
			if !b.Wait(ctx) {
				return
			}
			continue
		}
		b.Reset()
		select {
		case <-ctx.Done():
			return
		case <-ch:
			// Any event, including EventNotWatching after a session
			// expiry, means: read again.
		}
	}
}

// watchSet keeps one watch goroutine per name and stops those whose name
// is no longer wanted.
type watchSet struct {
	wg      *sync.WaitGroup
	mu      sync.Mutex
	cancels map[string]context.CancelFunc
}

func newWatchSet(wg *sync.WaitGroup) *watchSet {
	return &watchSet{wg: wg, cancels: map[string]context.CancelFunc{}}
}

// sync starts start(ctx, name) for each wanted name not yet watched (calling
// before(name) first, synchronously) and cancels watches of names not
// wanted. It returns the names whose watches it cancelled.
func (s *watchSet) sync(ctx context.Context, want map[string]bool, before func(name string), start func(ctx context.Context, name string)) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var stopped []string
	for name, cancel := range s.cancels {
		if !want[name] {
			cancel()
			delete(s.cancels, name)
			stopped = append(stopped, name)
		}
	}
	for name := range want {
		if _, ok := s.cancels[name]; ok || ctx.Err() != nil {
			continue
		}
		cctx, cancel := context.WithCancel(ctx)
		s.cancels[name] = cancel
		if before != nil {
			before(name)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			start(cctx, name)
		}()
	}
	return stopped
}

// stopAll cancels every watch.
func (s *watchSet) stopAll() {
	s.sync(context.Background(), nil, nil, nil)
}
