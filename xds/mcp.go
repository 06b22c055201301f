package xds

import (
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/vmesh/vmesh/xds/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// KindMCP is the kind /debug/syncz gives an MCP client: a reader of the
// mesh's config (an istiod with configSources), served by xds/mcp, not a
// proxy generated for.
const KindMCP ProxyKind = "mcp"

// adsMux is the ADS service: a SotW stream whose first request asks for
// one of Istio's config type URLs (networking.istio.io/v1/VirtualService,
// core/v1alpha1/MeshConfig, ...) is an MCP client's, served by xds/mcp;
// every other stream is a proxy's, served by the server's stream loops.
// Config over MCP is SotW only, as istiod's configSources client reads it
// (adsc.New, StreamAggregatedResources): a delta stream asking for a config
// type URL first is refused Unimplemented; other delta streams are
// proxies'.
type adsMux struct {
	serverv3.Server
	mcp *mcp.Server
}

func (m *adsMux) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	first, err := st.Recv()
	if err != nil {
		return nil // the client left before asking anything
	}
	if mcp.IsConfigType(first.GetTypeUrl()) {
		return m.mcp.Serve(st, first)
	}
	return m.Server.StreamAggregatedResources(&replayStream{AggregatedDiscoveryService_StreamAggregatedResourcesServer: st, first: first})
}

// mcpDeltaRefusal is the message a delta stream asking for config over
// MCP ends with.
const mcpDeltaRefusal = "config over xDS (MCP) is served over state-of-the-world ADS only (StreamAggregatedResources), as istiod's configSources client reads it"

func (m *adsMux) DeltaAggregatedResources(st discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	first, err := st.Recv()
	if err != nil {
		return nil // the client left before asking anything
	}
	if mcp.IsConfigType(first.GetTypeUrl()) {
		return status.Error(codes.Unimplemented, mcpDeltaRefusal)
	}
	return m.Server.DeltaAggregatedResources(&replayDeltaStream{AggregatedDiscoveryService_DeltaAggregatedResourcesServer: st, first: first})
}

// replayDeltaStream hands the proxy's delta stream loop the first request
// again.
type replayDeltaStream struct {
	discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	first *discoveryv3.DeltaDiscoveryRequest
}

func (r *replayDeltaStream) Recv() (*discoveryv3.DeltaDiscoveryRequest, error) {
	if f := r.first; f != nil {
		r.first = nil
		return f, nil
	}
	return r.AggregatedDiscoveryService_DeltaAggregatedResourcesServer.Recv()
}

// replayStream hands the proxy's stream loop the first request again.
type replayStream struct {
	discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	first *discoveryv3.DiscoveryRequest
}

func (r *replayStream) Recv() (*discoveryv3.DiscoveryRequest, error) {
	if f := r.first; f != nil {
		r.first = nil
		return f, nil
	}
	return r.AggregatedDiscoveryService_StreamAggregatedResourcesServer.Recv()
}

// mcpSyncz returns the MCP clients as /debug/syncz entries: kind "mcp",
// group "mcp", the identity they were let in as, and per type (by kind name,
// or the type URL of a type vmesh does not serve) the versions sent and
// ACKed.
func (s *Server) mcpSyncz() []SyncStatus {
	var out []SyncStatus
	for _, c := range s.mcp.Clients() {
		ss := SyncStatus{ID: c.ID, Kind: KindMCP, Namespace: c.Namespace, Group: "mcp", Identity: c.Identity, Protocol: "sotw", Connected: c.Connected, Types: map[string]*TypeStatus{}}
		for t, ts := range c.Types {
			name := t
			if k, ok := mcp.KindOf(t); ok {
				name = string(k)
			}
			ss.Types[name] = &TypeStatus{Sent: ts.Sent, Acked: ts.Acked, Nack: ts.Nack, NackVersion: ts.NackVersion, Resources: ts.Resources}
		}
		out = append(out, ss)
	}
	return out
}
