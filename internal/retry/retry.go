// Package retry is vmesh's one reconnect backoff, used by every retry loop
// of the agents (CA requests, the agent's xDS stream, Envoy restarts) and of
// the registry adapters (Consul and ZooKeeper watches): exponential between
// a minimum and a maximum with ±20 % jitter (github.com/cenkalti/backoff/v5),
// so the VMs of a fleet, or the watches of a control plane, do not retry in
// lockstep after a restart.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Jitter is the randomization factor: each delay is within ±20 % of the
// nominal one.
const Jitter = 0.2

// Backoff yields the delays of one retry loop.
type Backoff struct {
	b *backoff.ExponentialBackOff
}

// New returns a backoff that starts at minDelay and doubles up to maxDelay;
// it never gives up.
func New(minDelay, maxDelay time.Duration) *Backoff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     minDelay,
		RandomizationFactor: Jitter,
		Multiplier:          2,
		MaxInterval:         max(maxDelay, minDelay),
	}
	b.Reset()
	return &Backoff{b: b}
}

// Next returns the next delay.
func (b *Backoff) Next() time.Duration { return b.b.NextBackOff() }

// Reset starts again from the minimum (after a success).
func (b *Backoff) Reset() { b.b.Reset() }

// Sleep waits d, or until ctx is done (returning false).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Wait sleeps for the next delay, or until ctx is done (returning false).
func (b *Backoff) Wait(ctx context.Context) bool { return Sleep(ctx, b.Next()) }
