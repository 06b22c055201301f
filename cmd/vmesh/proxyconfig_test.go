package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/xdstest"
)

// rawClient is a proxyless gRPC node's ADS stream driven by hand, so the
// test knows exactly which resources it ACKed.
type rawClient struct {
	t      *testing.T
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *corev3.Node
	names  map[string][]string
	resp   chan *discoveryv3.DiscoveryResponse
	// acked holds, per type, the resources of every response ACKed, by
	// name (later responses replace earlier ones of the same name).
	acked map[string]map[string][]byte
}

func newRawClient(t *testing.T, addr, id, ns string) *rawClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": ns})
	c := &rawClient{t: t, stream: stream, node: &corev3.Node{Id: id, Metadata: md}, names: map[string][]string{},
		resp: make(chan *discoveryv3.DiscoveryResponse, 16), acked: map[string]map[string][]byte{}}
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

func (c *rawClient) subscribe(typeURL string, names ...string) {
	c.t.Helper()
	c.names[typeURL] = names
	if err := c.stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		c.t.Fatal(err)
	}
}

// next waits for a response of typeURL, ACKs it (or NACKs it with nack
// set) and returns its resources.
func (c *rawClient) next(typeURL, nack string) []*discoveryv3.DiscoveryResponse {
	c.t.Helper()
	var got []*discoveryv3.DiscoveryResponse
	for {
		select {
		case r, ok := <-c.resp:
			if !ok {
				c.t.Fatal("ADS stream closed")
			}
			req := &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: c.names[r.GetTypeUrl()]}
			if nack != "" && r.GetTypeUrl() == typeURL {
				req.ErrorDetail = &status.Status{Code: 3, Message: nack}
				req.VersionInfo = ""
			} else {
				if c.acked[r.GetTypeUrl()] == nil {
					c.acked[r.GetTypeUrl()] = map[string][]byte{}
				}
				for _, a := range r.GetResources() {
					m, err := a.UnmarshalNew()
					if err != nil {
						c.t.Fatal(err)
					}
					var name string
					switch r := m.(type) {
					case interface{ GetClusterName() string }:
						name = r.GetClusterName()
					case interface{ GetName() string }:
						name = r.GetName()
					}
					c.acked[r.GetTypeUrl()][name] = a.GetValue()
				}
			}
			if err := c.stream.Send(req); err != nil {
				c.t.Fatal(err)
			}
			got = append(got, r)
			if r.GetTypeUrl() == typeURL {
				return got
			}
		case <-time.After(20 * time.Second):
			c.t.Fatalf("no %s response", typeURL)
		}
	}
}

// yamlRoutes reads `proxy-config routes -o yaml` back into messages.
func yamlRoutes(t *testing.T, out string) map[string]*routev3.RouteConfiguration {
	t.Helper()
	var list []any
	if err := yaml.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("proxy-config -o yaml is not YAML: %v\n%s", err, out)
	}
	got := map[string]*routev3.RouteConfiguration{}
	for _, item := range list {
		b, err := json.Marshal(item)
		if err != nil {
			t.Fatal(err)
		}
		var rc routev3.RouteConfiguration
		if err := protojson.Unmarshal(b, &rc); err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		got[rc.GetName()] = &rc
	}
	return got
}

// checkRoutesEqualACKed compares `proxy-config routes -o yaml` with the
// RDS the raw client ACKed.
func checkRoutesEqualACKed(t *testing.T, server string, c *rawClient, wantTimeout string) {
	t.Helper()
	out, code := runVMesh(t, "proxy-config", "routes", c.node.GetId(), "--server", server, "-o", "yaml")
	if code != 0 {
		t.Fatalf("proxy-config routes: exit %d\n%s", code, out)
	}
	got := yamlRoutes(t, out)
	acked := c.acked[resourcev3.RouteType]
	if len(got) != len(acked) || len(acked) == 0 {
		t.Fatalf("proxy-config routes lists %d route configurations, the client ACKed %d:\n%s", len(got), len(acked), out)
	}
	for name, b := range acked {
		var want routev3.RouteConfiguration
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got[name], &want) {
			t.Errorf("route %s: proxy-config says\n%v\nthe client ACKed\n%v", name, got[name], &want)
		}
	}
	if !strings.Contains(out, "maxStreamDuration: "+wantTimeout) {
		t.Errorf("routes -o yaml lacks maxStreamDuration %s:\n%s", wantTimeout, out)
	}
}

func TestProxyConfigIsWhatTheProxyACKed(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("services.yaml", opsServices)
	write("route.yaml", fmt.Sprintf(opsRoute, "5s"))
	write("workloads.yaml", opsWorkload("greeter-v1", "demo", "greeter", 7001))
	cp, _ := servePlane(t, "", func(c *controlplane.Config) {
		c.ConfigDir, c.DebounceQuiet, c.DebounceMax = dir, 20*time.Millisecond, 200*time.Millisecond
	})
	server := cp.HTTPAddr()

	c := newRawClient(t, cp.XDSAddr(), "raw-client", "demo")
	c.subscribe(resourcev3.ListenerType, "greeter.demo.internal:50051")
	lds := c.next(resourcev3.ListenerType, "")
	var l listenerv3.Listener
	if err := lds[len(lds)-1].GetResources()[0].UnmarshalTo(&l); err != nil {
		t.Fatal(err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := l.GetApiListener().GetApiListener().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	c.subscribe(resourcev3.RouteType, hcm.GetRds().GetRouteConfigName())
	c.next(resourcev3.RouteType, "")
	c.subscribe(resourcev3.ClusterType, "outbound|50051|v1|greeter.demo.internal")
	c.next(resourcev3.ClusterType, "")
	c.subscribe(resourcev3.EndpointType, "outbound|50051|v1|greeter.demo.internal")
	c.next(resourcev3.EndpointType, "")
	// The ACKs reach the server on the stream before the dump is read: an
	// ACKed version shows in syncz once they have.
	xdstest.Eventually(t, "every type ACKed", func() bool {
		out, _ := runVMesh(t, "status", "--server", server, "-o", "json")
		return strings.Count(out, `"SYNCED r`) >= 4
	})

	checkRoutesEqualACKed(t, server, c, "5s")

	// A changed VirtualService: the new route configuration, ACKed, is what
	// proxy-config shows.
	write("route.yaml", fmt.Sprintf(opsRoute, "7s"))
	c.next(resourcev3.RouteType, "")
	xdstest.Eventually(t, "the new RDS ACKed", func() bool {
		out, _ := runVMesh(t, "proxy-config", "routes", "raw-client", "--server", server, "-o", "yaml")
		return strings.Contains(out, "maxStreamDuration: 7s")
	})
	checkRoutesEqualACKed(t, server, c, "7s")

	// Tables like istioctl's, from the same resources.
	for _, tc := range []struct{ kind, want string }{
		{"listeners", "greeter.demo.internal:50051"},
		{"listeners", "API listener"},
		{"routes", "outbound|50051|v1|greeter.demo.internal"},
		{"clusters", "outbound|50051|v1|greeter.demo.internal"},
		{"clusters", "EDS"},
		{"endpoints", "127.0.0.1:7001"},
	} {
		out, code := runVMesh(t, "proxy-config", tc.kind, "raw-client", "--server", server)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("proxy-config %s (exit %d) lacks %q:\n%s", tc.kind, code, tc.want, out)
		}
	}
	out, code := runVMesh(t, "proxy-config", "clusters", "raw-client", "--server", server, "-o", "json")
	var clusters []map[string]any
	if err := json.Unmarshal([]byte(out), &clusters); code != 0 || err != nil || len(clusters) != 1 || clusters[0]["name"] != "outbound|50051|v1|greeter.demo.internal" {
		t.Errorf("proxy-config clusters -o json (exit %d, %v):\n%s", code, err, out)
	}

	// A rejected version is named on stderr.
	write("route.yaml", fmt.Sprintf(opsRoute, "9s"))
	c.next(resourcev3.RouteType, "bad route")
	xdstest.Eventually(t, "the NACK named", func() bool {
		_, stderr, _ := execVMesh("proxy-config", "routes", "raw-client", "--server", server)
		return strings.Contains(stderr, "rejected RDS") && strings.Contains(stderr, "bad route")
	})

	if _, _, err := execVMesh("proxy-config", "routes", "nobody", "--server", server); err == nil || !strings.Contains(err.Error(), "no connected proxy with id nobody") {
		t.Errorf("proxy-config for an unknown proxy: %v", err)
	}
}

func TestProxyIDCompletion(t *testing.T) {
	cp, _ := servePlane(t, opsServices, nil)
	for _, id := range []string{"alpha-1", "alpha-2", "beta-1"} {
		c := newRawClient(t, cp.XDSAddr(), id, "demo")
		c.subscribe(resourcev3.ListenerType, "greeter.demo.internal:50051")
		c.next(resourcev3.ListenerType, "")
	}
	xdstest.Eventually(t, "three proxies connected", func() bool {
		out, _ := runVMesh(t, "status", "--server", cp.HTTPAddr(), "-o", "json")
		return strings.Count(out, `"proxy": "`) == 3
	})
	// What the shell's completion script asks (cobra's __complete).
	out, _, err := execVMesh("__complete", "proxy-config", "routes", "--server", cp.HTTPAddr(), "alp")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "alpha-1\tgrpc in demo") || !strings.Contains(out, "alpha-2") || strings.Contains(out, "beta-1") {
		t.Errorf("completion of alp:\n%s", out)
	}
	// -o on the other read commands.
	if out, code := runVMesh(t, "config-dump", "alpha-1", "--server", cp.HTTPAddr(), "-o", "table"); code != 0 || !strings.Contains(out, "sotw    LDS   greeter.demo.internal:50051") {
		t.Errorf("config-dump -o table (exit %d):\n%s", code, out)
	}
	var dump struct {
		Resources map[string]map[string]map[string]any `yaml:"resources"`
	}
	out, code := runVMesh(t, "config-dump", "alpha-1", "--server", cp.HTTPAddr(), "-o", "yaml")
	if err := yaml.Unmarshal([]byte(out), &dump); code != 0 || err != nil || dump.Resources["LDS"]["greeter.demo.internal:50051"]["name"] != "greeter.demo.internal:50051" {
		t.Errorf("config-dump -o yaml (exit %d, %v):\n%s", code, err, out)
	}
	var v versionReport
	out, code = runVMesh(t, "version", "--server", cp.HTTPAddr(), "-o", "json")
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || len(v.Servers) != 1 || v.Servers[0].Version == nil || v.Client.GoVersion == "" {
		t.Errorf("version -o json (exit %d, %v):\n%s", code, err, out)
	}
	if out, code := runVMesh(t, "version", "--server", "127.0.0.1:1", "-o", "yaml"); code != 1 || !strings.Contains(out, "error: ") {
		t.Errorf("version -o yaml with an unreachable server (exit %d):\n%s", code, out)
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if out, code := runVMesh(t, "completion", shell); code != 0 || !strings.Contains(out, "__complete") {
			t.Errorf("completion %s (exit %d):\n%.300s", shell, code, out)
		}
	}
}

// TestRoutesTableShowsHTTPSRedirect: a virtual host requiring TLS (a
// Gateway server's httpsRedirect) is shown as the redirect Envoy answers
// with, not as the route's cluster, which plain HTTP never reaches.
func TestRoutesTableShowsHTTPSRedirect(t *testing.T) {
	route := &routev3.Route{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "outbound|8080||web"}}}}
	rc := &routev3.RouteConfiguration{Name: "http.8080", VirtualHosts: []*routev3.VirtualHost{
		{Name: "web.example.com:8080", Domains: []string{"web.example.com"}, RequireTls: routev3.VirtualHost_ALL, Routes: []*routev3.Route{route}},
		{Name: "plain:8080", Domains: []string{"plain"}, Routes: []*routev3.Route{route}},
	}}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if err := resourceTable(tw, "RDS", []proto.Message{rc}); err != nil {
		t.Fatal(err)
	}
	_ = tw.Flush()
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 3 || !strings.HasSuffix(strings.TrimSpace(lines[1]), "redirect to https") || !strings.HasSuffix(strings.TrimSpace(lines[2]), "outbound|8080||web") {
		t.Errorf("routes table:\n%s", b.String())
	}
}
