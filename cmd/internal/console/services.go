package console

import (
	"net/url"
	"strings"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	networking "istio.io/api/networking/v1alpha3"
)

// Endpoint health as the services page shows it.
const (
	HealthHealthy   = "HEALTHY"   // health-checked and healthy
	HealthUnhealthy = "UNHEALTHY" // health-checked and not healthy: not an endpoint
	HealthUnchecked = "NO CHECKS" // no health checks: always an endpoint
	HealthInline    = "INLINE"    // an endpoint written in the ServiceEntry
)

// Services is the services page's data.
type Services struct {
	Paging
	Revision int64
	Rows     []ServiceRow
}

// ServiceRow is one host of a ServiceEntry.
type ServiceRow struct {
	*model.Service
	Origin           store.Origin
	Endpoints        []EndpointRow
	VirtualServices  []Applied
	DestinationRules []Applied
}

// EndpointRow is one endpoint, or a health-checked WorkloadEntry left out
// for being unhealthy.
type EndpointRow struct {
	Address string
	Ports   map[string]uint32
	Labels  string
	Health  string
	// Reason is why its agent reports it unhealthy (the probe's failure).
	Reason string
	// Name is the WorkloadEntry (namespace/name) or ServiceEntry#index.
	Name   string
	Origin store.Origin
}

// Applied is a VirtualService or DestinationRule that applies to a host.
type Applied struct {
	Namespace, Name string
	Origin          store.Origin
}

func (Services) title() string { return "Services" }

func (s Services) searchBox() SearchBox {
	return SearchBox{Action: Prefix + "services", Query: s.Query, Placeholder: "host, namespace, ServiceEntry name, VIP"}
}

func (c *Console) services(q url.Values) Services {
	fs := c.src.Store.Snapshot()
	ms := c.modelFor(fs)
	query := strings.TrimSpace(q.Get("q"))
	var matched []*model.Service
	for _, s := range ms.Services {
		if query == "" || matches(query, strings.ToLower(s.Hostname+" "+s.Namespace+" "+s.Name+" "+strings.Join(s.Addresses, " "))) {
			matched = append(matched, s)
		}
	}
	out := Services{Revision: ms.Revision}
	var start, end int
	out.Paging, start, end = paginate(Prefix+"services", q, len(matched), c.perPage)
	for _, s := range matched[start:end] {
		out.Rows = append(out.Rows, serviceRow(fs, ms, s))
	}
	return out
}

func serviceRow(fs *store.Snapshot, ms *model.Snapshot, s *model.Service) ServiceRow {
	row := ServiceRow{Service: s}
	se := fs.Get(store.Key{Kind: store.KindServiceEntry, Namespace: s.Namespace, Name: s.Name})
	if se != nil {
		row.Origin = se.Origin
	}
	for _, e := range s.Endpoints {
		er := EndpointRow{Address: e.Address, Ports: e.Ports, Labels: model.LabelString(e.Labels), Name: e.Origin, Health: HealthInline}
		if ns, name, ok := strings.Cut(e.Origin, "/"); ok && !strings.Contains(name, "#") {
			if we := fs.Get(store.Key{Kind: store.KindWorkloadEntry, Namespace: ns, Name: name}); we != nil {
				er.Origin, er.Health = we.Origin, healthOf(we)
			}
		} else if se != nil {
			er.Origin = se.Origin
		}
		row.Endpoints = append(row.Endpoints, er)
	}
	if se != nil {
		row.Endpoints = append(row.Endpoints, unhealthy(fs, se)...)
	}
	for _, vs := range ms.VirtualServicesForHost(s.Hostname) {
		row.VirtualServices = append(row.VirtualServices, applied(fs, store.KindVirtualService, vs.Namespace, vs.Name))
	}
	for _, dr := range ms.DestinationRulesForHost(s.Hostname) {
		row.DestinationRules = append(row.DestinationRules, applied(fs, store.KindDestinationRule, dr.Namespace, dr.Name))
	}
	return row
}

func applied(fs *store.Snapshot, kind store.Kind, ns, name string) Applied {
	a := Applied{Namespace: ns, Name: name}
	if o := fs.Get(store.Key{Kind: kind, Namespace: ns, Name: name}); o != nil {
		a.Origin = o.Origin
	}
	return a
}

func healthOf(we *store.Object) string {
	if !store.HealthChecksEnabled(we) {
		return HealthUnchecked
	}
	if we.Healthy != nil && *we.Healthy {
		return HealthHealthy
	}
	return HealthUnhealthy
}

// unhealthy lists the WorkloadEntries the ServiceEntry selects that the
// model leaves out for failing their health checks.
func unhealthy(fs *store.Snapshot, se *store.Object) []EndpointRow {
	spec, ok := se.Spec.(*networking.ServiceEntry)
	if !ok || spec.GetWorkloadSelector() == nil {
		return nil
	}
	var out []EndpointRow
	for _, o := range fs.List(store.KindWorkloadEntry) {
		if o.Namespace != se.Namespace || healthOf(o) != HealthUnhealthy {
			continue
		}
		we, ok := o.Spec.(*networking.WorkloadEntry)
		if !ok {
			continue
		}
		labels := we.GetLabels()
		if len(o.Labels) > 0 {
			labels = map[string]string{}
			for k, v := range o.Labels {
				labels[k] = v
			}
			for k, v := range we.GetLabels() {
				labels[k] = v
			}
		}
		if model.LabelsMatch(spec.GetWorkloadSelector().GetLabels(), labels) {
			out = append(out, EndpointRow{Address: we.GetAddress(), Ports: we.GetPorts(), Labels: model.LabelString(labels),
				Health: HealthUnhealthy, Reason: o.HealthReason, Name: o.Namespace + "/" + o.Name, Origin: o.Origin})
		}
	}
	return out
}
