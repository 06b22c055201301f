package agent_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/vmesh/vmesh/agents/agent"
	"github.com/vmesh/vmesh/agents/bootstrap"
	"github.com/vmesh/vmesh/agents/certs"
	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/agents/internal/agenttest"
	"github.com/vmesh/vmesh/agents/sds"
	"github.com/vmesh/vmesh/agents/xdsproxy"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/internal/meshlabels"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
)

// seen is one request as the control plane saw it.
type seen struct {
	peer    string
	node    *corev3.Node // the stream's node (from its first request)
	typeURL string
	healthy bool
	detail  string
}

// controlPlane is a recording ADS server on the CA's TLS port that
// authenticates callers by their mesh certificate. It answers only the
// agent's request for its WorkloadGroup, with a group without a probe
// (the VM is then healthy): the agent's part is to connect and report,
// not to be configured.
type controlPlane struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	ca   *ca.CA
	reqs chan seen
}

func (c *controlPlane) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	id, err := c.ca.PeerIdentity(s.Context())
	if err != nil {
		return status.Errorf(codes.Unauthenticated, "%v", err)
	}
	var node *corev3.Node
	for {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		if r.GetNode() != nil {
			node = r.GetNode()
		}
		c.reqs <- seen{peer: id.String(), node: node, typeURL: r.GetTypeUrl(), healthy: r.GetErrorDetail() == nil, detail: r.GetErrorDetail().GetMessage()}
		if r.GetTypeUrl() == xdsproxy.WorkloadGroupType && r.GetResponseNonce() == "" {
			wg, err := anypb.New(&networking.WorkloadGroup{})
			if err != nil {
				return err
			}
			if err := s.Send(&discoveryv3.DiscoveryResponse{TypeUrl: r.GetTypeUrl(), VersionInfo: "1", Nonce: "1", Resources: []*anypb.Any{wg}}); err != nil {
				return err
			}
		}
	}
}

// app is the VM's workload: an HTTP server whose /ready can be switched.
type app struct {
	srv   *httptest.Server
	ready atomic.Bool
}

func newApp(t *testing.T) *app {
	a := &app{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *app) port() int {
	u, _ := url.Parse(a.srv.URL)
	p, _ := strconv.Atoi(u.Port())
	return p
}

type rig struct {
	cp     *controlPlane
	agent  *agent.Agent
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// start runs an agent against a CA whose TLS port also serves the
// recording control plane.
func start(t *testing.T, edit func(*agent.Config)) *rig {
	t.Helper()
	cp := &controlPlane{reqs: make(chan seen, 256)}
	r := startWith(t, func(s *grpc.Server, c *ca.CA) {
		cp.ca = c
		discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, cp)
	}, edit)
	r.cp = cp
	return r
}

// startWith runs an agent against a CA whose TLS port also serves what
// register adds, with a bundle for shop/cart in WorkloadGroup cart-vms.
func startWith(t *testing.T, register func(*grpc.Server, *ca.CA), edit func(*agent.Config)) *rig {
	t.Helper()
	return startWithLabels(t, map[string]string{"app": "cart"}, register, edit)
}

// startWithLabels is startWith for a bundle with these labels.
func startWithLabels(t *testing.T, labels map[string]string, register func(*grpc.Server, *ca.CA), edit func(*agent.Config)) *rig {
	t.Helper()
	c := agenttest.NewCA(t, register)
	bundleDir, _ := c.Bundle(t, "shop", "cart", "cart-vms", labels)
	dir := t.TempDir()
	cfg := agent.Config{
		BundleDir: bundleDir, OutDir: filepath.Join(dir, "out"), SocketDir: filepath.Join(dir, "run"),
		WorkloadName: "vm-1", DisableEnvoy: true, CertTTL: 2 * time.Second,
		RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
	}
	if edit != nil {
		edit(&cfg)
	}
	reg := prometheus.NewRegistry()
	a, err := agent.New(cfg, agenttest.Logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	r := &rig{agent: a, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-r.done:
		t.Fatalf("Run ended early: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("agent not ready")
	}
	return r
}

// next returns the next request of typeURL the control plane sees.
func (r *rig) next(t *testing.T, typeURL string) seen {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case s := <-r.cp.reqs:
			if s.typeURL == typeURL {
				return s
			}
		case <-timeout:
			t.Fatalf("no %s request reached the control plane", typeURL)
		}
	}
}

// TestProxylessVM runs the agent without Envoy: it writes rotating
// certificates and a grpc-go bootstrap grpc-go accepts, serves SDS that
// follows rotations, keeps its own stream to the control plane carrying the
// node contract, and reports the probe's verdicts.
func TestProxylessVM(t *testing.T) {
	w := newApp(t)
	r := start(t, func(c *agent.Config) {
		c.Probe = &health.Probe{HTTP: &health.HTTPGet{Port: w.port(), Path: "/ready"}, Period: 50 * time.Millisecond, FailureThreshold: 1}
	})
	a := r.agent

	// The node stream: identity over mTLS, node metadata, "not ready" first.
	first := r.next(t, xdsproxy.HealthInfoType)
	if first.peer != "spiffe://cluster.local/ns/shop/sa/cart" {
		t.Fatalf("peer %q", first.peer)
	}
	md := first.node.GetMetadata().GetFields()
	for k, want := range map[string]string{"NAMESPACE": "shop", "SERVICE_ACCOUNT": "cart", "WORKLOAD_NAME": "vm-1", "GENERATOR": "grpc", "AUTO_REGISTER_GROUP": "cart-vms", "INSTANCE_IPS": "127.0.0.1"} {
		if got := md[k].GetStringValue(); got != want {
			t.Errorf("node metadata %s = %q, want %q", k, got, want)
		}
	}
	if md["LABELS"].GetStructValue().GetFields()["app"].GetStringValue() != "cart" {
		t.Errorf("node LABELS %v", md["LABELS"])
	}
	if first.healthy {
		t.Fatal("reported healthy before the probe passed")
	}
	w.ready.Store(true)
	for s := r.next(t, xdsproxy.HealthInfoType); !s.healthy; s = r.next(t, xdsproxy.HealthInfoType) {
	}
	w.ready.Store(false)
	for s := r.next(t, xdsproxy.HealthInfoType); s.healthy; s = r.next(t, xdsproxy.HealthInfoType) {
		if s.detail != "" {
			t.Fatalf("healthy report with detail %q", s.detail)
		}
	}

	// grpc-go accepts the bootstrap the agent wrote.
	js, err := os.ReadFile(a.GRPCBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(js, []byte(filepath.Join(a.CertDir(), certs.CertChainFile))) {
		t.Fatalf("grpc bootstrap does not name the certificate files:\n%s", js)
	}
	t.Setenv("GRPC_XDS_BOOTSTRAP", "")
	t.Setenv("GRPC_XDS_BOOTSTRAP_CONFIG", "")
	s, err := xds.NewGRPCServer(xds.BootstrapContentsForTesting(js))
	if err != nil {
		t.Fatalf("grpc-go rejects the agent's bootstrap: %v", err)
	}
	s.Stop()

	// The Envoy bootstrap is written and valid even without Envoy.
	eb, err := os.ReadFile(a.EnvoyBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(eb, b); err != nil {
		t.Fatal(err)
	}
	if err := bootstrap.Validate(b); err != nil {
		t.Fatalf("Envoy bootstrap: %v", err)
	}

	// SDS follows the rotating certificate, and so do the files.
	conn, err := grpc.NewClient("unix://"+a.SDSSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := secretv3.NewSecretDiscoveryServiceClient(conn).StreamSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy"}, TypeUrl: resourcev3.SecretType, ResourceNames: []string{sds.DefaultSecret}}
	serials := map[string]bool{}
	for len(serials) < 3 {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		sec := &tlsv3.Secret{}
		if err := resp.GetResources()[0].UnmarshalTo(sec); err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(sec.GetTlsCertificate().GetCertificateChain().GetInlineBytes(), sec.GetTlsCertificate().GetPrivateKey().GetInlineBytes())
		if err != nil {
			t.Fatal(err)
		}
		serials[pair.Leaf.SerialNumber.String()] = true
		onDisk, err := tls.LoadX509KeyPair(filepath.Join(a.CertDir(), certs.CertChainFile), filepath.Join(a.CertDir(), certs.KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		if onDisk.Leaf.NotBefore.Before(pair.Leaf.NotBefore) {
			t.Fatal("SDS serves a newer certificate than the files hold")
		}
		req = &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.SecretType, ResourceNames: req.ResourceNames, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
	}
}

// TestEnvoyVM runs the agent with an Envoy binary (a fake executable): the
// agent starts it on its bootstrap, Envoy's ADS stream through the xDS
// socket reaches the control plane as the VM, health goes on that stream,
// and at shutdown the agent drains Envoy through its admin port.
func TestEnvoyVM(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "envoy.log")
	bin := filepath.Join(dir, "envoy")
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >> %q\ntrap 'echo term >> %q; exit 0' TERM\nwhile :; do sleep 0.02; done\n", log, log)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var drains atomic.Int32
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/drain_listeners" {
			drains.Add(1)
		}
		if r.URL.Path == "/stats/prometheus" {
			fmt.Fprintln(w, "# TYPE envoy_server_live gauge\nenvoy_server_live 1")
		}
	}))
	defer admin.Close()
	adminPort, _ := strconv.Atoi(strings.TrimPrefix(admin.URL, "http://127.0.0.1:"))

	var once sync.Once
	r := start(t, func(c *agent.Config) {
		c.DisableEnvoy, c.EnvoyBinary, c.EnvoyAdminPort, c.EnvoyDrain = false, bin, uint32(adminPort), 100*time.Millisecond
		c.CertTTL = time.Hour
		c.StatusAddr = "127.0.0.1:0"
	})
	a := r.agent
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(log)
		if bytes.Contains(b, []byte("-c "+a.EnvoyBootstrap())) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy not started with the bootstrap; log %q", b)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The agent's own stream, registering the VM.
	var agentStream seen
	for !agentStream.healthy || agentStream.node.GetMetadata().GetFields()["AUTO_REGISTER_GROUP"].GetStringValue() != "cart-vms" {
		agentStream = r.next(t, xdsproxy.HealthInfoType)
	}

	// Envoy's ADS stream, through the agent.
	conn, err := grpc.NewClient("unix://"+a.XDSSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node, _ := a.Node().Envoy("")
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ListenerType}); err != nil {
		t.Fatal(err)
	}
	got := r.next(t, resourcev3.ListenerType)
	if got.peer != "spiffe://cluster.local/ns/shop/sa/cart" || got.node.GetId() != node.GetId() {
		t.Fatalf("Envoy's request reached the control plane as %+v", got)
	}
	// No probe: the agent reports healthy, on Envoy's stream and on its
	// own, which alone registers the VM (labelled for mTLS since Envoy
	// runs); Envoy's node names no group.
	if eb, _ := os.ReadFile(a.EnvoyBootstrap()); bytes.Contains(eb, []byte("AUTO_REGISTER_GROUP")) {
		t.Errorf("envoy-bootstrap.json carries AUTO_REGISTER_GROUP")
	}
	for onEnvoy := false; !onEnvoy; {
		h := r.next(t, xdsproxy.HealthInfoType)
		md := h.node.GetMetadata().GetFields()
		if !h.healthy || h.node.GetId() != node.GetId() {
			t.Fatalf("health report %+v", h)
		}
		onEnvoy = md["AUTO_REGISTER_GROUP"] == nil && md["GENERATOR"] == nil
	}
	if !agentStream.healthy || agentStream.node.GetMetadata().GetFields()["GENERATOR"].GetStringValue() != "grpc" ||
		agentStream.node.GetMetadata().GetFields()["LABELS"].GetStructValue().GetFields()[meshlabels.TLSModeLabel].GetStringValue() != meshlabels.TLSModeIstio {
		t.Errorf("the agent's own stream with Envoy: %+v", agentStream)
	}
	// The agent's port merges Envoy's metrics into its own, as pilot-agent.
	_, stats, err := get(&http.Client{Timeout: 5 * time.Second}, "http://"+a.StatusAddr()+"/stats/prometheus")
	if err != nil || !strings.Contains(stats, "\nenvoy_server_live 1") || !strings.Contains(stats, "\nvmesh_agent_ready 1") {
		t.Errorf("/stats/prometheus (%v) lacks Envoy's or the agent's metrics:\n%s", err, stats)
	}

	once.Do(r.cancel)
	if err := <-r.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	r.done <- nil // for the cleanup
	if drains.Load() != 1 {
		t.Fatalf("%d drain requests, want 1", drains.Load())
	}
	if b, _ := os.ReadFile(log); !bytes.HasSuffix(b, []byte("term\n")) {
		t.Fatalf("envoy not stopped with SIGTERM: %q", b)
	}
	if _, err := net.Dial("unix", a.XDSSocket()); err == nil {
		t.Fatal("xDS socket still accepting after Run returned")
	}
}

func TestNewRejectsBadBundle(t *testing.T) {
	if _, err := agent.New(agent.Config{BundleDir: t.TempDir()}, nil, nil); err == nil {
		t.Fatal("New accepted an empty bundle directory")
	}
	if err := agent.Run(context.Background(), agent.Config{}, nil, nil); err == nil {
		t.Fatal("Run accepted a config without a bundle")
	}
}
