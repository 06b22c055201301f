// Package consul is the Consul registry adapter: blocking queries on the
// service catalogue and on each service's health endpoint keep one
// ServiceEntry per service (host <service>.service.consul) and one
// WorkloadEntry per instance, with health from its checks, in the Store.
package consul

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/consul/api"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/retry"
	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
)

// Adapter watches one Consul datacenter.
type Adapter struct {
	cfg    Config
	sink   *adapter.Sink
	log    *slog.Logger
	client *api.Client

	mu      sync.Mutex
	pub     *adapter.Publisher
	ports   adapter.PortNumbers // keeps each service's port numbers
	set     *adapter.Set        // generated objects by service
	watches map[string]context.CancelFunc
	listed  bool // the catalogue was listed once
	first   adapter.FirstSync
}

// New returns an adapter that publishes through sink. logger nil means
// slog.Default().
func New(cfg Config, sink *adapter.Sink, logger *slog.Logger) (*Adapter, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	sink.ExpectSkips("no_address")
	ac, err := cfg.apiConfig()
	if err != nil {
		return nil, err
	}
	// Blocking queries hold a request open for WaitTime: no client timeout.
	ac.HttpClient = &http.Client{}
	if cfg.Scheme == "https" || cfg.TLS.set() {
		tlsCfg, err := api.SetupTLSConfig(&ac.TLSConfig)
		if err != nil {
			return nil, fmt.Errorf("consul: tls: %w", err)
		}
		ac.HttpClient.Transport = &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment}
	}
	client, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("consul %s: %w", cfg.Address, err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Adapter{
		cfg: cfg, sink: sink, client: client,
		log:     logger.With("registry", sink.Meta().Name, "type", "consul"),
		pub:     adapter.NewPublisher(),
		set:     adapter.NewSet(),
		watches: map[string]context.CancelFunc{},
	}, nil
}

// Run watches Consul and publishes until ctx is done. Consul being
// unreachable is not an error: the last known set keeps serving while the
// adapter retries with backoff.
func (a *Adapter) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.watchCatalog(ctx, &wg)
	}()
	a.pub.Run(ctx, a.cfg.InitialSyncTimeout, a.sink, a.collect, a.resend)
	cancel()
	wg.Wait()
	a.sink.SetConnected(false)
	return nil
}

// watchCatalog follows /v1/catalog/services and keeps one health watch per
// service.
func (a *Adapter) watchCatalog(ctx context.Context, wg *sync.WaitGroup) {
	b := retry.New(adapter.MinRetry, a.cfg.RetryMax)
	var index uint64
	for ctx.Err() == nil {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: a.cfg.WaitTime}).WithContext(ctx)
		list, meta, err := a.client.Catalog().Services(q)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.sink.SetConnected(false)
			a.sink.Error(fmt.Errorf("consul %s: catalog: %w", a.cfg.Address, err))
			a.log.Warn("consul unreachable; keeping the last known set", "error", err)
			// The agent that answers next may be a restarted one whose
			// index is lower than ours: waiting on ours would block until
			// its index passed it. Index 0 answers at once.
			index = 0
			if !b.Wait(ctx) {
				return
			}
			continue
		}
		b.Reset()
		a.sink.SetConnected(true)
		index = nextIndex(index, meta.LastIndex)
		want := map[string]bool{}
		for name := range list {
			if !slices.Contains(a.cfg.Exclude, name) {
				want[name] = true
			}
		}
		a.mu.Lock()
		for name, stop := range a.watches {
			if !want[name] {
				stop()
				delete(a.watches, name)
				a.set.Delete(name)
			}
		}
		for name := range want {
			if _, ok := a.watches[name]; ok {
				continue
			}
			sctx, stop := context.WithCancel(ctx)
			a.watches[name] = stop
			a.first.Begin(name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.watchService(sctx, name)
			}()
		}
		a.listed = true
		a.pub.Mark()
		a.mu.Unlock()
	}
}

// nextIndex follows Consul's blocking-query rules: an index that goes
// backwards (a restarted or replaced server) resets to 0, so the next
// query returns at once and the watch starts over; a zero index becomes 1
// so a query never spins without blocking.
func nextIndex(prev, got uint64) uint64 {
	switch {
	case got < prev:
		return 0
	case got == 0:
		return 1
	}
	return got
}

// watchService follows /v1/health/service/<name> (every instance, with its
// checks).
func (a *Adapter) watchService(ctx context.Context, name string) {
	b := retry.New(adapter.MinRetry, a.cfg.RetryMax)
	var index uint64
	for ctx.Err() == nil {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: a.cfg.WaitTime}).WithContext(ctx)
		entries, meta, err := a.client.Health().Service(name, "", false, q)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.sink.Error(fmt.Errorf("consul %s: health of %s: %w", a.cfg.Address, name, err))
			index = 0 // as in watchCatalog: the next agent's index may be lower
			if !b.Wait(ctx) {
				return
			}
			continue
		}
		b.Reset()
		index = nextIndex(index, meta.LastIndex)
		// Generated under the lock: the port numbers it keeps must agree
		// with the set collect publishes.
		a.mu.Lock()
		if ctx.Err() == nil {
			a.set.Put(name, a.serviceObjects(name, entries))
			a.first.Done(name)
			a.pub.Mark()
		}
		a.mu.Unlock()
	}
}

// serviceObjects generates the ServiceEntry and WorkloadEntries of one
// Consul service. It runs with a.mu held.
func (a *Adapter) serviceObjects(name string, entries []*api.ServiceEntry) []*store.Object {
	meta := a.sink.Meta()
	host := adapter.DNSLabel(name) + "." + adapter.DNSName(a.cfg.HostSuffix)
	seName := adapter.ObjectName(name)
	ports := map[string]*adapter.PortCandidate{}
	var wes []*store.Object
	seen := map[string]bool{}
	for _, e := range entries {
		svc := e.Service
		if svc == nil || svc.Kind != api.ServiceKindTypical || svc.Port <= 0 || svc.Port > 65535 {
			continue
		}
		addr := svc.Address
		if addr == "" && e.Node != nil {
			addr = e.Node.Address
		}
		if addr == "" {
			a.sink.Skip("no_address")
			continue
		}
		proto, portName := adapter.Protocol(svc.Meta["protocol"])
		if ports[portName] == nil {
			ports[portName] = &adapter.PortCandidate{Name: portName, Protocol: proto}
		}
		ports[portName].Instances = append(ports[portName].Instances, uint32(svc.Port))

		node, dc := "", ""
		if e.Node != nil {
			node, dc = e.Node.Node, e.Node.Datacenter
		}
		weName := adapter.ObjectName(name, node, svc.ID)
		if seen[weName] {
			continue
		}
		seen[weName] = true
		labels := adapter.Labels(nil, svc.Meta)
		labels = adapter.Labels(labels, tagLabels(svc.Tags))
		status := e.Checks.AggregatedStatus()
		healthy := status == api.HealthPassing || status == api.HealthWarning
		var weight uint32
		switch {
		case status == api.HealthPassing && svc.Weights.Passing > 1:
			weight = uint32(svc.Weights.Passing)
		case status == api.HealthWarning && svc.Weights.Warning > 0:
			weight = uint32(svc.Weights.Warning)
		}
		origin := dc + "/" + node + "/" + svc.ID
		wes = append(wes, meta.WorkloadEntry(weName, origin, seName, &networking.WorkloadEntry{
			Address:  addr,
			Ports:    map[string]uint32{portName: uint32(svc.Port)},
			Labels:   labels,
			Locality: dc,
			Weight:   weight,
		}, &healthy))
	}
	if len(wes) == 0 {
		return nil
	}
	var candidates []adapter.PortCandidate
	for _, c := range ports {
		candidates = append(candidates, *c)
	}
	sePorts := a.ports.Ports(seName, candidates)
	se := meta.ServiceEntry(seName, a.cfg.Datacenter+"/"+name, []string{host}, sePorts, nil)
	return append([]*store.Object{se}, wes...)
}

// tagLabels turns "k=v" (and Istio's former "k|v") tags into labels; other
// tags are ignored.
func tagLabels(tags []string) map[string]string {
	out := map[string]string{}
	for _, t := range tags {
		k, v, ok := strings.Cut(t, "=")
		if !ok {
			k, v, ok = strings.Cut(t, "|")
		}
		if ok && k != "" {
			out[k] = v
		}
	}
	return out
}

// collect returns the change to publish: the first, complete set waits
// until the catalogue and every service have been read once (or
// InitialSyncTimeout), and is never published before Consul answered at
// all; later ones hold only the services that changed.
func (a *Adapter) collect(timedOut bool) (adapter.Change, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.first.Ready(a.listed, timedOut, a.log) {
		return adapter.Change{}, false
	}
	c := a.set.Changes()
	a.ports.Forget(c.RemovedServices...)
	return c, true
}

// resend makes the next change the complete set.
func (a *Adapter) resend() {
	a.mu.Lock()
	a.set.Resend()
	a.mu.Unlock()
}
