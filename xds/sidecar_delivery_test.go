package xds_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"github.com/vmesh/vmesh/xds/sidecar"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// envoyNode is an Envoy sidecar's xDS node as the agent's Envoy bootstrap
// writes it: no GENERATOR, Istio's metadata keys, a locality.
type envoyNode struct {
	id, ns, ip, workload string
	labels               map[string]string
	locality             *corev3.Locality
}

func (n envoyNode) proto(t *testing.T) *corev3.Node {
	t.Helper()
	labels := map[string]any{}
	for k, v := range n.labels {
		labels[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": n.ns, "LABELS": labels, "INSTANCE_IPS": n.ip, "WORKLOAD_NAME": n.workload})
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Node{Id: n.id, Metadata: md, Locality: n.locality}
}

// adsClient is a hand-written ADS client that subscribes as Envoy does and
// ACKs every response.
type adsClient interface {
	// subscribe asks for a type: nil names is a wildcard subscription.
	subscribe(typeURL string, names []string)
	// receive waits for one response, ACKs it and returns its type and the
	// resources it adds or replaces (by name) and removes.
	receive() (typeURL string, resources map[string]*anypb.Any, removed []string, replaceAll bool)
}

type sotwADS struct {
	t      *testing.T
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *corev3.Node
	names  map[string][]string
	resp   chan *discoveryv3.DiscoveryResponse
}

func adsConn(t *testing.T, addr string) discoveryv3.AggregatedDiscoveryServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
}

func newSotwADS(t *testing.T, ctx context.Context, addr string, node *corev3.Node) *sotwADS {
	stream, err := adsConn(t, addr).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &sotwADS{t: t, stream: stream, node: node, names: map[string][]string{}, resp: make(chan *discoveryv3.DiscoveryResponse, 16)}
	go func() {
		defer close(c.resp)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			c.resp <- r
		}
	}()
	return c
}

func (c *sotwADS) send(req *discoveryv3.DiscoveryRequest) {
	c.t.Helper()
	req.Node = c.node
	if err := c.stream.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

func (c *sotwADS) subscribe(typeURL string, names []string) {
	c.names[typeURL] = names
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
}

func (c *sotwADS) receive() (string, map[string]*anypb.Any, []string, bool) {
	c.t.Helper()
	select {
	case r, ok := <-c.resp:
		if !ok {
			c.t.Fatal("SotW stream closed")
		}
		c.send(&discoveryv3.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: c.names[r.GetTypeUrl()]})
		out := map[string]*anypb.Any{}
		for _, a := range r.GetResources() {
			out[resourceName(c.t, a)] = a
		}
		return r.GetTypeUrl(), out, nil, true
	case <-time.After(10 * time.Second):
		c.t.Fatal("no SotW response")
	}
	return "", nil, nil, false
}

// newDeltaADS is delta_test.go's client with an Envoy node.
func newDeltaADS(t *testing.T, ctx context.Context, addr string, node *corev3.Node) *deltaClient {
	c := newDeltaClient(t, ctx, addr, node.GetId())
	c.node = node
	return c
}

func (c *deltaClient) subscribe(typeURL string, names []string) {
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names})
}

func (c *deltaClient) receive() (string, map[string]*anypb.Any, []string, bool) {
	c.t.Helper()
	r := c.next()
	out := map[string]*anypb.Any{}
	for _, res := range r.GetResources() {
		if n := resourceName(c.t, res.GetResource()); n != res.GetName() {
			c.t.Errorf("delta resource %q carries %q", res.GetName(), n)
		}
		out[res.GetName()] = res.GetResource()
	}
	return r.GetTypeUrl(), out, r.GetRemovedResources(), false
}

// resourceName unpacks a resource and returns its name.
func resourceName(t *testing.T, a *anypb.Any) string {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("unpacking %s: %v", a.GetTypeUrl(), err)
	}
	switch r := m.(type) {
	case *listenerv3.Listener:
		return r.GetName()
	case *routev3.RouteConfiguration:
		return r.GetName()
	case *clusterv3.Cluster:
		return r.GetName()
	case *endpointv3.ClusterLoadAssignment:
		return r.GetClusterName()
	}
	t.Fatalf("unexpected resource type %s", a.GetTypeUrl())
	return ""
}

// receiveLikeEnvoy subscribes as Envoy does (wildcard CDS and LDS, then EDS
// for the EDS clusters and RDS for the route configurations the listeners
// name), ACKs everything and returns the resources held once every
// referenced name has arrived.
func receiveLikeEnvoy(t *testing.T, c adsClient) map[string]map[string]*anypb.Any {
	t.Helper()
	held := map[string]map[string]*anypb.Any{}
	want := map[string][]string{} // names subscribed per type; nil for wildcards
	c.subscribe(resourcev3.ClusterType, nil)
	c.subscribe(resourcev3.ListenerType, nil)
	seen := map[string]bool{}
	done := func() bool {
		if !seen[resourcev3.ClusterType] || !seen[resourcev3.ListenerType] {
			return false
		}
		for _, typ := range []string{resourcev3.RouteType, resourcev3.EndpointType} {
			names, ok := want[typ]
			if !ok {
				return false
			}
			for _, n := range names {
				if held[typ][n] == nil {
					return false
				}
			}
		}
		return true
	}
	for i := 0; !done(); i++ {
		if i == 20 {
			t.Fatalf("after %d responses still missing resources; held %v, want %v", i, heldNames(held), want)
		}
		typ, res, removed, replaceAll := c.receive()
		seen[typ] = true
		if replaceAll || held[typ] == nil {
			held[typ] = map[string]*anypb.Any{} // SotW: a response holds the whole subscribed set
		}
		for n, a := range res {
			held[typ][n] = a
		}
		for _, n := range removed {
			delete(held[typ], n)
		}
		var refs []string
		var next string
		switch typ {
		case resourcev3.ListenerType:
			refs, next = routeRefs(t, held[typ]), resourcev3.RouteType
		case resourcev3.ClusterType:
			refs, next = edsRefs(t, held[typ]), resourcev3.EndpointType
		default:
			continue
		}
		if _, ok := want[next]; !ok {
			want[next] = refs
			if len(refs) > 0 {
				c.subscribe(next, refs)
			}
		} else if !slices.Equal(want[next], refs) {
			t.Fatalf("%s references changed while the config did not: %v -> %v", next, want[next], refs)
		}
	}
	return held
}

func heldNames(held map[string]map[string]*anypb.Any) map[string]int {
	out := map[string]int{}
	for typ, m := range held {
		out[typ] = len(m)
	}
	return out
}

// routeRefs returns the RDS names the listeners' HttpConnectionManagers use.
func routeRefs(t *testing.T, listeners map[string]*anypb.Any) []string {
	t.Helper()
	var out []string
	for _, a := range listeners {
		l := &listenerv3.Listener{}
		if err := a.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		for _, fc := range append(slices.Clone(l.GetFilterChains()), l.GetDefaultFilterChain()) {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().MessageIs(hcm) {
					if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
						t.Fatal(err)
					}
					if n := hcm.GetRds().GetRouteConfigName(); n != "" && !slices.Contains(out, n) {
						out = append(out, n)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// edsRefs returns the EDS service names of the EDS clusters.
func edsRefs(t *testing.T, clusters map[string]*anypb.Any) []string {
	t.Helper()
	var out []string
	for _, a := range clusters {
		c := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		if c.GetType() == clusterv3.Cluster_EDS {
			if c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
				t.Errorf("cluster %s: EDS not over ADS", c.GetName())
			}
			out = append(out, c.GetEdsClusterConfig().GetServiceName())
		}
	}
	slices.Sort(out)
	return out
}

// decode unpacks what a client holds into sidecar.Resources, validating
// every resource and every Any inside it.
func decode(t *testing.T, held map[string]map[string]*anypb.Any) *sidecar.Resources {
	t.Helper()
	r := &sidecar.Resources{}
	for _, typ := range []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType} {
		for _, n := range slices.Sorted(maps.Keys(held[typ])) {
			m, err := held[typ][n].UnmarshalNew()
			if err != nil {
				t.Fatalf("%s %s: %v", typ, n, err)
			}
			if err := sidecar.Validate(m); err != nil {
				t.Errorf("%s %s: %v", typ, n, err)
			}
			switch v := m.(type) {
			case *listenerv3.Listener:
				r.Listeners = append(r.Listeners, v)
			case *routev3.RouteConfiguration:
				r.Routes = append(r.Routes, v)
			case *clusterv3.Cluster:
				r.Clusters = append(r.Clusters, v)
			case *endpointv3.ClusterLoadAssignment:
				r.Endpoints = append(r.Endpoints, v)
			}
		}
	}
	return r
}

// byName orders resources the way decode does, for comparison.
func byName(r *sidecar.Resources) *sidecar.Resources {
	out := &sidecar.Resources{
		Listeners: slices.Clone(r.Listeners), Routes: slices.Clone(r.Routes),
		Clusters: slices.Clone(r.Clusters), Endpoints: slices.Clone(r.Endpoints), Missing: r.Missing,
	}
	slices.SortFunc(out.Listeners, func(a, b *listenerv3.Listener) int { return strings.Compare(a.GetName(), b.GetName()) })
	slices.SortFunc(out.Routes, func(a, b *routev3.RouteConfiguration) int { return strings.Compare(a.GetName(), b.GetName()) })
	slices.SortFunc(out.Clusters, func(a, b *clusterv3.Cluster) int { return strings.Compare(a.GetName(), b.GetName()) })
	slices.SortFunc(out.Endpoints, func(a, b *endpointv3.ClusterLoadAssignment) int {
		return strings.Compare(a.GetClusterName(), b.GetClusterName())
	})
	return out
}

// TestSidecarDelivery serves the quickstart and the every-feature config
// (the configs of xds/sidecar's golden files) to Envoy-like ADS clients,
// over state of the world and over delta: each subscribes as Envoy does,
// ACKs, and must end up holding exactly what the sidecar generator makes
// for it, every resource valid with every Any unpacked, every reference
// resolved; /debug/syncz then shows all four types ACKed and no NACK.
func TestSidecarDelivery(t *testing.T) {
	cases := []struct {
		name string
		dir  string
		node envoyNode
	}{
		{name: "quickstart", dir: "../examples/quickstart/config", node: envoyNode{
			id: "sidecar~127.0.0.1~greeter-v1.demo~demo.svc.cluster.local", ns: "demo", ip: "127.0.0.1", workload: "greeter-v1",
			labels: map[string]string{"app": "greeter", "version": "v1"}, locality: &corev3.Locality{Region: "local", Zone: "zone-a"},
		}},
		{name: "features", dir: "sidecar/testdata/features", node: envoyNode{
			id: "sidecar~10.0.0.5~productpage-1.shop~shop.svc.cluster.local", ns: "shop", ip: "10.0.0.5", workload: "productpage-1",
			labels: map[string]string{"app": "productpage"}, locality: &corev3.Locality{Region: "us-east", Zone: "zone-a", SubZone: "rack-1"},
		}},
	}
	for _, tc := range cases {
		objs, errs, err := filestore.LoadPath(tc.dir)
		if err != nil || len(errs) > 0 {
			t.Fatalf("%s: %v %v", tc.dir, err, errs)
		}
		cs := store.NewStore()
		if err := cs.Replace(testSource, objs); err != nil {
			t.Fatal(err)
		}
		for _, protocol := range []string{"sotw", "delta"} {
			t.Run(tc.name+"/"+protocol, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				m := startMesh(t, ctx, cs)
				node := tc.node.proto(t)
				var c adsClient
				if protocol == "sotw" {
					c = newSotwADS(t, ctx, m.addr, node)
				} else {
					c = newDeltaADS(t, ctx, m.addr, node)
				}
				got := decode(t, receiveLikeEnvoy(t, c))
				p, err := xds.ProxyFromNode(node)
				if err != nil {
					t.Fatal(err)
				}
				want, err := sidecar.Generate(model.NewView(model.Build(cs.Snapshot()), p.Workload()))
				if err != nil {
					t.Fatal(err)
				}
				// The routes may name only the clusters the generator named
				// for destinations the proxy has none for.
				got.Missing = want.Missing
				if err := got.Consistent(); err != nil {
					t.Errorf("delivered config: %v", err)
				}
				if diff := cmp.Diff(byName(want), got, protocmp.Transform(), cmpopts.IgnoreFields(sidecar.Resources{}, "Missing")); diff != "" {
					t.Errorf("delivered config differs from the generated one (-generated +delivered):\n%s", diff)
				}
				if len(got.Listeners) < 3 || len(got.Routes) == 0 || len(got.Clusters) < 4 || len(got.Endpoints) == 0 {
					t.Errorf("suspiciously little config: %d listeners, %d routes, %d clusters, %d endpoints",
						len(got.Listeners), len(got.Routes), len(got.Clusters), len(got.Endpoints))
				}
				eventually(t, "all four types ACKed", func() bool { return allAcked(m.syncz(), p.ID, protocol) })
				if n := m.counter("vmesh_xds_nacks_total", ""); n != 0 {
					t.Errorf("NACKs: %v", n)
				}
			})
		}
	}
}

// allAcked reports whether the proxy's stream has ACKed what it was sent,
// for every type, without a NACK.
func allAcked(st []xds.SyncStatus, id, protocol string) bool {
	for _, s := range st {
		if s.ID != id || s.Protocol != protocol || s.Kind != xds.KindSidecar {
			continue
		}
		for _, typ := range []string{"LDS", "RDS", "CDS", "EDS"} {
			ts := s.Types[typ]
			if ts == nil || ts.Sent == "" || ts.Acked != ts.Sent || ts.Nack != "" {
				return false
			}
		}
		return true
	}
	return false
}

// Proxies whose group keys are equal get one generation; the key must
// therefore hold every input the sidecar generator reads. Sidecars that
// differ in IP, workload name, locality or labels get their own groups; a
// second instance of the same workload shares.
func TestSidecarGroupKey(t *testing.T) {
	objs, errs, err := filestore.LoadPath("sidecar/testdata/features")
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	// A route only canary clients get: labels no policy selects matter.
	canary := &store.Object{Key: store.Key{Kind: store.KindVirtualService, Namespace: "shop", Name: "ratings-canary"},
		Spec: &networking.VirtualService{Hosts: []string{"ratings"}, Http: []*networking.HTTPRoute{{
			Match: []*networking.HTTPMatchRequest{{SourceLabels: map[string]string{"canary": "true"}}},
			Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "ratings"}}},
			Fault: &networking.HTTPFaultInjection{Abort: &networking.HTTPFaultInjection_Abort{ErrorType: &networking.HTTPFaultInjection_Abort_HttpStatus{HttpStatus: 418}}},
		}}}}
	cs := store.NewStore()
	if err := cs.Replace(testSource, append(objs, canary)); err != nil {
		t.Fatal(err)
	}
	s := model.Build(cs.Snapshot())
	base := xds.Proxy{ID: "a", Kind: xds.KindSidecar, Namespace: "shop", Labels: map[string]string{"app": "productpage"},
		IPs: []string{"10.0.0.5"}, WorkloadName: "productpage-1", Locality: "us-east/zone-a/rack-1"}
	gen := func(p xds.Proxy) string {
		lds, err := xds.Listeners(s, &p)
		if err != nil {
			t.Fatal(err)
		}
		rds, err := xds.Routes(s, &p)
		if err != nil {
			t.Fatal(err)
		}
		eds, err := xds.Endpoints(s, &p)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(lds, rds, eds)
	}
	same := base
	same.ID = "b"
	if xds.GroupKey(s, &base) != xds.GroupKey(s, &same) {
		t.Errorf("two streams of one workload split: %q vs %q", xds.GroupKey(s, &base), xds.GroupKey(s, &same))
	}
	stranger := base // an IP the config has no endpoint for, no workload name
	stranger.IPs, stranger.WorkloadName = []string{"10.0.0.9"}, ""
	for name, pair := range map[string][2]func(*xds.Proxy){
		"ip":       {func(p *xds.Proxy) { p.WorkloadName = "" }, func(p *xds.Proxy) { p.IPs, p.WorkloadName = []string{"10.0.0.9"}, "" }},
		"workload": {func(p *xds.Proxy) { *p = stranger }, func(p *xds.Proxy) { *p = stranger; p.WorkloadName = "productpage-1" }},
		"locality": {func(*xds.Proxy) {}, func(p *xds.Proxy) { p.Locality = "eu-west/zone-b" }},
		"labels":   {func(*xds.Proxy) {}, func(p *xds.Proxy) { p.Labels = map[string]string{"app": "productpage", "canary": "true"} }},
	} {
		a, b := base, base
		pair[0](&a)
		pair[1](&b)
		if gen(a) == gen(b) {
			t.Errorf("%s: the generated config does not depend on it; pick a change that does", name)
		}
		if xds.GroupKey(s, &a) == xds.GroupKey(s, &b) {
			t.Errorf("%s changes the config but not the group key %q", name, xds.GroupKey(s, &a))
		}
	}
}

// An endpoint change reaches an Envoy sidecar as an EDS-only push when only
// endpoints changed for it, and as a cluster update too when it changes
// what clusters verify (a new service account is a new SAN). Each update
// validates and keeps the delivered config consistent.
func TestSidecarEndpointPushes(t *testing.T) {
	objs, errs, err := filestore.LoadPath("sidecar/testdata/features")
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	cs := store.NewStore()
	if err := cs.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := startMesh(t, ctx, cs)
	node := envoyNode{id: "pp", ns: "shop", ip: "10.0.0.5", workload: "productpage-1", labels: map[string]string{"app": "productpage"}}
	c := newDeltaADS(t, ctx, m.addr, node.proto(t))
	held := receiveLikeEnvoy(t, c)
	// The clusters the routes name for destinations the proxy has none
	// for (the pushes below change endpoints only).
	p, err := xds.ProxyFromNode(node.proto(t))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := sidecar.Generate(model.NewView(model.Build(cs.Snapshot()), p.Workload()))
	if err != nil {
		t.Fatal(err)
	}
	missing := gen.Missing
	cds := map[string]bool{}
	for _, c := range gen.Clusters {
		cds[c.GetName()] = true
	}
	named := false
	for _, rc := range gen.Routes {
		for _, vh := range rc.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				for _, wc := range rt.GetRoute().GetWeightedClusters().GetClusters() {
					named = named || !cds[wc.GetName()] && missing(wc.GetName())
				}
				if c := rt.GetRoute().GetCluster(); c != "" {
					named = named || !cds[c] && missing(c)
				}
			}
		}
	}
	if !named {
		t.Fatal("the features config names no missing destination: the checks below would not cover one")
	}

	reviews := func(name, addr, sa string) *store.Object {
		return &store.Object{Key: store.Key{Kind: store.KindWorkloadEntry, Namespace: "shop", Name: name},
			Spec: &networking.WorkloadEntry{Address: addr, ServiceAccount: sa,
				Labels: map[string]string{"app": "reviews", "version": "v1", "security.istio.io/tlsMode": "istio"}}}
	}
	// pushTypes applies objs and returns the types pushed until the stream
	// is quiet, checking the delivered config after each response.
	pushTypes := func(objs []*store.Object) []string {
		t.Helper()
		if err := cs.Replace(testSource, objs); err != nil {
			t.Fatal(err)
		}
		var types []string
		for {
			select {
			case <-time.After(500 * time.Millisecond):
				slices.Sort(types)
				return slices.Compact(types)
			case r, ok := <-c.resp:
				if !ok {
					t.Fatal("stream closed")
				}
				c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
				types = append(types, r.GetTypeUrl())
				for _, res := range r.GetResources() {
					held[r.GetTypeUrl()][res.GetName()] = res.GetResource()
				}
				for _, n := range r.GetRemovedResources() {
					delete(held[r.GetTypeUrl()], n)
				}
				got := decode(t, held)
				got.Missing = missing
				if err := got.Consistent(); err != nil {
					t.Fatalf("after a %s push: %v", r.GetTypeUrl(), err)
				}
			}
		}
	}
	if got := pushTypes(append(slices.Clone(objs), reviews("reviews-v1b", "10.0.1.9", "reviews"))); !slices.Equal(got, []string{resourcev3.EndpointType}) {
		t.Errorf("a same-identity endpoint pushed %v, want EDS only", got)
	}
	if got := pushTypes(append(slices.Clone(objs), reviews("reviews-v1b", "10.0.1.9", "reviews-next"))); !slices.Contains(got, resourcev3.ClusterType) {
		t.Errorf("a new service account pushed %v, want CDS (the SANs clusters verify)", got)
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := held[resourcev3.EndpointType]["outbound|9080|v1|reviews.shop.svc.cluster.local"].UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	if n := len(cla.GetEndpoints()); n == 0 || !strings.Contains(cla.String(), "10.0.1.9") {
		t.Errorf("v1 endpoints after the pushes: %v", cla)
	}
}
