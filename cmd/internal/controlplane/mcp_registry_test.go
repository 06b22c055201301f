package controlplane_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/mcptypes"
	"github.com/vmesh/vmesh/registries"
)

// TestMCPServesRegistryObjects: what a registry generates (here the static
// registry's ServiceEntry and WorkloadEntry for one service) is served over
// MCP beside the files' objects: every ServiceEntry and WorkloadEntry of
// /debug/config, registry-generated ones included, by name and spec.
func TestMCPServesRegistryObjects(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inv, []byte("services:\n- name: billing\n  host: billing.internal\n  port: 8080\n  protocol: grpc\n  instances:\n  - address: 10.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := registries.ParseFlags([]string{"static=" + inv})
	if err != nil {
		t.Fatal(err)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = "../../../examples/quickstart/config"
	cfg.Registries = specs
	cfg.MCP.Plaintext = true
	cp := start(t, cfg)
	waitReady(t, cp) // after the registry's first complete set

	// /debug/config's ServiceEntries and WorkloadEntries, spec as
	// canonical JSON by "Kind namespace/name"; at least one a registry's.
	var dc struct {
		Objects []struct {
			Kind, Namespace, Name string
			Origin                struct{ Source string }
			Spec                  json.RawMessage
		}
	}
	_, body := get(t, "http://"+cp.HTTPAddr()+"/debug/config")
	if err := json.Unmarshal([]byte(body), &dc); err != nil {
		t.Fatal(err)
	}
	want, fromRegistry := map[string]string{}, 0
	for _, o := range dc.Objects {
		if o.Kind != "ServiceEntry" && o.Kind != "WorkloadEntry" {
			continue
		}
		want[o.Kind+" "+o.Namespace+"/"+o.Name] = canonical(t, o.Spec)
		if strings.HasPrefix(o.Origin.Source, "registry:") {
			fromRegistry++
		}
	}
	if fromRegistry < 2 {
		t.Fatalf("/debug/config holds %d registry objects, want the static registry's ServiceEntry and WorkloadEntry:\n%.2000s", fromRegistry, body)
	}

	conn, err := grpc.NewClient(cp.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := structpb.NewStruct(map[string]any{"GENERATOR": "api"})
	kinds := []string{"ServiceEntry", "WorkloadEntry"}
	for i, kind := range kinds {
		ty, _ := mcptypes.ByKind(kind)
		req := &discoveryv3.DiscoveryRequest{TypeUrl: ty.URL()}
		if i == 0 {
			req.Node = &corev3.Node{Id: "istiod-1.istio-system", Metadata: meta}
		}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for range kinds {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		ty, _, ok := mcptypes.ByURL(resp.GetTypeUrl())
		if !ok {
			t.Fatalf("a response of type %s", resp.GetTypeUrl())
		}
		for _, a := range resp.GetResources() {
			r, err := ty.Decode(a)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := protojson.Marshal(r.Spec)
			if err != nil {
				t.Fatal(err)
			}
			got[ty.Kind+" "+r.Namespace+"/"+r.Name] = canonical(t, spec)
		}
	}
	for key, spec := range want {
		if got[key] != spec {
			t.Errorf("%s: MCP serves %s, /debug/config shows %s", key, got[key], spec)
		}
	}
	for key := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("MCP serves %s, which /debug/config does not show", key)
		}
	}
	billing := false
	for key, spec := range got {
		billing = billing || strings.HasPrefix(key, "ServiceEntry ") && strings.Contains(spec, `"billing.internal"`)
	}
	if !billing {
		t.Errorf("no ServiceEntry for the registry's billing.internal served: %v", got)
	}
}

// canonical re-encodes JSON with sorted keys and no spaces.
func canonical(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
