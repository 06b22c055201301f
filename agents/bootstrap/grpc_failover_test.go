package bootstrap_test

import (
	"encoding/json"
	"testing"

	"github.com/vmesh/vmesh/agents/bootstrap"
)

// TestGRPCBootstrapListsEveryReplica: ServerURIs become further
// xds_servers, in order, each with the same TLS credentials, and grpc-go's
// parser takes the file.
func TestGRPCBootstrapListsEveryReplica(t *testing.T) {
	t.Setenv("GRPC_XDS_BOOTSTRAP", "")
	t.Setenv("GRPC_XDS_BOOTSTRAP_CONFIG", "")
	js, err := bootstrap.GRPC(bootstrap.GRPCConfig{Node: testNode(), ServerURI: "cp-1:15012", ServerURIs: []string{"cp-2:15012", "cp-3:15012"}, CertDir: "/var/lib/vmesh/certs"})
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
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.XDSServers) != 3 {
		t.Fatalf("xds_servers %+v", got.XDSServers)
	}
	for i, want := range []string{"cp-1:15012", "cp-2:15012", "cp-3:15012"} {
		s := got.XDSServers[i]
		if s.ServerURI != want || s.ChannelCreds[0].Type != "tls" || s.ChannelCreds[0].Config["certificate_file"] != "/var/lib/vmesh/certs/cert-chain.pem" {
			t.Fatalf("xds_servers[%d] %+v", i, s)
		}
	}
	if _, err := bootstrap.GRPC(bootstrap.GRPCConfig{Node: testNode(), ServerURI: "cp-1:15012", ServerURIs: []string{""}, CertDir: "/c"}); err == nil {
		t.Fatal("an empty server URI accepted")
	}
}
