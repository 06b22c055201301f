package adapter

import (
	"cmp"
	"maps"
	"slices"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/store"
)

// PortCandidate is one port of a generated ServiceEntry before it has a
// number: its name, its Istio protocol and the ports its instances listen
// on (one per instance).
type PortCandidate struct {
	Name      string
	Protocol  string
	Instances []uint32
}

// PortNumbers keeps the numbers an adapter gives its generated ServiceEntry
// ports stable. A ServiceEntry port is the service's port, the one clients
// dial (xds:///host:port); each WorkloadEntry maps the port name to its own
// instance port, so the service port need not equal any instance's. A port
// is numbered by CommonPort of its instances' ports when the adapter first
// generates it, and keeps that number while the service has a ServiceEntry
// in the sets the adapter publishes, however its instances come and go.
// A service that is gone from a published set (see Retain) is numbered
// afresh when it comes back.
//
// Each adapter owns one; the zero value is ready. It is not safe for
// concurrent use: the adapter's own lock guards it.
type PortNumbers struct {
	services map[string]map[string]uint32 // ServiceEntry name → port name → number
}

// Ports numbers the ports of the ServiceEntry named service. A port name
// that was numbered before keeps its number, even if no instance listens on
// it any more or another port became more common. A new port name gets
// CommonPort of its instances, unless another port of the service has that
// number already (two protocols on one port: the port numbered first keeps
// it, the new one is left out until its instances' common port changes);
// a port name that is absent now but kept a number gives that number up to
// a new port that needs it. Candidates with no instances are left out.
// The ports are sorted by number.
func (p *PortNumbers) Ports(service string, candidates []PortCandidate) []*networking.ServicePort {
	known := p.services[service]
	if known == nil {
		known = map[string]uint32{}
	}
	candidates = slices.Clone(candidates)
	slices.SortFunc(candidates, func(a, b PortCandidate) int { return cmp.Compare(a.Name, b.Name) })
	taken := map[uint32]bool{}
	var out []*networking.ServicePort
	// Known numbers first: they are distinct, so each keeps its number.
	for _, c := range candidates {
		if n, ok := known[c.Name]; ok && len(c.Instances) > 0 && !taken[n] {
			taken[n] = true
			out = append(out, &networking.ServicePort{Number: n, Name: c.Name, Protocol: c.Protocol})
		}
	}
	for _, c := range candidates {
		if _, ok := known[c.Name]; ok {
			continue
		}
		n := CommonPort(c.Instances)
		if n == 0 || taken[n] {
			continue
		}
		// Only an absent port can hold n here: a present one is in taken.
		maps.DeleteFunc(known, func(_ string, m uint32) bool { return m == n })
		known[c.Name] = n
		taken[n] = true
		out = append(out, &networking.ServicePort{Number: n, Name: c.Name, Protocol: c.Protocol})
	}
	if len(known) > 0 {
		if p.services == nil {
			p.services = map[string]map[string]uint32{}
		}
		p.services[service] = known
	}
	slices.SortFunc(out, func(a, b *networking.ServicePort) int { return cmp.Compare(a.Number, b.Number) })
	return out
}

// Retain forgets the numbers of every service that has no ServiceEntry in
// objs. An adapter calls it with each complete set it publishes, so the
// numbers of a service that is gone from the registry are chosen afresh if
// it comes back.
func (p *PortNumbers) Retain(objs []*store.Object) {
	keep := map[string]bool{}
	for _, o := range objs {
		if o.Kind == store.KindServiceEntry {
			keep[o.Name] = true
		}
	}
	maps.DeleteFunc(p.services, func(service string, _ map[string]uint32) bool { return !keep[service] })
}

// Forget forgets the numbers of the named services: an adapter that hands
// the Store only what changed calls it with Change.RemovedServices, the
// incremental form of Retain.
func (p *PortNumbers) Forget(services ...string) {
	for _, s := range services {
		delete(p.services, s)
	}
}
