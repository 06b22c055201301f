package controlplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/buildinfo"
	"github.com/vmesh/vmesh/internal/testenv"
)

// TestNotifiesSystemd: under a Type=notify unit the control plane says
// READY=1 once /ready answers 200, and STOPPING=1 on shutdown, on a real
// unixgram socket as systemd's.
func TestNotifiesSystemd(t *testing.T) {
	sd := testenv.NotifySocket(t)
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = "../../../examples/quickstart"
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	cp, err := controlplane.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	if got := sd.Next(t, 15*time.Second); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	if code, body := get(t, "http://"+cp.HTTPAddr()+"/ready"); code != http.StatusOK {
		t.Fatalf("READY=1 sent while /ready answers %d %s", code, body)
	}
	cancel()
	if got := sd.Next(t, 10*time.Second); got != "STOPPING=1" {
		t.Fatalf("notification on shutdown %q, want STOPPING=1", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestBuildInfo: the build is served at /version, exported as
// vmesh_build_info and named in xDS responses' control_plane.identifier.
func TestBuildInfo(t *testing.T) {
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = "../../../examples/quickstart"
	cp := start(t, cfg)
	waitReady(t, cp)
	bi := buildinfo.Get()

	resp, err := http.Get("http://" + cp.HTTPAddr() + "/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got buildinfo.Info
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got != bi {
		t.Fatalf("/version = %+v, want %+v", got, bi)
	}

	_, metrics := get(t, "http://"+cp.HTTPAddr()+"/metrics")
	want := fmt.Sprintf(`vmesh_build_info{dirty="%t",goversion="%s",revision="%s",version="%s"} 1`, bi.Dirty, bi.GoVersion, bi.Revision, bi.Version)
	if !strings.Contains(metrics, want) {
		t.Fatalf("/metrics has no %s", want)
	}

	conn, err := grpc.NewClient(cp.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, _ := structpb.NewStruct(map[string]any{"NAMESPACE": "default", "GENERATOR": "grpc"})
	node := &corev3.Node{Id: "version-test", Metadata: md}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ListenerType}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if id := r.GetControlPlane().GetIdentifier(); !strings.HasPrefix(id, "vmesh "+bi.String()+" on ") {
		t.Fatalf("control_plane.identifier %q, want vmesh %s on <host>", id, bi)
	}
	dstream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := dstream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "version-test-delta", Metadata: md}, TypeUrl: resourcev3.ListenerType}); err != nil {
		t.Fatal(err)
	}
	dr, err := dstream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if id := dr.GetControlPlane().GetIdentifier(); !strings.HasPrefix(id, "vmesh "+bi.String()+" on ") {
		t.Fatalf("delta control_plane.identifier %q, want vmesh %s on <host>", id, bi)
	}
}
