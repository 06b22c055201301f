package bootstrap_test

import (
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/vmesh/vmesh/agents/bootstrap"
)

// TestGatewayEnvoyBootstrap: a gateway VM's Envoy is a router (Istio's
// "router~" node id), while its proxyless applications and the agent keep
// the sidecar id; Envoy answers /healthz/ready on 15021 by routing to the
// agent's status port; a gateway without a status port is refused.
func TestGatewayEnvoyBootstrap(t *testing.T) {
	cfg := envoyConfig()
	cfg.Node.Gateway = true
	if _, err := bootstrap.Envoy(cfg); err == nil || !strings.Contains(err.Error(), "status port") {
		t.Fatalf("gateway without the agent's status port: %v, want an error naming it", err)
	}
	cfg.AgentStatusPort = 15020
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
		t.Fatal(err)
	}
	if err := bootstrap.Validate(back); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if id := back.GetNode().GetId(); id != "router~10.0.0.7~vm-1.shop~shop.svc.cluster.local" {
		t.Errorf("gateway Envoy node id %q, want Istio's router form", id)
	}
	if id := cfg.Node.Identity(bootstrap.GeneratorGRPC).ID; !strings.HasPrefix(id, "sidecar~") {
		t.Errorf("a proxyless application on a gateway VM has id %q: only Envoy is the router", id)
	}
	if id := cfg.Node.AgentIdentity().ID; !strings.HasPrefix(id, "sidecar~") {
		t.Errorf("the agent's own stream on a gateway VM has id %q: it stays a proxyless stream", id)
	}

	ls := back.GetStaticResources().GetListeners()
	if len(ls) != 1 || ls[0].GetAddress().GetSocketAddress().GetPortValue() != bootstrap.ReadinessPort {
		t.Fatalf("static listeners %v, want the readiness listener on %d", ls, bootstrap.ReadinessPort)
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := ls[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	r := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0]
	if r.GetMatch().GetPrefix() != bootstrap.ReadinessPath || r.GetRoute().GetCluster() != bootstrap.AgentCluster {
		t.Errorf("readiness route %v, want %s to %s", r, bootstrap.ReadinessPath, bootstrap.AgentCluster)
	}
	var agentPort uint32
	for _, c := range back.GetStaticResources().GetClusters() {
		if c.GetName() == bootstrap.AgentCluster {
			a := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
			if a.GetAddress() != "127.0.0.1" {
				t.Errorf("agent cluster at %s, want loopback", a.GetAddress())
			}
			agentPort = a.GetPortValue()
		}
	}
	if agentPort != 15020 {
		t.Errorf("agent cluster port %d, want the status port 15020", agentPort)
	}

	// A sidecar's bootstrap has no such listener.
	cfg.Node.Gateway = false
	b, err = bootstrap.Envoy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.GetStaticResources().GetListeners()) != 0 || !strings.HasPrefix(b.GetNode().GetId(), "sidecar~") {
		t.Errorf("sidecar bootstrap: id %s, %d static listeners", b.GetNode().GetId(), len(b.GetStaticResources().GetListeners()))
	}
}
