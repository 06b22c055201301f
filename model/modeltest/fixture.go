// Package modeltest builds synthetic config for tests and benchmarks of the
// model and xds packages.
package modeltest

import (
	"fmt"

	"github.com/vmesh/vmesh/store"
	networking "istio.io/api/networking/v1alpha3"
)

// Size says how much config Objects generates.
type Size struct {
	Services            int // ServiceEntries, one host and one gRPC port each
	EndpointsPerService int // WorkloadEntries selected by each service
	Routes              int // VirtualServices and DestinationRules (each)
	Namespaces          int // services are spread over this many namespaces; 0 means 1
}

// Objects returns ServiceEntries selecting WorkloadEntries (half v1, half v2),
// and VirtualServices splitting 90/10 between DestinationRule subsets for
// the first Routes services.
func Objects(sz Size) []*store.Object {
	nss := max(sz.Namespaces, 1)
	var out []*store.Object
	for i := range sz.Services {
		ns := fmt.Sprintf("ns-%d", i%nss)
		name := fmt.Sprintf("svc-%04d", i)
		host := Host(i)
		out = append(out, &store.Object{
			Key: store.Key{Kind: store.KindServiceEntry, Namespace: ns, Name: name},
			Spec: &networking.ServiceEntry{
				Hosts: []string{host}, Resolution: networking.ServiceEntry_STATIC, Location: networking.ServiceEntry_MESH_INTERNAL,
				Ports:            []*networking.ServicePort{{Name: "grpc", Number: 7070, Protocol: "GRPC"}},
				WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": name}},
			},
		})
		for j := range sz.EndpointsPerService {
			out = append(out, WorkloadEntry(ns, name, j, fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)))
		}
		if i < sz.Routes {
			out = append(out, &store.Object{
				Key: store.Key{Kind: store.KindVirtualService, Namespace: ns, Name: name},
				Spec: &networking.VirtualService{Hosts: []string{host}, Http: []*networking.HTTPRoute{{
					Route: []*networking.HTTPRouteDestination{
						{Destination: &networking.Destination{Host: host, Subset: "v1"}, Weight: 90},
						{Destination: &networking.Destination{Host: host, Subset: "v2"}, Weight: 10},
					},
				}}},
			}, &store.Object{
				Key: store.Key{Kind: store.KindDestinationRule, Namespace: ns, Name: name},
				Spec: &networking.DestinationRule{Host: host, Subsets: []*networking.Subset{
					{Name: "v1", Labels: map[string]string{"version": "v1"}},
					{Name: "v2", Labels: map[string]string{"version": "v2"}},
				}},
			})
		}
	}
	return out
}

// Host returns the host of service i.
func Host(i int) string { return fmt.Sprintf("svc-%04d.mesh.internal", i) }

// WorkloadEntry returns endpoint j of service name, at addr.
func WorkloadEntry(ns, name string, j int, addr string) *store.Object {
	version := "v1"
	if j%2 == 1 {
		version = "v2"
	}
	return &store.Object{
		Key: store.Key{Kind: store.KindWorkloadEntry, Namespace: ns, Name: fmt.Sprintf("%s-%d", name, j)},
		Spec: &networking.WorkloadEntry{
			Address: addr, Labels: map[string]string{"app": name, "version": version},
			Locality: fmt.Sprintf("region/zone-%d", j%3),
		},
	}
}
