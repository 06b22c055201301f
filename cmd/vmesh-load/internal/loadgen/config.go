// Package loadgen is vmesh's load harness: it generates Istio config as
// files, runs a control plane on it in a child process (vmesh itself, or a
// baseline serving the same pre-built resources from go-control-plane's
// SnapshotCache), connects many simulated ADS proxies over loopback (state of
// the world and delta; proxyless-gRPC-like and Envoy-like subscriptions) and
// measures how long a change takes to be ACKed by every affected proxy, the
// bytes sent, and the server's CPU and memory.
package loadgen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vmesh/vmesh/registries/zookeeper"
	"github.com/vmesh/vmesh/xds"
)

// ServicePort is the port of every generated service.
const ServicePort = 7070

// Size says how much config to generate.
type Size struct {
	// Services is the number of ServiceEntries (one gRPC port each).
	Services int `json:"services"`
	// Endpoints is the number of WorkloadEntries per service (at most 99).
	Endpoints int `json:"endpoints"`
	// VirtualServices is how many services (the first ones) get a
	// VirtualService splitting between two DestinationRule subsets.
	VirtualServices int `json:"virtualServices"`
	// Namespaces spreads services (and proxies) over ns-0..ns-(N-1).
	Namespaces int `json:"namespaces"`
	// Gateway binds every VirtualService to one Gateway, ns-0/ingress
	// (ShapeRouter), instead of the mesh's sidecars and clients.
	Gateway bool `json:"gateway,omitempty"`
}

// Validate checks that the size can be generated.
func (s Size) Validate() error {
	switch {
	case s.Services < 2:
		return fmt.Errorf("loadgen: need at least 2 services, got %d", s.Services)
	case s.Services > 60000:
		return fmt.Errorf("loadgen: at most 60000 services, got %d", s.Services)
	case s.Endpoints < 1 || s.Endpoints > 99:
		return fmt.Errorf("loadgen: endpoints per service must be 1..99, got %d", s.Endpoints)
	case s.VirtualServices < 2 || s.VirtualServices > s.Services:
		return fmt.Errorf("loadgen: virtual services must be 2..services (%d), got %d", s.Services, s.VirtualServices)
	case s.Namespaces < 1:
		return fmt.Errorf("loadgen: need at least 1 namespace, got %d", s.Namespaces)
	}
	return nil
}

// Namespace returns the namespace of service i.
func (s Size) Namespace(i int) string { return fmt.Sprintf("ns-%d", i%s.Namespaces) }

// ServiceName returns the name of service i.
func ServiceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// Source says where the vmesh child reads the generated services and
// endpoints from; VirtualServices, DestinationRules and Sidecars are always
// files (in the git repository with SourceGit).
type Source string

// Sources of the generated config.
const (
	// SourceDir is a directory of files the vmesh child watches.
	SourceDir Source = "dir"
	// SourceGit is a git repository: a change is a commit, a push and a
	// webhook call.
	SourceGit Source = "git"
	// SourceZooKeeper registers every endpoint as a Dubbo provider in
	// ZooKeeper; the rest stays files.
	SourceZooKeeper Source = "zookeeper"
)

// Interface returns the Dubbo interface of service i (SourceZooKeeper).
func Interface(i int) string { return fmt.Sprintf("com.vmesh.load.Service%05d", i) }

// Host returns the host of service i: with SourceZooKeeper the host the
// ZooKeeper adapter generates for Interface(i), else a .mesh.internal name.
func (s Source) Host(i int) string {
	if s == SourceZooKeeper {
		return zookeeper.InterfaceHost(Interface(i), "", "", "")
	}
	return ServiceName(i) + ".mesh.internal"
}

// RouteName returns the LDS and RDS resource name of service i, the name a
// gRPC client dials as xds:///host:port.
func (s Source) RouteName(i int) string { return xds.ListenerName(s.Host(i), ServicePort) }

// ChangedEndpointClusters returns the EDS resources an endpoint change of
// service i alters: the service's cluster and its v1 subset (an endpoint
// change moves endpoint 0, a v1 endpoint).
func (s Source) ChangedEndpointClusters(i int) []string {
	return []string{xds.ClusterName(ServicePort, "", s.Host(i)), xds.ClusterName(ServicePort, "v1", s.Host(i))}
}

// subsetLabel is the endpoint label the DestinationRule subsets select on.
// A Dubbo provider's "version" is part of its service's identity (and
// host), so ZooKeeper providers carry the subset as "release".
func (s Source) subsetLabel() string {
	if s == SourceZooKeeper {
		return "release"
	}
	return "version"
}

// Write generates the whole config under dir with src's host names: per
// namespace a Sidecar, and per service one file for the ServiceEntry, one
// for its WorkloadEntries and, for the first VirtualServices services, one
// for its VirtualService and DestinationRule.
func Write(dir string, sz Size, src Source) error {
	if err := WriteRoutingConfig(dir, sz, src); err != nil {
		return err
	}
	for i := range sz.Services {
		if err := writeFile(dir, serviceFile(sz, i), serviceYAML(sz, src, i)); err != nil {
			return err
		}
		if err := WriteEndpoints(dir, sz, src, i, 0); err != nil {
			return err
		}
	}
	return nil
}

// WriteRoutingConfig generates the part of the config that stays files when
// a registry holds the services: the Sidecars and the VirtualServices with
// their DestinationRules.
func WriteRoutingConfig(dir string, sz Size, src Source) error {
	if err := sz.Validate(); err != nil {
		return err
	}
	for n := range sz.Namespaces {
		ns := fmt.Sprintf("ns-%d", n)
		if err := os.MkdirAll(filepath.Join(dir, ns), 0o755); err != nil {
			return fmt.Errorf("loadgen: %w", err)
		}
		if err := writeFile(dir, ns+"/sidecar.yaml", sidecarYAML(ns)); err != nil {
			return err
		}
	}
	if sz.Gateway {
		if err := writeFile(dir, "ns-0/gateway.yaml", gatewayYAML()); err != nil {
			return err
		}
	}
	for i := range sz.VirtualServices {
		if err := WriteRouting(dir, sz, src, i, 0); err != nil {
			return err
		}
	}
	return nil
}

// WriteRouting writes generation gen of service i's VirtualService and
// DestinationRule: the v1/v2 weights change with every generation.
func WriteRouting(dir string, sz Size, src Source, i, gen int) error {
	return writeFile(dir, routingFile(sz, i), routingYAML(sz, src, i, gen))
}

// WriteEndpoints writes generation gen of service i's WorkloadEntries:
// endpoint 0 moves to a new address with every generation.
func WriteEndpoints(dir string, sz Size, src Source, i, gen int) error {
	return writeFile(dir, endpointsFile(sz, i), endpointsYAML(sz, src, i, gen))
}

func serviceFile(sz Size, i int) string { return sz.Namespace(i) + "/" + ServiceName(i) + ".yaml" }
func endpointsFile(sz Size, i int) string {
	return sz.Namespace(i) + "/" + ServiceName(i) + "-endpoints.yaml"
}
func routingFile(sz Size, i int) string {
	return sz.Namespace(i) + "/" + ServiceName(i) + "-routing.yaml"
}

// writeFile replaces a file atomically (write to a temporary name, rename),
// so the control plane never reads half a file.
func writeFile(dir, rel, content string) error {
	path := filepath.Join(dir, rel)
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return nil
}

// sidecarYAML scopes workloads labelled tier=batch to their own namespace
// and ns-0, so proxies of one namespace fall into two groups.
func sidecarYAML(ns string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: Sidecar
metadata:
  name: batch
  namespace: %s
spec:
  workloadSelector:
    labels:
      tier: batch
  egress:
  - hosts:
    - "./*"
    - "ns-0/*"
`, ns)
}

func serviceYAML(sz Size, src Source, i int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  hosts:
  - %[3]s
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - name: grpc
    number: %[4]d
    protocol: GRPC
  workloadSelector:
    labels:
      app: %[1]s
`, ServiceName(i), sz.Namespace(i), src.Host(i), ServicePort)
}

// endpointAddress returns the address of endpoint j of service i at
// generation gen; only endpoint 0 moves.
func endpointAddress(i, j, gen int) string {
	last := j + 1
	if j == 0 && gen > 0 {
		last = 100 + gen%150
	}
	return fmt.Sprintf("10.%d.%d.%d", i/250, i%250, last)
}

// endpointSubset returns the subset (v1 or v2) of endpoint j.
func endpointSubset(j int) string {
	if j%2 == 1 {
		return "v2"
	}
	return "v1"
}

// endpointsYAML returns service i's WorkloadEntries at generation gen. With
// SourceZooKeeper they mirror what the adapter generates from the providers
// (subset label "release", no locality), for the baseline.
func endpointsYAML(sz Size, src Source, i, gen int) string {
	var b strings.Builder
	for j := range sz.Endpoints {
		if j > 0 {
			b.WriteString("---\n")
		}
		fmt.Fprintf(&b, `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: %[1]s-%[2]d
  namespace: %[3]s
spec:
  address: %[4]s
  labels:
    app: %[1]s
    %[5]s: %[6]s
`, ServiceName(i), j, sz.Namespace(i), endpointAddress(i, j, gen), src.subsetLabel(), endpointSubset(j))
		if src != SourceZooKeeper {
			fmt.Fprintf(&b, "  locality: region/zone-%d\n", j%3)
		}
	}
	return b.String()
}

// ProviderURL returns the Dubbo provider URL of endpoint j of service i at
// generation gen, as a Dubbo 3 Triple (gRPC-compatible) provider registers
// it: tri://address:7070/interface?... with its subset as "release".
func ProviderURL(sz Size, i, j, gen int) string {
	return fmt.Sprintf("tri://%s:%d/%s?application=load-%s&interface=%[3]s&release=%[5]s&side=provider&timestamp=1700000000000",
		endpointAddress(i, j, gen), ServicePort, Interface(i), sz.Namespace(i), endpointSubset(j))
}

// routeWeights returns the v1 and v2 weights at generation gen; consecutive
// generations always differ.
func routeWeights(gen int) (v1, v2 int) {
	v1 = 90 - gen%40
	return v1, 100 - v1
}

// gatewayYAML is ShapeRouter's Gateway: one HTTP server on GatewayPort
// for every host of every namespace, on the routers labelled
// istio=ingressgateway; and the gateway VM's WorkloadEntry with those
// labels (a Gateway no gateway VM's labels match is VM1008).
func gatewayYAML() string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: ingress
  namespace: ns-0
spec:
  selector:
    istio: ingressgateway
  servers:
  - port:
      number: %d
      name: http
      protocol: HTTP
    hosts:
    - "*/*"
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: ingress-0
  namespace: ns-0
spec:
  address: 10.250.0.0
  labels:
    istio: ingressgateway
`, GatewayPort)
}

func routingYAML(sz Size, src Source, i, gen int) string {
	v1, v2 := routeWeights(gen)
	gateways := ""
	if sz.Gateway {
		gateways = "\n  gateways:\n  - ns-0/ingress"
	}
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  hosts:
  - %[3]s%[7]s
  http:
  - route:
    - destination:
        host: %[3]s
        subset: v1
      weight: %[4]d
    - destination:
        host: %[3]s
        subset: v2
      weight: %[5]d
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  host: %[3]s
  subsets:
  - name: v1
    labels:
      %[6]s: v1
  - name: v2
    labels:
      %[6]s: v2
`, ServiceName(i), sz.Namespace(i), src.Host(i), v1, v2, src.subsetLabel(), gateways)
}
