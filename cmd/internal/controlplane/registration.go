package controlplane

import (
	"context"

	"github.com/vmesh/vmesh/writers/autoregister"
	"github.com/vmesh/vmesh/writers/credentials"
	"github.com/vmesh/vmesh/xds"
)

// registrationObserver hands the xDS server's stream events to the
// Registrar, each proxy as the autoregister.Agent its node describes, and
// the agents' credential reports to the credentials Checker: the writers
// sit beside the other sources over the Store and do not import xds.
type registrationObserver struct {
	r     *autoregister.Registrar
	creds *credentials.Checker
}

var _ xds.Observer = registrationObserver{}

// StreamOpened implements xds.Observer.
func (o registrationObserver) StreamOpened(ctx context.Context, stream int64, p *xds.Proxy) error {
	return o.r.StreamOpened(ctx, stream, agentOf(p))
}

// StreamClosed implements xds.Observer.
func (o registrationObserver) StreamClosed(stream int64, _ *xds.Proxy) {
	o.r.StreamClosed(stream)
	o.creds.Closed(stream)
}

// Credentials implements xds.Observer: an Envoy's agent's report is
// checked against its config (a proxyless client asks for no file
// credential).
func (o registrationObserver) Credentials(stream int64, p *xds.Proxy, held []string) {
	if p.RunsEnvoy() {
		o.creds.Report(stream, p.Workload(), held)
	}
}

// Health implements xds.Observer.
func (o registrationObserver) Health(stream int64, _ *xds.Proxy, healthy bool, message string) {
	o.r.Health(stream, healthy, message)
}

// agentOf is what the Registrar reads of a proxy.
func agentOf(p *xds.Proxy) autoregister.Agent {
	return autoregister.Agent{ID: p.ID, Namespace: p.Namespace, Labels: p.Labels, ServiceAccount: p.ServiceAccount, IPs: p.IPs,
		AutoRegisterGroup: p.AutoRegisterGroup, WorkloadEntry: p.WorkloadEntry, Network: p.Network, Locality: p.Locality, Envoy: p.RunsEnvoy()}
}
