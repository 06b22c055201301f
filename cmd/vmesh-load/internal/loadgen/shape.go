package loadgen

import (
	"fmt"

	"github.com/vmesh/vmesh/xds/sidecar"
)

// Shape says what the Envoy-like proxies of a run are.
type Shape string

// Proxy shapes.
const (
	// ShapeMixed (the default, also "") makes every proxy a proxyless gRPC
	// node (GENERATOR grpc); Envoy-like ones only subscribe like Envoy.
	ShapeMixed Shape = "mixed"
	// ShapeSidecarVM makes the Envoy-like proxies Envoy sidecars (no
	// GENERATOR) on one simulated VM each: its own INSTANCE_IPS (the
	// address of one generated endpoint, so it has inbound ports) and
	// WORKLOAD_NAME. Sidecars of a namespace share their labels (app
	// vm-<namespace>, tier web or batch), as the VMs of one application do.
	ShapeSidecarVM Shape = "sidecar-vm"
	// ShapeSidecarShared is ShapeSidecarVM with every sidecar on one IP
	// and workload name: the sidecars of a namespace and tier get one
	// config.
	ShapeSidecarShared Shape = "sidecar-shared"
	// ShapeRouter makes the Envoy-like proxies replicas of one ingress
	// gateway (Istio's "router~" node ids, labels istio=ingressgateway,
	// namespace ns-0, each on an IP of its own) and binds every generated
	// VirtualService to that gateway only (Gateway ns-0/ingress, port
	// GatewayPort, hosts */*): one route configuration, http.<port>,
	// holds a virtual host per VirtualService.
	ShapeRouter Shape = "router"
)

// GatewayPort is the port of the router shape's Gateway server.
const GatewayPort = 8080

// GatewayRouteName is the RDS name of the router shape's one route
// configuration, as vmesh and Istio name a gateway's HTTP port.
var GatewayRouteName = fmt.Sprintf("http.%d", GatewayPort)

// sidecarShape reports whether the shape's Envoy-like proxies are Envoy
// sidecars.
func (s Shape) sidecarShape() bool { return s == ShapeSidecarVM || s == ShapeSidecarShared }

// validate checks the shape's name.
func (s Shape) validate() error {
	switch s {
	case "", ShapeMixed, ShapeSidecarVM, ShapeSidecarShared, ShapeRouter:
		return nil
	}
	return fmt.Errorf("loadgen: unknown proxy shape %q (want %s, %s, %s or %s)", s, ShapeMixed, ShapeSidecarVM, ShapeSidecarShared, ShapeRouter)
}

// applyShape makes an Envoy-like spec (proxy i of the run) a sidecar of
// the shape.
func (s Shape) applyShape(sz Size, spec *ProxySpec, i int) {
	if s == ShapeRouter && spec.Style == StyleEnvoy {
		spec.Router, spec.Namespace = true, "ns-0"
		spec.Labels = map[string]string{"istio": "ingressgateway"}
		spec.IPs = []string{fmt.Sprintf("10.%d.%d.%d", 250+i/65536%5, i/256%256, i%256)}
		spec.WorkloadName = spec.ID
		return
	}
	if !s.sidecarShape() || spec.Style != StyleEnvoy {
		return
	}
	spec.Sidecar = true
	spec.Labels = map[string]string{"app": "vm-" + spec.Namespace, "tier": spec.Labels["tier"]}
	if s == ShapeSidecarShared {
		spec.IPs, spec.WorkloadName = []string{endpointAddress(0, 1, 0)}, "vm-shared"
		return
	}
	// VM i is endpoint i/services of service i%services (endpoint 0 moves
	// with the endpoint changes, so the VMs owning one see their inbound
	// side change), or past the endpoints an address no endpoint has.
	svc, ep := i%sz.Services, i/sz.Services
	if ep < sz.Endpoints {
		spec.IPs = []string{endpointAddress(svc, ep, 0)}
	} else {
		spec.IPs = []string{fmt.Sprintf("10.%d.%d.%d", 200+i/65536%50, i/256%256, i%256)}
	}
	spec.WorkloadName = spec.ID
}

// routeProbeNames are the RDS names a VirtualService change of service i
// alters, for the shape: its proxyless route configuration, and an Envoy
// sidecar's route configuration of the service port; for a router only
// the gateway's route configuration.
func (s Shape) routeProbeNames(src Source, i int) []string {
	switch {
	case s == ShapeRouter:
		return []string{GatewayRouteName}
	case !s.sidecarShape():
		return []string{src.RouteName(i)}
	}
	return []string{src.RouteName(i), sidecar.RouteName(ServicePort)}
}
