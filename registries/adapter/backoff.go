package adapter

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential reconnect delay with jitter.
type Backoff struct {
	// Min and Max bound the delay; zero values mean 100ms and 30s.
	Min, Max time.Duration
	next     time.Duration
}

// Wait sleeps for the next delay, or until ctx is done (returning false).
func (b *Backoff) Wait(ctx context.Context) bool {
	d := b.Next()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Next returns the next delay and doubles the one after, up to Max.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi <= 0 {
		hi = 30 * time.Second
	}
	if b.next < lo {
		b.next = lo
	}
	d := b.next
	b.next = min(2*b.next, hi)
	// Up to 20% jitter so many watchers do not retry in step.
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// Reset starts the delays again from Min after a success.
func (b *Backoff) Reset() { b.next = 0 }
