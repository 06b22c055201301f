package grpc

import (
	"slices"

	"github.com/vmesh/vmesh/model"
)

// AffectedHosts returns the hosts whose proxyless resources may differ
// between prev and next, given d (model.AffectedHosts): a proxyless
// route names clusters only through its HTTP destinations (routesToAny),
// and the hash policy is that of the first cluster that exists.
func AffectedHosts(prev, next *model.Snapshot, d *model.Diff) map[string]bool {
	return model.AffectedHosts(prev, next, d, routesToAny)
}

// routesToAny reports whether an HTTP route of vs has a destination among
// the hosts of either set.
func routesToAny(vs *model.VirtualService, a, b map[string]bool) bool {
	for _, hr := range vs.Spec.GetHttp() {
		for _, dst := range hr.GetRoute() {
			h := model.DestinationHost(dst.GetDestination().GetHost(), vs.Namespace)
			if a[h] || b[h] {
				return true
			}
		}
	}
	return false
}

// TLSChanged reports whether an endpoint change altered the TLS of any of
// the proxy's clusters (automatic mTLS, verified SANs), which lives in CDS.
// Only services whose endpoints changed are examined: an EDS-only push
// changes nothing else.
func TLSChanged(prevSnap *model.Snapshot, prev, next *model.View, svcs []*model.Service) bool {
	for _, svc := range svcs {
		var old *model.Service
		for _, o := range prevSnap.ServicesForHost(svc.Hostname) {
			if o.Namespace == svc.Namespace {
				old = o
			}
		}
		if old == nil {
			return true
		}
		if model.SameEndpoints(old.Endpoints, svc.Endpoints) {
			continue
		}
		dr := next.DestinationRule(svc)
		for _, port := range svc.Ports {
			for _, subset := range append([]string{""}, dr.SubsetNames()...) {
				o := prev.UpstreamTLS(model.Cluster{Service: old, Port: port, Subset: subset, DestinationRule: dr}, model.AutoMTLSStrictOnly)
				n := next.UpstreamTLS(model.Cluster{Service: svc, Port: port, Subset: subset, DestinationRule: dr}, model.AutoMTLSStrictOnly)
				if o.Mode != n.Mode || o.Auto != n.Auto || !slices.Equal(o.SubjectAltNames, n.SubjectAltNames) {
					return true
				}
			}
		}
	}
	return false
}
