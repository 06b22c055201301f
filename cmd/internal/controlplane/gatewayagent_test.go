package controlplane_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

// gatewayAgent runs a real agent for an ingress gateway VM of cp (edge/ingress,
// labels istio=ingressgateway) serving the credentials directory credDir
// and the certificate files under certFileDirs (nil: the agent's default).
// Its Envoy is a stand-in that sleeps: the test plays Envoy's xDS and SDS
// streams itself. It returns the agent, its Envoy's node, and a context
// that ends when the test does (the agent stops then).
func gatewayAgent(t *testing.T, cp *controlplane.ControlPlane, credDir string, certFileDirs []string) (*agent.Agent, *corev3.Node, context.Context) {
	t.Helper()
	bundleDir := filepath.Join(t.TempDir(), "bundle")
	if _, err := cp.CA().WriteVMBundle(bundleDir, ca.VMBundleRequest{Namespace: "edge", ServiceAccount: "ingress",
		Labels: map[string]string{"istio": "ingressgateway"}, DiscoveryAddress: cp.SecureAddr(), Gateway: true}); err != nil {
		t.Fatal(err)
	}
	fakeEnvoy := filepath.Join(t.TempDir(), "envoy")
	if err := os.WriteFile(fakeEnvoy, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{BundleDir: bundleDir, OutDir: t.TempDir(), SocketDir: shortTempDir(t), IPs: []string{"127.0.0.1"},
		WorkloadName: "gw-1", EnvoyBinary: fakeEnvoy, StatusAddr: "127.0.0.1:0", CredentialsDir: credDir, CertFileDirs: certFileDirs,
		RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	node, err := a.Node().Envoy("")
	if err != nil {
		t.Fatal(err)
	}
	return a, node, ctx
}

// routerListeners fetches the router's listeners through the agent's xDS
// socket, as its Envoy does, once there are any.
func routerListeners(t *testing.T, ctx context.Context, a *agent.Agent, node *corev3.Node) []*listenerv3.Listener {
	t.Helper()
	var lds *discoveryv3.DiscoveryResponse
	waitFor(t, "the router's listeners through the agent's xDS socket", func() bool {
		conn, err := grpc.NewClient("unix://"+a.XDSSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false
		}
		ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err == nil {
			err = ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ListenerType})
		}
		if err == nil {
			lds, err = ads.Recv()
		}
		if err != nil || len(lds.GetResources()) == 0 {
			conn.Close()
			return false
		}
		t.Cleanup(func() { conn.Close() })
		return true
	})
	var out []*listenerv3.Listener
	for _, r := range lds.GetResources() {
		l := &listenerv3.Listener{}
		if err := r.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// chainTLS returns the TLS context of each chain of ls that terminates TLS,
// by its server names joined with ",".
func chainTLS(t *testing.T, ls []*listenerv3.Listener) map[string]*tlsv3.DownstreamTlsContext {
	t.Helper()
	out := map[string]*tlsv3.DownstreamTlsContext{}
	for _, l := range ls {
		for _, fc := range l.GetFilterChains() {
			if fc.GetTransportSocket() == nil {
				continue
			}
			dtc := &tlsv3.DownstreamTlsContext{}
			if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(dtc); err != nil {
				t.Fatal(err)
			}
			out[strings.Join(fc.GetFilterChainMatch().GetServerNames(), ",")] = dtc
		}
	}
	return out
}

// watchSecrets opens Envoy's SDS stream to the agent for names and ACKs
// each response as Envoy does. The function it returns waits (30 s at
// most) until the secrets served so far, each as last sent, satisfy ok,
// and returns them.
func watchSecrets(t *testing.T, ctx context.Context, a *agent.Agent, node *corev3.Node, names []string) func(what string, ok func(map[string]*tlsv3.Secret) bool) map[string]*tlsv3.Secret {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+a.SDSSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var sds secretv3.SecretDiscoveryService_StreamSecretsClient
	waitFor(t, "the agent's SDS socket", func() bool {
		s, err := secretv3.NewSecretDiscoveryServiceClient(conn).StreamSecrets(ctx)
		if err == nil {
			err = s.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.SecretType, ResourceNames: names})
		}
		sds = s
		return err == nil
	})
	served := make(chan map[string]*tlsv3.Secret, 16)
	go func() {
		latest := map[string]*tlsv3.Secret{}
		for {
			r, err := sds.Recv()
			if err != nil {
				close(served)
				return
			}
			for _, res := range r.GetResources() {
				s := &tlsv3.Secret{}
				if res.UnmarshalTo(s) == nil {
					latest[s.GetName()] = s
				}
			}
			snap := map[string]*tlsv3.Secret{}
			for k, v := range latest {
				snap[k] = v
			}
			select {
			case served <- snap:
			case <-ctx.Done():
				return
			}
			if sds.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.SecretType, ResourceNames: names,
				VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}) != nil {
				return
			}
		}
	}()
	return func(what string, ok func(map[string]*tlsv3.Secret) bool) map[string]*tlsv3.Secret {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case m, open := <-served:
				if !open {
					t.Fatalf("the agent's SDS stream ended before %s", what)
				}
				if ok(m) {
					return m
				}
			case <-timeout:
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
}
