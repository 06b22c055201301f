// Command envoy is the Envoy stand-in of the gateways guide's test
// (docs/gateways.md, examples/vm-fleet): no Envoy binary exists where the
// test runs, so the first directory on each host's PATH holds this
// program, which the agent starts as it would start Envoy (`envoy -c
// BOOTSTRAP ...`). It does Envoy's control-plane side, and only that:
//
//   - it reads the bootstrap the agent wrote (node, the ADS cluster's
//     socket, the SDS cluster's socket, the readiness listener of a
//     gateway) and opens one state-of-the-world ADS stream through the
//     agent's xds.sock, subscribing as Envoy does: every listener and
//     cluster, then by name the route configurations the listeners name
//     and the load assignments of the EDS clusters; it ACKs every
//     response, so the control plane records what it holds;
//   - it asks the agent's sds.sock for every secret the listeners and
//     clusters name (the mesh certificate, the trust bundle, the file
//     credentials of credentialName) and logs each one it receives;
//   - on a gateway it answers the readiness listener (port 15021,
//     /healthz/ready) by asking the agent's status port, as Envoy's
//     static route to the cluster "agent" does.
//
// It forwards no traffic: the listeners it holds are not bound.
package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	// The typed configs a bootstrap names, registered for protojson as
	// Envoy links them in.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The names and ports of the bootstrap the agent writes, as an Envoy reads
// them: Istio's cluster names (xds-grpc, sds-grpc), the agent's cluster
// behind the gateway's readiness listener, and Istio's readiness port and
// path. Spelled out rather than imported: the stand-in knows the agent
// only through the bootstrap file, as Envoy does (and examples import no
// vmesh package, internal/floors).
const (
	xdsCluster    = "xds-grpc"
	sdsCluster    = "sds-grpc"
	agentCluster  = "agent"
	readinessPort = 15021
	readinessPath = "/healthz/ready"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "envoy (stand-in):", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("envoy (stand-in): "+format+"\n", args...)
}

func run(ctx context.Context, args []string) error {
	path := ""
	for i, a := range args {
		if a == "-c" && i+1 < len(args) {
			path = args[i+1]
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the bootstrap (-c): %w", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(raw, b); err != nil {
		return fmt.Errorf("bootstrap %s: %w", path, err)
	}
	sockets := map[string]string{}
	var agentPort uint32
	for _, c := range b.GetStaticResources().GetClusters() {
		for _, le := range c.GetLoadAssignment().GetEndpoints() {
			for _, e := range le.GetLbEndpoints() {
				a := e.GetEndpoint().GetAddress()
				if p := a.GetPipe().GetPath(); p != "" {
					sockets[c.GetName()] = p
				}
				if c.GetName() == agentCluster {
					agentPort = a.GetSocketAddress().GetPortValue()
				}
			}
		}
	}
	if sockets[xdsCluster] == "" || sockets[sdsCluster] == "" {
		return fmt.Errorf("bootstrap %s: no socket for %s or %s", path, xdsCluster, sdsCluster)
	}
	logf("node %s; ADS via %s, SDS via %s", b.GetNode().GetId(), sockets[xdsCluster], sockets[sdsCluster])
	for _, l := range b.GetStaticResources().GetListeners() {
		if sa := l.GetAddress().GetSocketAddress(); sa.GetPortValue() == readinessPort && agentPort != 0 {
			if err := serveReadiness(ctx, net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue())), agentPort); err != nil {
				return err
			}
		}
	}
	s := &standIn{node: b.GetNode(), sdsSocket: sockets[sdsCluster], secrets: map[string]bool{}}
	for {
		err := s.ads(ctx, sockets[xdsCluster])
		if ctx.Err() != nil {
			return nil
		}
		logf("ADS stream ended: %v; reconnecting", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// serveReadiness answers GET /healthz/ready on addr with the agent's
// answer on its status port.
func serveReadiness(ctx context.Context, addr string, agentPort uint32) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("readiness listener: %w", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != readinessPath {
			http.NotFound(w, r)
			return
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", agentPort, readinessPath))
		if err != nil {
			http.Error(w, "upstream connect error", http.StatusServiceUnavailable)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})}
	go func() { _ = srv.Serve(ln) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	logf("readiness on %s -> the agent's 127.0.0.1:%d", addr, agentPort)
	return nil
}

type standIn struct {
	node      *corev3.Node
	sdsSocket string

	mu      sync.Mutex
	secrets map[string]bool // names asked of SDS
}

// ads runs one ADS stream until it fails.
func (s *standIn) ads(ctx context.Context, socket string) error {
	cc, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	type state struct {
		version, nonce string
		names          []string
		refs           map[string][]string // resource -> names of the next type
	}
	states := map[string]*state{}
	next := map[string]string{resourcev3.ListenerType: resourcev3.RouteType, resourcev3.ClusterType: resourcev3.EndpointType}
	send := func(t string, st *state, first bool) error {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: t, VersionInfo: st.version, ResponseNonce: st.nonce, ResourceNames: st.names}
		if first {
			req.Node = s.node
		}
		return stream.Send(req)
	}
	first := true
	for _, t := range []string{resourcev3.ClusterType, resourcev3.ListenerType} {
		states[t] = &state{refs: map[string][]string{}}
		if err := send(t, states[t], first); err != nil {
			return err
		}
		first = false
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		t := resp.GetTypeUrl()
		st := states[t]
		if st == nil {
			st = &state{refs: map[string][]string{}}
			states[t] = st
		}
		st.version, st.nonce = resp.GetVersionInfo(), resp.GetNonce()
		var secrets []string
		if n := next[t]; n != "" {
			st.refs = map[string][]string{}
			for _, a := range resp.GetResources() {
				name, refs, sec := references(t, a.GetValue())
				st.refs[name] = refs
				secrets = append(secrets, sec...)
			}
		}
		logf("%s version %s: %d resources, ACK", strings.TrimPrefix(t, resourcev3.APITypePrefix), resp.GetVersionInfo(), len(resp.GetResources()))
		if err := send(t, st, false); err != nil {
			return err
		}
		if n := next[t]; n != "" {
			var want []string
			for _, r := range st.refs {
				want = append(want, r...)
			}
			slices.Sort(want)
			want = slices.Compact(want)
			ns := states[n]
			if ns == nil {
				ns = &state{refs: map[string][]string{}}
				states[n] = ns
			}
			if !slices.Equal(want, ns.names) && len(want) > 0 {
				ns.names = want
				if err := send(n, ns, false); err != nil {
					return err
				}
			}
		}
		s.askSecrets(ctx, secrets)
	}
}

// references returns a listener's or cluster's name, the route
// configurations or EDS names it refers to, and the SDS secrets it names.
func references(t string, b []byte) (string, []string, []string) {
	var refs, secrets []string
	common := func(c *tlsv3.CommonTlsContext) {
		for _, s := range c.GetTlsCertificateSdsSecretConfigs() {
			secrets = append(secrets, s.GetName())
		}
		if v := c.GetValidationContextSdsSecretConfig(); v != nil {
			secrets = append(secrets, v.GetName())
		}
		if v := c.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); v != nil {
			secrets = append(secrets, v.GetName())
		}
	}
	switch t {
	case resourcev3.ListenerType:
		var l listenerv3.Listener
		if proto.Unmarshal(b, &l) != nil {
			return "", nil, nil
		}
		for _, fc := range l.GetFilterChains() {
			var d tlsv3.DownstreamTlsContext
			if ts := fc.GetTransportSocket(); ts != nil && ts.GetTypedConfig().UnmarshalTo(&d) == nil {
				common(d.GetCommonTlsContext())
			}
			for _, f := range fc.GetFilters() {
				var h hcmv3.HttpConnectionManager
				if f.GetTypedConfig().MessageIs(&h) && f.GetTypedConfig().UnmarshalTo(&h) == nil && h.GetRds() != nil {
					refs = append(refs, h.GetRds().GetRouteConfigName())
				}
			}
		}
		return l.GetName(), refs, secrets
	default:
		var c clusterv3.Cluster
		if proto.Unmarshal(b, &c) != nil {
			return "", nil, nil
		}
		if c.GetType() == clusterv3.Cluster_EDS {
			refs = append(refs, cmpOr(c.GetEdsClusterConfig().GetServiceName(), c.GetName()))
		}
		sockets := []*corev3.TransportSocket{c.GetTransportSocket()}
		for _, m := range c.GetTransportSocketMatches() {
			sockets = append(sockets, m.GetTransportSocket())
		}
		for _, ts := range sockets {
			var u tlsv3.UpstreamTlsContext
			if ts != nil && ts.GetTypedConfig().UnmarshalTo(&u) == nil {
				common(u.GetCommonTlsContext())
			}
		}
		return c.GetName(), refs, secrets
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// askSecrets opens one SDS stream per secret name not asked for yet, as
// Envoy does, and logs what the agent sends.
func (s *standIn) askSecrets(ctx context.Context, names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if s.secrets[n] {
			continue
		}
		s.secrets[n] = true
		go s.secret(ctx, n)
	}
}

func (s *standIn) secret(ctx context.Context, name string) {
	for ctx.Err() == nil {
		err := s.secretStream(ctx, name)
		if ctx.Err() != nil {
			return
		}
		logf("SDS stream for %s ended: %v; reconnecting", name, err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *standIn) secretStream(ctx context.Context, name string) error {
	cc, err := grpc.NewClient("unix://"+s.sdsSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	stream, err := secretv3.NewSecretDiscoveryServiceClient(cc).StreamSecrets(ctx)
	if err != nil {
		return err
	}
	req := &discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: resourcev3.SecretType, ResourceNames: []string{name}}
	if err := stream.Send(req); err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		for _, a := range resp.GetResources() {
			var sec tlsv3.Secret
			if err := a.UnmarshalTo(&sec); err != nil {
				return err
			}
			logf("SDS secret %s: %s", sec.GetName(), describe(&sec))
		}
		if len(resp.GetResources()) == 0 {
			logf("SDS secret %s: none (the listener or cluster that needs it fails closed)", name)
		}
		req = &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.SecretType, ResourceNames: []string{name}, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		if err := stream.Send(req); err != nil {
			return err
		}
	}
}

// describe names what a secret holds, never its key.
func describe(sec *tlsv3.Secret) string {
	subject := func(p []byte) string {
		blk, _ := pem.Decode(p)
		if blk == nil {
			return "?"
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return "?"
		}
		if len(c.URIs) > 0 {
			return c.URIs[0].String()
		}
		return "CN=" + c.Subject.CommonName
	}
	switch {
	case sec.GetTlsCertificate() != nil:
		return "certificate " + subject(sec.GetTlsCertificate().GetCertificateChain().GetInlineBytes()) + " with its key"
	case sec.GetValidationContext() != nil:
		return "trust bundle " + subject(sec.GetValidationContext().GetTrustedCa().GetInlineBytes())
	}
	return "unknown"
}
