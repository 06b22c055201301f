// Package adapter holds what every registry adapter shares: builders for the
// generated ServiceEntry and WorkloadEntry objects (names, labels,
// annotations, origin), the Sink that hands an adapter's complete set to the
// Store and tracks its status, metrics, and reconnect backoff.
package adapter

import (
	"cmp"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/store"
)

// Annotations on every generated object.
const (
	// AnnotationRegistry names the registry type: consul, zookeeper, static.
	AnnotationRegistry = "vmesh.io/registry"
	// AnnotationRegistryName names the registry entry (the source) in vmesh.yaml.
	AnnotationRegistryName = "vmesh.io/registry-name"
	// AnnotationOrigin names the registry record the object was generated
	// from, e.g. a Consul service ID or a ZooKeeper path.
	AnnotationOrigin = "vmesh.io/registry-origin"
	// LabelService selects a generated ServiceEntry's WorkloadEntries: its
	// value is the ServiceEntry's SelectorValue(name).
	LabelService = "vmesh.io/service"
)

// APIVersion of generated objects.
const APIVersion = "networking.istio.io/v1"

// Meta is what one registry entry stamps on every object it generates.
type Meta struct {
	// Type is the registry type: consul, zookeeper or static.
	Type string
	// Name is the registry entry's name; the Store source is "registry:<Name>".
	Name string
	// Namespace holds the generated objects.
	Namespace string
}

// Source is the Store source of the registry entry.
func (m Meta) Source() store.Source {
	return store.Source{Name: "registry:" + m.Name, Class: store.ClassRegistry}
}

func (m Meta) object(kind store.Kind, name, origin string) *store.Object {
	return &store.Object{
		Key:        store.Key{Kind: kind, Namespace: m.Namespace, Name: name},
		APIVersion: APIVersion,
		Annotations: map[string]string{
			AnnotationRegistry:     m.Type,
			AnnotationRegistryName: m.Name,
			AnnotationOrigin:       origin,
		},
		Origin: store.Origin{Source: m.Source().Name, Registry: origin},
	}
}

// ServiceEntry builds a MESH_INTERNAL, STATIC ServiceEntry that selects its
// WorkloadEntries with LabelService. Ports are sorted by number.
func (m Meta) ServiceEntry(name, origin string, hosts []string, ports []*networking.ServicePort, labels map[string]string) *store.Object {
	o := m.object(store.KindServiceEntry, name, origin)
	o.Labels = labels
	ports = slices.Clone(ports)
	slices.SortFunc(ports, func(a, b *networking.ServicePort) int {
		return cmp.Or(cmp.Compare(a.Number, b.Number), cmp.Compare(a.Name, b.Name))
	})
	o.Spec = &networking.ServiceEntry{
		Hosts:            hosts,
		Ports:            ports,
		Location:         networking.ServiceEntry_MESH_INTERNAL,
		Resolution:       networking.ServiceEntry_STATIC,
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{LabelService: SelectorValue(name)}},
	}
	return o
}

// WorkloadEntry builds a WorkloadEntry selected by the ServiceEntry named
// service. healthy nil means health is unknown; otherwise the entry carries
// Istio's health-checks annotation so it is an endpoint only while healthy.
// labels must be valid labels (see Labels); LabelService is added.
func (m Meta) WorkloadEntry(name, origin, service string, spec *networking.WorkloadEntry, healthy *bool) *store.Object {
	o := m.object(store.KindWorkloadEntry, name, origin)
	labels := make(map[string]string, len(spec.Labels)+1)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelService] = SelectorValue(service)
	spec.Labels = labels
	o.Labels = labels
	o.Spec = spec
	if healthy != nil {
		h := *healthy
		o.Healthy = &h
		o.Annotations[meshlabels.HealthChecksAnnotation] = "true"
	}
	return o
}

// Protocol maps a protocol name used by registries (Consul's
// ServiceMeta["protocol"], a Dubbo URL scheme, a static file) to an Istio
// port protocol and a port name. Unknown protocols are TCP, named
// "tcp-<name>" so the original stays visible.
func Protocol(p string) (istioProtocol, portName string) {
	p = strings.ToLower(strings.TrimSpace(p))
	switch p {
	case "", "tcp":
		return "TCP", "tcp"
	case "http", "http1", "rest":
		return "HTTP", "http"
	case "http2", "h2c":
		return "HTTP2", "http2"
	case "grpc":
		return "GRPC", "grpc"
	case "tri", "triple":
		return "GRPC", "grpc-tri"
	case "dubbo":
		return "TCP", "tcp-dubbo"
	case "https", "tls":
		return "TLS", "tls"
	case "mongo", "mysql", "redis":
		return strings.ToUpper(p), p
	}
	return "TCP", "tcp-" + DNSLabel(p)
}

// CommonPort returns the most frequent of ports, the lowest on a tie, or 0
// for none: the number PortNumbers gives a generated ServiceEntry port when
// it first sees it (each WorkloadEntry maps the port name to its own port,
// so instances may listen on different ports).
func CommonPort(ports []uint32) uint32 {
	count := map[uint32]int{}
	var best uint32
	for _, p := range ports {
		count[p]++
		if c, b := count[p], count[best]; best == 0 || c > b || c == b && p < best {
			best = p
		}
	}
	return best
}

// SortObjects sorts objects by kind, namespace and name.
func SortObjects(objs []*store.Object) {
	slices.SortFunc(objs, func(a, b *store.Object) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}
