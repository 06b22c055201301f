// Command istio-xds-oracle runs Istio's own xDS generators (istio.io/istio,
// release 1.31) in-process on every case of corpus/ and saves what they
// produce, for a proxyless gRPC client and for an Envoy sidecar on a VM, as
// JSON under xds/testdata/istio-oracle/<case>/ with the case's YAML. vmesh's
// test xds/istio_oracle_test.go compares its own generators with these saved
// answers, so `make test` never needs Istio. Regenerate with `make istio-xds`
// (or `go run . -out ../../xds/testdata/istio-oracle` in this folder).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	networking "istio.io/api/networking/v1alpha3"
	"istio.io/istio/pilot/pkg/config/kube/crd"
	"istio.io/istio/pilot/pkg/features"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/networking/grpcgen"
	labelutil "istio.io/istio/pilot/pkg/serviceregistry/util/label"
	"istio.io/istio/pilot/pkg/xds/endpoints"
	xdsfake "istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/pkg/istio-agent/grpcxds"
	istiolog "istio.io/istio/pkg/log"
)

// Node is the proxy a case's resources were generated for; the vmesh test
// builds the same model.Workload from it.
type Node struct {
	Kind         string            `json:"kind"` // "grpc", "sidecar" or "router"
	ID           string            `json:"id"`
	Namespace    string            `json:"namespace"`
	IPs          []string          `json:"ips"`
	Labels       map[string]string `json:"labels,omitempty"`
	WorkloadName string            `json:"workloadName,omitempty"`
	Locality     string            `json:"locality,omitempty"`
	// Requested are the listener names a proxyless client asked for.
	Requested []string `json:"requested,omitempty"`
}

// Output is one saved answer: grpc.json or sidecar.json.
type Output struct {
	Istio     string            `json:"istio"`
	Node      Node              `json:"node"`
	Listeners []json.RawMessage `json:"listeners"`
	Routes    []json.RawMessage `json:"routes"`
	Clusters  []json.RawMessage `json:"clusters"`
	Endpoints []json.RawMessage `json:"endpoints"`
	// Server and Inbound (grpc.json only): a proxyless gRPC server running
	// as the case's sidecar workload and the server listeners
	// (xds.istio.io/grpc/lds/inbound/IP:port) it gets for its ports.
	Server  *Node             `json:"server,omitempty"`
	Inbound []json.RawMessage `json:"inbound,omitempty"`
}

const istioVersion = "istio.io/istio v0.0.0-20260827124520-eed52ebb66ad (1.31)"

func main() {
	corpus := flag.String("corpus", "corpus", "folder of case files")
	out := flag.String("out", "../../xds/testdata/istio-oracle", "output folder")
	only := flag.String("case", "", "only this case")
	conf := flag.String("conformance", "../../gatewayapi/testdata/conformance", "where the Gateway API conformance manifests are copied")
	logs := flag.Bool("log", false, "show Istio's error logs (benign ones about Gateway API CRDs and remote clusters included)")
	flag.Parse()
	level := istiolog.NoneLevel
	if *logs {
		level = istiolog.ErrorLevel
	}
	for _, sc := range istiolog.Scopes() {
		sc.SetOutputLevel(level)
	}
	all, err := filepath.Glob(filepath.Join(*corpus, "*.yaml"))
	if err != nil {
		fatal(err)
	}
	var files []string
	for _, f := range all {
		if !strings.HasSuffix(f, ".mesh.yaml") {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		fatal(fmt.Errorf("no case files in %s", *corpus))
	}
	sort.Strings(files)
	n := 0
	for _, f := range files {
		c, err := readCase(*corpus, f)
		if err != nil {
			fatal(err)
		}
		if *only != "" && c.name != *only {
			continue
		}
		if err := run(c, filepath.Join(*out, c.name)); err != nil {
			fatal(fmt.Errorf("case %s: %w", c.name, err))
		}
		n++
	}
	fmt.Printf("%d cases written to %s\n", n, *out)
	k, err := copyConformance(*conf)
	if err != nil {
		fatal(err)
	}
	fmt.Printf("%d conformance manifests copied to %s\n", k, *conf)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "istio-xds-oracle:", err)
	os.Exit(1)
}

type corpusCase struct {
	name    string
	sidecar string // WorkloadEntry (namespace default) the sidecar runs as
	config  string // the YAML given to Istio and to vmesh
	// grpcLocality ("# grpc-locality: region/zone/subzone", the locality
	// cases) is the proxyless client's locality; "" for none.
	grpcLocality string
	// router ("# router: NAMESPACE/WORKLOADENTRY", the router cases) is
	// the gateway workload a router runs as; such a case is saved for the
	// router only (router.json).
	router string
	// proxyVersion ("# proxy-version: 1.31.0", the tracing provider
	// cases) is the Istio version the sidecar or router reports; "" is
	// the fake server's default (1.23.0), whose Zipkin tracer Istio
	// configures with the pre-1.29 fields vmesh does not send.
	proxyVersion string
	// mesh is the case's MeshConfig (corpus/<case>.mesh.yaml, the YAML under
	// the mesh key of istiod's ConfigMap); "" for Istio's defaults.
	mesh string
	// gwapi (the Gateway API cases, "# gateway-api: conformance:PATH ...")
	// are the Kubernetes manifests Istio's converter reads and their
	// mapping; config is then the YAML vmesh reads.
	gwapi *gwapiInput
}

// readCase reads a case file: header comments "# base: NAME" (prepend
// corpus/base/NAME.yaml), "# sidecar: WORKLOADENTRY", then the YAML.
func readCase(dir, path string) (corpusCase, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return corpusCase{}, err
	}
	c := corpusCase{name: strings.TrimSuffix(filepath.Base(path), ".yaml"), sidecar: "productpage-v1"}
	var bases, refs []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "#") {
			break
		}
		k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "base":
			bases = append(bases, strings.Fields(v)...)
		case "sidecar":
			c.sidecar = v
		case "grpc-locality":
			c.grpcLocality = v
		case "router":
			c.router = v
		case "proxy-version":
			c.proxyVersion = v
		case "gateway-api":
			refs = append(refs, strings.Fields(v)...)
		}
	}
	var b strings.Builder
	if len(refs) > 0 {
		if c.router == "" {
			// The mesh cases' sidecar and proxyless server: a client VM
			// in namespace default (mapped as a Deployment would be).
			c.sidecar = gwapiClient
		}
		in, origin, err := loadGatewayAPI(dir, refs, c.router == "")
		if err != nil {
			return c, err
		}
		c.gwapi = in
		fmt.Fprintf(&b, "# Gateway API case %s: %s,\n# mapped as tools/istio-xds-oracle/README.md says (Services, Deployments and Gateways\n# as ServiceEntries and WorkloadEntries); Istio's converter read the Kubernetes objects.\n", c.name, origin)
		b.WriteString(strings.Join(in.vmesh, "---\n"))
		c.config = b.String()
		return c, nil
	}
	for _, base := range bases {
		bd, err := os.ReadFile(filepath.Join(dir, "base", base+".yaml"))
		if err != nil {
			return c, err
		}
		b.Write(bytes.TrimRight(bd, "\n"))
		b.WriteString("\n---\n")
	}
	b.Write(data)
	c.config = b.String()
	if m, err := os.ReadFile(strings.TrimSuffix(path, ".yaml") + ".mesh.yaml"); err == nil {
		c.mesh = string(m)
	} else if !os.IsNotExist(err) {
		return c, err
	}
	return c, nil
}

func run(c corpusCase, dir string) (err error) {
	f := &failer{}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("istio: %v", r)
		}
		f.cleanup()
	}()
	// As istiod's Kubernetes and file config sources do, every object gets
	// the domain suffix cluster.local (short hosts like "reviews" mean
	// reviews.<namespace>.svc.cluster.local), namespace default when it has
	// none, and one creation time.
	// A Gateway API case: Istio's converter first, on the Kubernetes
	// objects; its Istio configs and the mapping are the configs.
	var converted []config.Config
	input := c.config
	if c.gwapi != nil {
		if converted, err = convertGatewayAPI(f, c.gwapi); err != nil {
			return err
		}
		input = strings.Join(c.gwapi.mapping, "---\n")
	}
	configs, unknown, err := crd.ParseInputs(input)
	if err != nil {
		return err
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%d documents of kinds Istio does not know", len(unknown))
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range configs {
		configs[i].Domain = "cluster.local"
		if configs[i].Namespace == "" {
			configs[i].Namespace = "default"
		}
		configs[i].CreationTimestamp = t0
	}
	for _, cv := range converted {
		cv.CreationTimestamp = t0
		cv.ResourceVersion = ""
		configs = append(configs, cv)
	}
	opts := xdsfake.FakeOptions{Configs: configs}
	if c.mesh != "" {
		if opts.MeshConfig, err = mesh.ApplyMeshConfigDefaults(c.mesh); err != nil {
			return fmt.Errorf("mesh config: %w", err)
		}
	}
	// A router's clusters are those of the services its Gateways' routes
	// name (PILOT_FILTER_GATEWAY_CLUSTER_CONFIG, as vmesh's routers have
	// them); the flag changes nothing for sidecars and proxyless clients,
	// and is set for the router cases only.
	features.FilterGatewayClusterConfig = c.router != ""
	s := xdsfake.NewFakeDiscoveryServer(f, opts)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(c.config), 0o644); err != nil {
		return err
	}
	convFile := filepath.Join(dir, "converted.yaml")
	if c.gwapi != nil {
		y, err := configsYAML(converted)
		if err != nil {
			return err
		}
		if err := os.WriteFile(convFile, []byte("# What Istio's converter made of the case's Gateway API objects (for reading; not compared).\n"+y), 0o644); err != nil {
			return err
		}
	}
	meshFile := filepath.Join(dir, "mesh.yaml")
	if c.mesh != "" {
		if err := os.WriteFile(meshFile, []byte(c.mesh), 0o644); err != nil {
			return err
		}
	} else if err := os.Remove(meshFile); err != nil && !os.IsNotExist(err) {
		return err
	}
	if c.router != "" {
		r, err := router(s, c.router, c.proxyVersion)
		if err != nil {
			return err
		}
		return write(filepath.Join(dir, "router.json"), r)
	}
	g, err := proxyless(s, c.grpcLocality)
	if err != nil {
		return err
	}
	if err := proxylessServer(s, c.sidecar, g); err != nil {
		return err
	}
	if err := write(filepath.Join(dir, "grpc.json"), g); err != nil {
		return err
	}
	sc, err := sidecar(s, c.sidecar, c.proxyVersion)
	if err != nil {
		return err
	}
	return write(filepath.Join(dir, "sidecar.json"), sc)
}

// proxyless asks Istio's GrpcConfigGenerator what a grpc-go client in
// namespace default would get: the listener host:port of every visible
// service port, the route configuration each names, the clusters those
// routes use plus each port's default cluster, and the endpoints of the EDS
// clusters (Istio serves proxyless EDS with its ordinary EDS generator).
// With a locality (the locality cases) the client has it as its node
// locality, and its labels get the topology labels istiod adds from it
// (region, zone, subzone: AugmentLabels, as istiod's initProxyMetadata
// does), which failoverPriority compares; the saved node keeps the labels
// it sent.
func proxyless(s *xdsfake.FakeDiscoveryServer, loc string) (*Output, error) {
	node := Node{Kind: "grpc", ID: "grpc-client.default", Namespace: "default", IPs: []string{"10.10.0.1"},
		Labels: map[string]string{"app": "grpc-client"}, Locality: loc}
	px := &model.Proxy{
		ID: node.ID, IPAddresses: node.IPs, ConfigNamespace: node.Namespace, Labels: node.Labels,
		Metadata: &model.NodeMetadata{Generator: "grpc", Namespace: node.Namespace, Labels: node.Labels},
	}
	if loc != "" {
		px.Locality = locality(loc)
		px.Labels = labelutil.AugmentLabels(node.Labels, "", loc, "", "")
	}
	p := s.SetupProxy(px)
	push := s.PushContext()
	gen := &grpcgen.GrpcConfigGenerator{}
	var names, defaults []string
	for _, svc := range p.SidecarScope.Services() {
		// The short forms a client of the service's namespace may dial
		// (reviews:9080, reviews.default:9080, reviews.default.svc:9080).
		hosts := []string{string(svc.Hostname)}
		if short, ok := strings.CutSuffix(string(svc.Hostname), "."+node.Namespace+".svc.cluster.local"); ok && !strings.Contains(short, ".") {
			hosts = append(hosts, short, short+"."+node.Namespace, short+"."+node.Namespace+".svc")
		}
		for _, port := range svc.Ports {
			for _, h := range hosts {
				names = append(names, net.JoinHostPort(h, strconv.Itoa(port.Port)))
			}
			defaults = append(defaults, model.BuildSubsetKey(model.TrafficDirectionOutbound, "", svc.Hostname, port.Port))
		}
	}
	sort.Strings(names)
	node.Requested = names
	o := &Output{Istio: istioVersion, Node: node}
	var rdsNames []string
	for _, r := range gen.BuildListeners(p, push, names) {
		l := &listener.Listener{}
		if err := r.Resource.UnmarshalTo(l); err != nil {
			return nil, err
		}
		if err := o.add(&o.Listeners, l); err != nil {
			return nil, err
		}
		h := &hcm.HttpConnectionManager{}
		if l.GetApiListener().GetApiListener().UnmarshalTo(h) == nil && h.GetRds() != nil {
			rdsNames = append(rdsNames, h.GetRds().GetRouteConfigName())
		}
	}
	cds := map[string]bool{}
	for _, d := range defaults {
		cds[d] = true
	}
	for _, r := range gen.BuildHTTPRoutes(p, push, dedupe(rdsNames)) {
		rc := &route.RouteConfiguration{}
		if err := r.Resource.UnmarshalTo(rc); err != nil {
			return nil, err
		}
		if err := o.add(&o.Routes, rc); err != nil {
			return nil, err
		}
		for _, vh := range rc.VirtualHosts {
			for _, rt := range vh.Routes {
				a := rt.GetRoute()
				if a == nil {
					continue
				}
				if c := a.GetCluster(); c != "" {
					cds[c] = true
				}
				for _, w := range a.GetWeightedClusters().GetClusters() {
					cds[w.Name] = true
				}
			}
		}
	}
	var eds []string
	for _, r := range gen.BuildClusters(p, push, sortedKeys(cds)) {
		c := &cluster.Cluster{}
		if err := r.Resource.UnmarshalTo(c); err != nil {
			return nil, err
		}
		if err := o.add(&o.Clusters, c); err != nil {
			return nil, err
		}
		if c.GetType() == cluster.Cluster_EDS {
			eds = append(eds, c.Name)
		}
	}
	for _, name := range eds {
		b := endpoints.NewEndpointBuilder(name, p, push)
		if err := o.add(&o.Endpoints, b.BuildClusterLoadAssignment(s.Discovery.Env.EndpointIndex)); err != nil {
			return nil, err
		}
	}
	return o, o.sort()
}

// proxylessServer asks Istio's GrpcConfigGenerator for the server
// listeners of a proxyless gRPC server running as WorkloadEntry we: one per
// port of the services that select it, named
// xds.istio.io/grpc/lds/inbound/IP:port (PeerAuthentication and
// AuthorizationPolicy decide their filter chains).
func proxylessServer(s *xdsfake.FakeDiscoveryServer, we string, o *Output) error {
	cfg := s.Store().Get(gvk.WorkloadEntry, we, "default")
	if cfg == nil {
		return fmt.Errorf("workload entry default/%s not found", we)
	}
	spec := cfg.Spec.(*networking.WorkloadEntry)
	node := Node{Kind: "grpc", ID: "grpc-server." + we + ".default", Namespace: "default", IPs: []string{spec.Address},
		Labels: spec.Labels, WorkloadName: we, Locality: spec.Locality}
	p := s.SetupProxy(&model.Proxy{
		ID: node.ID, IPAddresses: node.IPs, ConfigNamespace: "default", Labels: spec.Labels,
		Metadata: &model.NodeMetadata{Generator: "grpc", Namespace: "default", Labels: spec.Labels, WorkloadName: we,
			ServiceAccount: spec.ServiceAccount},
	})
	ports := map[string]bool{}
	for _, st := range p.ServiceTargets {
		ports[net.JoinHostPort(spec.Address, strconv.Itoa(int(st.Port.TargetPort)))] = true
	}
	var names []string
	for _, hp := range sortedKeys(ports) {
		names = append(names, grpcxds.ServerListenerNamePrefix+hp)
	}
	node.Requested = names
	o.Server = &node
	if len(names) == 0 {
		// A server no service selects (the Gateway API mesh cases'
		// client) has no inbound listener to ask for: Istio's generator
		// would take no names as a wildcard and answer its outbound ones.
		return nil
	}
	gen := &grpcgen.GrpcConfigGenerator{}
	for _, r := range gen.BuildListeners(p, s.PushContext(), names) {
		l := &listener.Listener{}
		if err := r.Resource.UnmarshalTo(l); err != nil {
			return err
		}
		if err := o.add(&o.Inbound, l); err != nil {
			return err
		}
	}
	return nil
}

// sidecar asks Istio's core ConfigGenerator for an Envoy sidecar running as
// the WorkloadEntry we (namespace default): its IP, labels, service account
// and locality, Istio's sidecar node metadata, the Envoy node cluster
// WORKLOAD.NAMESPACE (vmesh's agents', and Istio's OpenTelemetry service
// name), and version (the Istio version it reports; "" for the default).
func sidecar(s *xdsfake.FakeDiscoveryServer, we, version string) (*Output, error) {
	cfg := s.Store().Get(gvk.WorkloadEntry, we, "default")
	if cfg == nil {
		return nil, fmt.Errorf("sidecar workload entry default/%s not found", we)
	}
	spec := cfg.Spec.(*networking.WorkloadEntry)
	node := Node{Kind: "sidecar", ID: "sidecar~" + spec.Address + "~" + we + ".default~default.svc.cluster.local",
		Namespace: "default", IPs: []string{spec.Address}, Labels: spec.Labels, WorkloadName: we, Locality: spec.Locality}
	md := &model.NodeMetadata{Namespace: "default", Labels: spec.Labels, WorkloadName: we, ServiceAccount: spec.ServiceAccount,
		InterceptionMode: model.InterceptionRedirect, IstioVersion: version}
	px := &model.Proxy{Type: model.SidecarProxy, ID: node.ID, IPAddresses: node.IPs, ConfigNamespace: "default", Labels: spec.Labels, Metadata: md,
		XdsNode: &core.Node{Id: node.ID, Cluster: we + ".default"}}
	if spec.Locality != "" {
		px.Locality = locality(spec.Locality)
		px.Labels = labelutil.AugmentLabels(spec.Labels, "", spec.Locality, "", "")
	}
	p := s.SetupProxy(px)
	o := &Output{Istio: istioVersion, Node: node}
	ls := s.Listeners(p)
	for _, l := range ls {
		if err := o.add(&o.Listeners, l); err != nil {
			return nil, err
		}
	}
	for _, r := range s.RoutesFromListeners(p, ls) {
		if err := o.add(&o.Routes, r); err != nil {
			return nil, err
		}
	}
	for _, c := range s.Clusters(p) {
		if err := o.add(&o.Clusters, c); err != nil {
			return nil, err
		}
	}
	for _, e := range s.Endpoints(p) {
		if err := o.add(&o.Endpoints, e); err != nil {
			return nil, err
		}
	}
	return o, o.sort()
}

// router asks Istio's core ConfigGenerator for a gateway (Istio's Router
// proxy, an Envoy in router mode) running as the WorkloadEntry nsName
// ("namespace/name"): its IP, labels and service account, node id
// router~IP~name.ns~ns.svc.cluster.local, Istio's gateway node metadata,
// node cluster name.ns and version as the sidecar's.
func router(s *xdsfake.FakeDiscoveryServer, nsName, version string) (*Output, error) {
	ns, we, ok := strings.Cut(nsName, "/")
	if !ok {
		return nil, fmt.Errorf("router %q: want namespace/name", nsName)
	}
	cfg := s.Store().Get(gvk.WorkloadEntry, we, ns)
	if cfg == nil {
		return nil, fmt.Errorf("router workload entry %s not found", nsName)
	}
	spec := cfg.Spec.(*networking.WorkloadEntry)
	node := Node{Kind: "router", ID: "router~" + spec.Address + "~" + we + "." + ns + "~" + ns + ".svc.cluster.local",
		Namespace: ns, IPs: []string{spec.Address}, Labels: spec.Labels, WorkloadName: we, Locality: spec.Locality}
	md := &model.NodeMetadata{Namespace: ns, Labels: spec.Labels, WorkloadName: we, ServiceAccount: spec.ServiceAccount, IstioVersion: version}
	px := &model.Proxy{Type: model.Router, ID: node.ID, IPAddresses: node.IPs, ConfigNamespace: ns, Labels: spec.Labels, Metadata: md,
		XdsNode: &core.Node{Id: node.ID, Cluster: we + "." + ns}}
	if spec.Locality != "" {
		px.Locality = locality(spec.Locality)
	}
	p := s.SetupProxy(px)
	o := &Output{Istio: istioVersion, Node: node}
	ls := s.Listeners(p)
	for _, l := range ls {
		if err := o.add(&o.Listeners, l); err != nil {
			return nil, err
		}
	}
	for _, r := range s.RoutesFromListeners(p, ls) {
		if err := o.add(&o.Routes, r); err != nil {
			return nil, err
		}
	}
	for _, c := range s.Clusters(p) {
		if err := o.add(&o.Clusters, c); err != nil {
			return nil, err
		}
	}
	for _, e := range s.Endpoints(p) {
		if err := o.add(&o.Endpoints, e); err != nil {
			return nil, err
		}
	}
	return o, o.sort()
}

func locality(s string) *core.Locality {
	parts := strings.SplitN(s, "/", 3)
	l := &core.Locality{Region: parts[0]}
	if len(parts) > 1 {
		l.Zone = parts[1]
	}
	if len(parts) > 2 {
		l.SubZone = parts[2]
	}
	return l
}

func (o *Output) add(dst *[]json.RawMessage, m proto.Message) error {
	b, err := protojson.MarshalOptions{}.Marshal(m)
	if err != nil {
		return fmt.Errorf("%T: %w", m, err)
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		return err
	}
	*dst = append(*dst, c.Bytes())
	return nil
}

// sort orders each list by resource name (cluster_name for endpoints).
func (o *Output) sort() error {
	for _, l := range []*[]json.RawMessage{&o.Listeners, &o.Routes, &o.Clusters, &o.Endpoints} {
		type named struct {
			Name        string `json:"name"`
			ClusterName string `json:"clusterName"`
		}
		keys := make([]string, len(*l))
		for i, r := range *l {
			var n named
			if err := json.Unmarshal(r, &n); err != nil {
				return err
			}
			keys[i] = n.Name + n.ClusterName
		}
		idx := make([]int, len(*l))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return keys[idx[a]] < keys[idx[b]] })
		sorted := make([]json.RawMessage, len(*l))
		for i, j := range idx {
			sorted[i] = (*l)[j]
		}
		*l = sorted
	}
	return nil
}

// write saves o with one resource per line, so that a regeneration's diff
// shows which resources changed.
func write(path string, o *Output) error {
	var b bytes.Buffer
	field := func(name string, v any, last bool) error {
		j, err := json.Marshal(v)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, " %q: %s", name, j)
		if !last {
			b.WriteString(",")
		}
		b.WriteString("\n")
		return nil
	}
	list := func(name string, l []json.RawMessage, last bool) {
		fmt.Fprintf(&b, " %q: [", name)
		for i, r := range l {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n  ")
			b.Write(r)
		}
		if len(l) > 0 {
			b.WriteString("\n ")
		}
		b.WriteString("]")
		if !last {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("{\n")
	if err := field("istio", o.Istio, false); err != nil {
		return err
	}
	if err := field("node", o.Node, false); err != nil {
		return err
	}
	if o.Server != nil {
		if err := field("server", o.Server, false); err != nil {
			return err
		}
		list("inbound", o.Inbound, false)
	}
	list("listeners", o.Listeners, false)
	list("routes", o.Routes, false)
	list("clusters", o.Clusters, false)
	list("endpoints", o.Endpoints, true)
	b.WriteString("}\n")
	if !json.Valid(b.Bytes()) {
		return fmt.Errorf("%s: invalid JSON written", path)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func dedupe(s []string) []string {
	m := map[string]bool{}
	for _, x := range s {
		m[x] = true
	}
	return sortedKeys(m)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// failer is the test.Failer Istio's fake discovery server wants, outside a
// test: failures panic (recovered per case) and cleanups run after the case.
type failer struct{ cleanups []func() }

func (f *failer) Fail()                          { panic("failed") }
func (f *failer) FailNow()                       { panic("failed") }
func (f *failer) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (f *failer) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (f *failer) Log(args ...any)                {}
func (f *failer) Logf(format string, a ...any)   {}
func (f *failer) Helper()                        {}
func (f *failer) Skip(args ...any)               { panic(fmt.Sprint(args...)) }
func (f *failer) Cleanup(fn func())              { f.cleanups = append(f.cleanups, fn) }
func (f *failer) TempDir() string {
	d, err := os.MkdirTemp("", "istio-xds-oracle")
	if err != nil {
		panic(err)
	}
	f.cleanups = append(f.cleanups, func() { os.RemoveAll(d) })
	return d
}

func (f *failer) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	f.cleanups = nil
}
