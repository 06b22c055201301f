package agent_test

import (
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/bootstrap"
	"github.com/vmesh/vmesh/agents/capture"
	"github.com/vmesh/vmesh/agents/internal/agenttest"
	"github.com/vmesh/vmesh/ca"
)

// TestGatewayVM: with --gateway the agent writes a router bootstrap for
// its Envoy (Istio's "router~" id, readiness on 15021 through the agent's
// status port), captures no traffic even when asked to (a gateway's
// listeners take the traffic), and keeps its own stream a proxyless one.
func TestGatewayVM(t *testing.T) {
	sleep := "/bin/sleep" // Envoy's stand-in: the test reads the bootstrap, not Envoy's behaviour
	if _, err := os.Stat(sleep); err != nil {
		t.Fatal(err)
	}
	cc := capture.Defaults()
	// A mode no backend has: were the capture not dropped, installing it
	// would fail the agent rather than touch this host's firewall.
	cc.Mode = "none-such"
	r := startWith(t, nil, func(c *agent.Config) {
		c.Gateway, c.DisableEnvoy, c.EnvoyBinary = true, false, sleep
		c.StatusAddr = "127.0.0.1:0"
		c.Capture = &cc // what --capture on would ask: dropped for a gateway
	})
	raw, err := os.ReadFile(r.agent.EnvoyBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	var b struct {
		Node            struct{ ID string }
		StaticResources struct {
			Listeners []struct {
				Name    string
				Address struct{ SocketAddress struct{ PortValue uint32 } }
			}
			Clusters []struct {
				Name           string
				LoadAssignment struct {
					Endpoints []struct {
						LbEndpoints []struct {
							Endpoint struct {
								Address struct{ SocketAddress struct{ PortValue uint32 } }
							}
						}
					}
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.Node.ID, "router~") {
		t.Errorf("gateway Envoy node id %q, want router~…", b.Node.ID)
	}
	if ls := b.StaticResources.Listeners; len(ls) != 1 || ls[0].Address.SocketAddress.PortValue != bootstrap.ReadinessPort {
		t.Errorf("static listeners %+v, want readiness on %d", ls, bootstrap.ReadinessPort)
	}
	status := netip.MustParseAddrPort(r.agent.StatusAddr())
	found := false
	for _, c := range b.StaticResources.Clusters {
		if c.Name == bootstrap.AgentCluster {
			found = c.LoadAssignment.Endpoints[0].LbEndpoints[0].Endpoint.Address.SocketAddress.PortValue == uint32(status.Port())
		}
	}
	if !found {
		t.Errorf("no %s cluster to the agent's status port %d:\n%s", bootstrap.AgentCluster, status.Port(), raw)
	}
	if v := metricValue(t, r, "vmesh_agent_capture_installed"); v != 0 {
		t.Errorf("vmesh_agent_capture_installed = %v on a gateway, want 0", v)
	}
	if id := r.agent.Node().AgentIdentity().ID; !strings.HasPrefix(id, "sidecar~") {
		t.Errorf("agent stream id %q on a gateway VM, want the proxyless stream's", id)
	}
}

// TestGatewayNeedsEnvoyAndStatusPort: a gateway without Envoy or without
// the status port its readiness goes through is refused at start, saying
// what to change.
func TestGatewayNeedsEnvoyAndStatusPort(t *testing.T) {
	c := agenttest.NewCA(t, nil)
	bundleDir, _ := c.Bundle(t, "edge", "ingress", "", map[string]string{"istio": "ingressgateway"})
	for _, tc := range []struct {
		cfg  agent.Config
		want string
	}{
		{agent.Config{Gateway: true, DisableEnvoy: true, StatusAddr: "127.0.0.1:0"}, "--no-envoy"},
		{agent.Config{Gateway: true}, "--status-addr"},
	} {
		tc.cfg.BundleDir, tc.cfg.WorkloadName, tc.cfg.OutDir, tc.cfg.SocketDir = bundleDir, "gw-1", t.TempDir(), t.TempDir()
		if _, err := agent.New(tc.cfg, agenttest.Logger(t), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}

	// `vmesh vm bundle --gateway`: the bundle alone makes the VM a gateway.
	gwDir := t.TempDir()
	if _, err := c.WriteVMBundle(gwDir, ca.VMBundleRequest{Namespace: "edge", ServiceAccount: "ingress", Labels: map[string]string{"istio": "ingressgateway"},
		DiscoveryAddress: c.Addr, Gateway: true}); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{BundleDir: gwDir, WorkloadName: "gw-1", OutDir: t.TempDir(), SocketDir: t.TempDir(), StatusAddr: "127.0.0.1:0"}, agenttest.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Node().Gateway || !strings.HasPrefix(a.Node().Identity("").ID, "router~") {
		t.Errorf("a gateway bundle's agent: gateway %v, Envoy id %s", a.Node().Gateway, a.Node().Identity("").ID)
	}
}

// metricValue reads an unlabelled gauge or counter from the rig's registry.
func metricValue(t *testing.T, r *rig, name string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
