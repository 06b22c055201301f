package adapter

import (
	"context"
	"time"
)

// Publisher hands an adapter's changes to its Sink after they are marked.
// Changes marked while one is being handed over are coalesced into the next.
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
// initialWait has passed, it calls collect, which returns the change
// (usually Set.Changes) and whether it may be published now (an adapter
// holds back its first set until it has read the whole registry, or until
// timedOut says the initial wait is over). When the Store refuses a change,
// Run calls resend (which should call Set.Resend under the adapter's lock)
// and, after MinRetry, marks itself, so the complete set follows. Failures are logged and
// recorded on the sink's status.
func (p *Publisher) Run(ctx context.Context, initialWait time.Duration, sink *Sink,
	collect func(timedOut bool) (Change, bool), resend func()) {
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
		c, ok := collect(timedOut)
		if !ok {
			continue
		}
		if err := sink.Apply(c); err != nil {
			sink.log.Error("publishing generated objects failed; the complete set follows", "error", err)
			resend()
			select {
			case <-ctx.Done():
				return
			case <-time.After(MinRetry):
			}
			p.Mark()
		}
	}
}
