package sidecar_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/sidecar"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// oracleProxy is the proxy a saved Istio oracle case generates for.
type oracleProxy struct {
	Node struct {
		ID           string            `json:"id"`
		Namespace    string            `json:"namespace"`
		IPs          []string          `json:"ips"`
		Labels       map[string]string `json:"labels"`
		WorkloadName string            `json:"workloadName"`
		Locality     string            `json:"locality"`
	} `json:"node"`
}

// loadOracleCase builds the model of a saved Istio oracle case (documents
// vmesh refuses are left out, as the oracle test leaves them) and its
// sidecar proxy.
func loadOracleCase(t *testing.T, cfg string) (*model.Snapshot, model.Workload) {
	t.Helper()
	objs, _, err := filestore.LoadPath(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "oracle", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	mesh := model.DefaultMesh()
	meshFile := filepath.Join(filepath.Dir(cfg), filestore.MeshConfigFile)
	if data, err := os.ReadFile(meshFile); err == nil {
		mc, _ := filestore.DecodeMeshConfig(meshFile, data)
		mesh = model.MeshFromConfig(mc)
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(cfg), "sidecar.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p oracleProxy
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("%s: %v", cfg, err)
	}
	n := p.Node
	return model.BuildWith(st.Snapshot(), mesh), model.Workload{Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(), ID: n.ID, Namespace: n.Namespace,
		IPs: n.IPs, Labels: n.Labels, WorkloadName: n.WorkloadName, Locality: n.Locality}
}

// TestReferencesMatchReflectiveWalk checks the typed traversal behind
// CheckReferences against a walk of every field and every packed Any, on
// every listener and route configuration of the golden configs and of the
// Istio oracle corpus: a filter or route the traversal skipped would name a
// reference only the walk finds.
func TestReferencesMatchReflectiveWalk(t *testing.T) {
	type proxyCase struct {
		name  string
		snap  *model.Snapshot
		proxy model.Workload
	}
	cases := []proxyCase{
		{"features", load(t, featuresDir), productpage()},
		{"quickstart", load(t, "../../examples/quickstart/config"), model.Workload{Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(),
			ID: "greeter-v1.demo", Namespace: "demo", IPs: []string{"127.0.0.1"}, Labels: map[string]string{"app": "greeter", "version": "v1"}}},
	}
	cfgs, err := filepath.Glob("../testdata/istio-oracle/*/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) == 0 {
		t.Fatal("no Istio oracle cases under ../testdata/istio-oracle")
	}
	for _, cfg := range cfgs {
		if _, err := os.Stat(filepath.Join(filepath.Dir(cfg), "sidecar.json")); os.IsNotExist(err) {
			continue // a router case (router.json only)
		}
		snap, p := loadOracleCase(t, cfg)
		cases = append(cases, proxyCase{filepath.Base(filepath.Dir(cfg)), snap, p})
	}
	var kinds struct{ routes, clusters, resources int }
	for _, c := range cases {
		res, err := sidecar.Generate(model.NewView(c.snap, c.proxy))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var ms []proto.Message
		for _, l := range res.Listeners {
			ms = append(ms, l)
		}
		for _, r := range res.Routes {
			ms = append(ms, r)
		}
		for _, m := range ms {
			typed, err := sidecar.References(m)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			walked, err := sidecar.ReflectiveReferences(m)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			slices.Sort(typed)
			slices.Sort(walked)
			if !slices.Equal(typed, walked) {
				t.Errorf("%s: %T %s: typed traversal found %v, the reflective walk %v", c.name, m, m.(interface{ GetName() string }).GetName(), typed, walked)
			}
			kinds.resources++
			for _, r := range typed {
				if strings.HasPrefix(r, "route ") {
					kinds.routes++
				} else {
					kinds.clusters++
				}
			}
		}
	}
	// The corpus must exercise both kinds of reference, or the comparison
	// proves little.
	if kinds.routes == 0 || kinds.clusters == 0 {
		t.Fatalf("corpus named %d route configurations and %d clusters", kinds.routes, kinds.clusters)
	}
	t.Logf("%d cases, %d resources: %d route configuration and %d cluster references agree", len(cases), kinds.resources, kinds.routes, kinds.clusters)
}

// TestReferencesReadDefaultChainAndRoutes covers what the generated configs
// may not: a tcp_proxy in a listener's default filter chain, and a route
// configuration checked on its own, each naming a cluster that
// CheckReferences must find.
func TestReferencesReadDefaultChainAndRoutes(t *testing.T) {
	tp, err := anypb.New(&tcpproxyv3.TcpProxy{StatPrefix: "x", ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: "default-chain"}})
	if err != nil {
		t.Fatal(err)
	}
	l := &listenerv3.Listener{Name: "l", DefaultFilterChain: &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{
		Name: "envoy.filters.network.tcp_proxy", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: tp}}}}}
	none := func(string) bool { return false }
	if err := sidecar.CheckReferences("l", l, none, none); err == nil {
		t.Error("a default chain's missing cluster passed")
	}
	rc := &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{{Name: "vh", Domains: []string{"*"}, Routes: []*routev3.Route{{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "c"}}},
	}}}}}
	if err := sidecar.CheckReferences("r", rc, none, none); err == nil {
		t.Error("a route's missing cluster passed")
	}
	if err := sidecar.CheckReferences("r", rc, none, func(n string) bool { return n == "c" }); err != nil {
		t.Errorf("a route whose cluster exists: %v", err)
	}
}
