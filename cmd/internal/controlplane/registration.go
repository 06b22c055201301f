package controlplane

import (
	"context"

	"github.com/vmesh/vmesh/writers/autoregister"
	"github.com/vmesh/vmesh/xds"
)

// registrationObserver hands the xDS server's stream events to the
// Registrar, each proxy as the autoregister.Agent its node describes: the
// registration writer sits beside the other sources over the Store and
// does not import xds.
type registrationObserver struct{ r *autoregister.Registrar }

var _ xds.Observer = registrationObserver{}

// StreamOpened implements xds.Observer.
func (o registrationObserver) StreamOpened(ctx context.Context, stream int64, p *xds.Proxy) error {
	return o.r.StreamOpened(ctx, stream, agentOf(p))
}

// StreamClosed implements xds.Observer.
func (o registrationObserver) StreamClosed(stream int64, _ *xds.Proxy) { o.r.StreamClosed(stream) }

// Health implements xds.Observer.
func (o registrationObserver) Health(stream int64, _ *xds.Proxy, healthy bool, message string) {
	o.r.Health(stream, healthy, message)
}

// agentOf is what the Registrar reads of a proxy.
func agentOf(p *xds.Proxy) autoregister.Agent {
	return autoregister.Agent{ID: p.ID, Namespace: p.Namespace, Labels: p.Labels, ServiceAccount: p.ServiceAccount, IPs: p.IPs,
		AutoRegisterGroup: p.AutoRegisterGroup, WorkloadEntry: p.WorkloadEntry, Network: p.Network, Locality: p.Locality, Envoy: p.RunsEnvoy()}
}
