package adapter

import (
	"context"
	"time"

	"github.com/vmesh/vmesh/filestore"
)

// Publisher hands an adapter's complete set to its Sink after changes.
// Changes marked while a set is being built are coalesced into the next one.
type Publisher struct {
	dirty chan struct{}
}

// NewPublisher returns a Publisher with no change marked.
func NewPublisher() *Publisher { return &Publisher{dirty: make(chan struct{}, 1)} }

// Mark asks for a new set; it never blocks.
func (p *Publisher) Mark() {
	select {
	case p.dirty <- struct{}{}:
	default:
	}
}

// Run publishes until ctx is done. After each Mark, and once when
// initialWait has passed, it calls collect, which returns the set and
// whether it may be published now (an adapter holds back its first set until
// it has read the whole registry, or until timedOut says the initial wait is
// over). Failures are logged and recorded on the sink's status.
func (p *Publisher) Run(ctx context.Context, initialWait time.Duration, sink *Sink,
	collect func(timedOut bool) ([]*filestore.Object, bool)) {
	initial := time.NewTimer(initialWait)
	defer initial.Stop()
	timedOut := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.dirty:
		case <-initial.C:
			timedOut = true
		}
		if objs, ok := collect(timedOut); ok {
			if err := sink.Replace(objs); err != nil {
				sink.log.Error("publishing generated objects failed", "error", err)
			}
		}
	}
}
