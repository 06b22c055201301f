package console

import (
	"context"
	"time"
)

// TrafficStatus is what the graph's rates come from and how the last
// query went.
type TrafficStatus struct {
	// Prometheus is the server's address, without credentials.
	Prometheus string
	// Window is the range the rates are averaged over.
	Window time.Duration
	// Error says why there are no rates (the server unreachable, a query
	// failed), or "".
	Error string
}

// trafficSource answers the rates of the graph's edges.
type trafficSource struct{}

// trafficSample is the rate of requests from one caller to one
// destination.
type trafficSample struct{}

func (t *trafficSource) query(context.Context) (TrafficStatus, []trafficSample) {
	return TrafficStatus{}, nil
}

func (b *graphBuilder) traffic([]trafficSample) {}
