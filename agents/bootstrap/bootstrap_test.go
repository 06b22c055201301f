package bootstrap_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/agents/bootstrap"
)

func testNode() bootstrap.Node {
	return bootstrap.Node{
		Namespace: "shop", ServiceAccount: "cart", WorkloadName: "vm-1",
		Labels: map[string]string{"app": "cart", "version": "v1"},
		IPs:    []string{"10.0.0.7", "fd00::7"}, WorkloadGroup: "cart-vms",
	}
}

// TestNodeMetadataContract: the agent's own node carries everything,
// AUTO_REGISTER_GROUP included; the data planes' nodes (proxyless
// applications, Envoy) carry the same identity but never the group: only
// the agent's stream registers the VM.
func TestNodeMetadataContract(t *testing.T) {
	n, err := testNode().Agent()
	if err != nil {
		t.Fatal(err)
	}
	if want := "sidecar~10.0.0.7~vm-1.shop~shop.svc.cluster.local"; n.GetId() != want {
		t.Fatalf("id %q, want %q", n.GetId(), want)
	}
	md := n.GetMetadata().GetFields()
	for k, want := range map[string]string{
		"NAMESPACE": "shop", "SERVICE_ACCOUNT": "cart", "WORKLOAD_NAME": "vm-1",
		"INSTANCE_IPS": "10.0.0.7,fd00::7", "GENERATOR": "grpc", "AUTO_REGISTER_GROUP": "cart-vms",
	} {
		if got := md[k].GetStringValue(); got != want {
			t.Errorf("metadata %s = %q, want %q", k, got, want)
		}
	}
	labels := md["LABELS"].GetStructValue().GetFields()
	if labels["app"].GetStringValue() != "cart" || labels["version"].GetStringValue() != "v1" || len(labels) != 2 {
		t.Errorf("LABELS = %v", md["LABELS"])
	}
	envoy, _ := testNode().Envoy("")
	if _, ok := envoy.GetMetadata().GetFields()["GENERATOR"]; ok {
		t.Error("an Envoy node carries GENERATOR")
	}
	app, _ := testNode().Envoy(bootstrap.GeneratorGRPC)
	for _, dp := range []*corev3.Node{envoy, app} {
		if _, ok := dp.GetMetadata().GetFields()["AUTO_REGISTER_GROUP"]; ok {
			t.Errorf("a data plane's node carries AUTO_REGISTER_GROUP: %v", dp.GetMetadata())
		}
		if dp.GetId() != n.GetId() || dp.GetMetadata().GetFields()["NAMESPACE"].GetStringValue() != "shop" {
			t.Errorf("data plane node %v differs from the agent's in identity", dp)
		}
	}
}

// TestGeneratedFilesUseAbsolutePaths: relative certificate and socket
// directories (vmesh agent --out out) become absolute paths, and the
// application's bootstrap has no registration key.
func TestGeneratedFilesUseAbsolutePaths(t *testing.T) {
	t.Chdir(t.TempDir())
	js, err := bootstrap.GRPC(bootstrap.GRPCConfig{Node: testNode(), ServerURI: "cp:15012", CertDir: "out"})
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Node struct {
			Metadata map[string]any `json:"metadata"`
		} `json:"node"`
		CertificateProviders map[string]struct {
			Config map[string]any `json:"config"`
		} `json:"certificate_providers"`
	}
	if err := json.Unmarshal(js, &v); err != nil {
		t.Fatal(err)
	}
	for k, p := range v.CertificateProviders["default"].Config {
		if s, ok := p.(string); ok && strings.HasSuffix(k, "_file") && !filepath.IsAbs(s) {
			t.Errorf("%s = %q, not absolute", k, s)
		}
	}
	if _, ok := v.Node.Metadata["AUTO_REGISTER_GROUP"]; ok {
		t.Error("grpc-bootstrap.json carries AUTO_REGISTER_GROUP")
	}
	b, err := bootstrap.Envoy(bootstrap.EnvoyConfig{Node: testNode(), XDSSocket: "run/xds.sock", SDSSocket: "run/sds.sock"})
	if err != nil {
		t.Fatal(err)
	}
	ej, _ := bootstrap.EnvoyJSON(b)
	if strings.Contains(string(ej), `"run/xds.sock"`) || strings.Contains(string(ej), `"run/sds.sock"`) || !strings.Contains(string(ej), filepath.Join(mustGetwd(t), "run", "xds.sock")) {
		t.Errorf("envoy bootstrap has relative socket paths:\n%s", ej)
	}
}

func mustGetwd(t *testing.T) string {
	d, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// parseWithGRPC has grpc-go parse and check the bootstrap the way a
// proxyless xDS server does at start (NewGRPCServer parses eagerly; it does
// not connect until Serve).
func parseWithGRPC(js []byte) error {
	s, err := xds.NewGRPCServer(xds.BootstrapContentsForTesting(js))
	if err != nil {
		return err
	}
	s.Stop()
	return nil
}

func envoyConfig() bootstrap.EnvoyConfig {
	return bootstrap.EnvoyConfig{Node: testNode(), XDSSocket: "/run/vmesh/xds.sock", SDSSocket: "/run/vmesh/sds.sock"}
}

// TestEnvoyBootstrapValidates builds the bootstrap, checks it passes
// ValidateAll (with the Any options unpacked) after a JSON round trip, and
// checks the wiring: ADS over the xds-grpc pipe, SDS pipe, delta by default.
func TestEnvoyBootstrapValidates(t *testing.T) {
	for _, sotw := range []bool{false, true} {
		cfg := envoyConfig()
		cfg.SotW = sotw
		b, err := bootstrap.Envoy(cfg)
		if err != nil {
			t.Fatal(err)
		}
		js, err := bootstrap.EnvoyJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		back := &bootstrapv3.Bootstrap{}
		if err := protojson.Unmarshal(js, back); err != nil {
			t.Fatalf("JSON does not parse back: %v", err)
		}
		if err := back.ValidateAll(); err != nil {
			t.Fatalf("ValidateAll: %v", err)
		}
		if err := bootstrap.Validate(back); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		ads := back.GetDynamicResources().GetAdsConfig()
		wantType := corev3.ApiConfigSource_DELTA_GRPC
		if sotw {
			wantType = corev3.ApiConfigSource_GRPC
		}
		if ads.GetApiType() != wantType || ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != bootstrap.XDSCluster {
			t.Fatalf("ads config %v", ads)
		}
		if back.GetDynamicResources().GetLdsConfig().GetAds() == nil || back.GetDynamicResources().GetCdsConfig().GetAds() == nil {
			t.Fatal("LDS/CDS not over ADS")
		}
		pipes := map[string]string{}
		for _, c := range back.GetStaticResources().GetClusters() {
			pipes[c.GetName()] = c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetPipe().GetPath()
		}
		if pipes[bootstrap.XDSCluster] != cfg.XDSSocket || pipes[bootstrap.SDSCluster] != cfg.SDSSocket {
			t.Fatalf("static clusters %v", pipes)
		}
		if a := back.GetAdmin().GetAddress().GetSocketAddress(); a.GetAddress() != "127.0.0.1" || a.GetPortValue() != 15000 {
			t.Fatalf("admin %v", a)
		}
	}
}

// TestValidateCatchesBrokenBootstraps shows Validate fails what Envoy would
// reject, including inside an Any.
func TestValidateCatchesBrokenBootstraps(t *testing.T) {
	for name, breakIt := range map[string]func(*bootstrapv3.Bootstrap){
		"zero connect timeout": func(b *bootstrapv3.Bootstrap) {
			b.StaticResources.Clusters[0].ConnectTimeout = durationpb.New(0)
		},
		"unknown Any": func(b *bootstrapv3.Bootstrap) {
			b.StaticResources.Clusters[0].TypedExtensionProtocolOptions["x"] = &anypb.Any{TypeUrl: "type.googleapis.com/no.such.Type"}
		},
		"invalid message inside Any": func(b *bootstrapv3.Bootstrap) {
			bad, _ := anypb.New(&corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{}}})
			b.StaticResources.Clusters[1].TypedExtensionProtocolOptions["y"] = bad
		},
		"no admin port": func(b *bootstrapv3.Bootstrap) {
			b.Admin.Address.GetSocketAddress().PortSpecifier = nil
		},
	} {
		b, err := bootstrap.Envoy(envoyConfig())
		if err != nil {
			t.Fatal(err)
		}
		breakIt(b)
		if err := bootstrap.Validate(b); err == nil {
			t.Errorf("%s: Validate passed", name)
		}
	}
	if _, err := bootstrap.Envoy(bootstrap.EnvoyConfig{Node: testNode()}); err == nil {
		t.Error("Envoy accepted a config without sockets")
	}
}

// TestGRPCBootstrapParses feeds the JSON to grpc-go's own bootstrap parser
// (through its public xDS resolver API) and checks the contract fields.
func TestGRPCBootstrapParses(t *testing.T) {
	// grpc-go falls back to these when the given contents do not parse.
	t.Setenv("GRPC_XDS_BOOTSTRAP", "")
	t.Setenv("GRPC_XDS_BOOTSTRAP_CONFIG", "")
	js, err := bootstrap.GRPC(bootstrap.GRPCConfig{Node: testNode(), ServerURI: "127.0.0.1:15012", CertDir: "/var/lib/vmesh/certs"})
	if err != nil {
		t.Fatal(err)
	}
	if err := parseWithGRPC(js); err != nil {
		t.Fatalf("grpc-go rejects the bootstrap: %v\n%s", err, js)
	}
	var got struct {
		XDSServers []struct {
			ServerURI    string `json:"server_uri"`
			ChannelCreds []struct {
				Type   string            `json:"type"`
				Config map[string]string `json:"config"`
			} `json:"channel_creds"`
		} `json:"xds_servers"`
		Node struct {
			ID       string          `json:"id"`
			Metadata json.RawMessage `json:"metadata"`
		} `json:"node"`
		CertificateProviders map[string]struct {
			PluginName string            `json:"plugin_name"`
			Config     map[string]string `json:"config"`
		} `json:"certificate_providers"`
		Template string `json:"server_listener_resource_name_template"`
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if got.XDSServers[0].ServerURI != "127.0.0.1:15012" || got.XDSServers[0].ChannelCreds[0].Type != "tls" ||
		got.XDSServers[0].ChannelCreds[0].Config["certificate_file"] != "/var/lib/vmesh/certs/cert-chain.pem" {
		t.Fatalf("xds_servers %+v", got.XDSServers)
	}
	p := got.CertificateProviders["default"]
	if p.PluginName != "file_watcher" || p.Config["private_key_file"] != "/var/lib/vmesh/certs/key.pem" || p.Config["ca_certificate_file"] != "/var/lib/vmesh/certs/root-cert.pem" {
		t.Fatalf("certificate provider %+v", p)
	}
	if got.Template != "xds.vmesh.io/grpc/lds/inbound/%s" {
		t.Fatalf("template %q", got.Template)
	}
	md := &structpb.Struct{}
	if err := protojson.Unmarshal(got.Node.Metadata, md); err != nil || md.GetFields()["GENERATOR"].GetStringValue() != "grpc" {
		t.Fatalf("node metadata %s (%v)", got.Node.Metadata, err)
	}

	// The parser is not a rubber stamp: a provider config grpc-go cannot
	// use is rejected.
	broken := strings.Replace(string(js), `"refresh_interval": "60s"`, `"refresh_interval": "often"`, 1)
	if broken == string(js) {
		t.Fatal("test fixture: refresh_interval not found")
	}
	if err := parseWithGRPC([]byte(broken)); err == nil {
		t.Fatal("grpc-go accepted a bad refresh_interval")
	}
	noTemplate := strings.Replace(string(js), `"server_listener_resource_name_template"`, `"unused"`, 1)
	if err := parseWithGRPC([]byte(noTemplate)); err == nil {
		t.Fatal("grpc-go's xDS server accepted a bootstrap without the listener template")
	}
}

// TestGRPCBootstrapLocalXDSAndLocality: with LocalXDS the only xDS server is
// the agent's socket without TLS (what every gRPC language reads), and the
// node carries the locality in the bootstrap's own fields (always present:
// grpc-node requires it); grpc-go parses it. LocalityFromLabels reads the
// topology labels.
func TestGRPCBootstrapLocalXDSAndLocality(t *testing.T) {
	t.Setenv("GRPC_XDS_BOOTSTRAP", "")
	t.Setenv("GRPC_XDS_BOOTSTRAP_CONFIG", "")
	n := testNode()
	n.Locality = bootstrap.LocalityFromLabels(map[string]string{bootstrap.LabelRegion: "eu", bootstrap.LabelZone: "eu-1"})
	if n.Locality != "eu/eu-1" {
		t.Fatalf("LocalityFromLabels = %q, want eu/eu-1", n.Locality)
	}
	if l := bootstrap.LocalityFromLabels(map[string]string{bootstrap.LabelZone: "eu-1"}); l != "" {
		t.Fatalf("a zone without a region gave locality %q", l)
	}
	js, err := bootstrap.GRPC(bootstrap.GRPCConfig{Node: n, LocalXDS: "/var/run/vmesh/xds.sock", ServerURI: "cp:15012", CertDir: "/var/lib/vmesh/certs"})
	if err != nil {
		t.Fatal(err)
	}
	if err := parseWithGRPC(js); err != nil {
		t.Fatalf("grpc-go rejects the bootstrap: %v\n%s", err, js)
	}
	var got struct {
		XDSServers []struct {
			ServerURI    string `json:"server_uri"`
			ChannelCreds []struct {
				Type string `json:"type"`
			} `json:"channel_creds"`
		} `json:"xds_servers"`
		Node struct {
			Locality map[string]string `json:"locality"`
		} `json:"node"`
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.XDSServers) != 1 || got.XDSServers[0].ServerURI != "unix:///var/run/vmesh/xds.sock" || got.XDSServers[0].ChannelCreds[0].Type != "insecure" {
		t.Fatalf("xds_servers %+v, want only the agent's socket without TLS", got.XDSServers)
	}
	if got.Node.Locality["region"] != "eu" || got.Node.Locality["zone"] != "eu-1" || len(got.Node.Locality) != 2 {
		t.Fatalf("node.locality %v", got.Node.Locality)
	}
	// Without a locality the field is still there, empty.
	js, err = bootstrap.GRPC(bootstrap.GRPCConfig{Node: testNode(), LocalXDS: "/var/run/vmesh/xds.sock", CertDir: "/c"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"locality": {}`) {
		t.Fatalf("no empty node.locality:\n%s", js)
	}
}
