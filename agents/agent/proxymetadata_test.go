package agent_test

import (
	"testing"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/xdsproxy"
	"github.com/vmesh/vmesh/ca/bundle"
)

// TestProxyMetadataBecomesNodeMetadata: the bundle's proxyMetadata (the
// mesh config's defaultConfig.proxyMetadata) reaches the agent's node as
// pilot-agent's environment does: ISTIO_META_<KEY> is metadata <KEY>, the
// node contract's own keys win, and other entries are not metadata.
func TestProxyMetadataBecomesNodeMetadata(t *testing.T) {
	r := start(t, func(c *agent.Config) {
		b, err := bundle.Read(c.BundleDir)
		if err != nil {
			t.Fatal(err)
		}
		b.ProxyMetadata = map[string]string{"ISTIO_META_NETWORK": "vm-net", "ISTIO_META_NAMESPACE": "evil", "PROXY_XDS_VIA_AGENT": "true"}
		if err := b.Write(c.BundleDir); err != nil {
			t.Fatal(err)
		}
	})
	md := r.next(t, xdsproxy.HealthInfoType).node.GetMetadata().GetFields()
	if got := md["NETWORK"].GetStringValue(); got != "vm-net" {
		t.Errorf("NETWORK = %q, want vm-net from ISTIO_META_NETWORK", got)
	}
	if got := md["NAMESPACE"].GetStringValue(); got != "shop" {
		t.Errorf("NAMESPACE = %q: proxyMetadata overrode the node contract", got)
	}
	if _, ok := md["PROXY_XDS_VIA_AGENT"]; ok {
		t.Error("a proxyMetadata entry without ISTIO_META_ became node metadata")
	}
}
