package grpc_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/internal/xdstest"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// The locality end-to-end test: grpc-go's own xDS client, in zone a of
// region r (its bootstrap's node.locality), against `vmesh serve`. Under
// outlier detection (Istio's default locality failover) it sends
// everything to zone a while zone a answers, and fails over to zone b
// within the outlier detection interval + 1 s once zone a's backends stop;
// a distribute rule of 80/20 between zones a and b gives zone a 80 ± 5 %
// and zone c, which it does not name, nothing.

const locSE = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %[1]s, namespace: default}
spec:
  hosts: [%[1]s.mesh.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{name: grpc, number: 7070, protocol: GRPC}]
  workloadSelector: {labels: {app: %[1]s}}
`

func locWE(name, app, locality string, port int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: default}
spec:
  address: 127.0.0.1
  ports: {grpc: %d}
  labels: {app: %s}
  locality: %s
`, name, port, app, locality)
}

// locBackend is a plain gRPC server (the mesh reaches it through its
// WorkloadEntry) answering with its name.
type locBackend struct {
	name string
	port int
	gs   *grpc.Server
}

func startLocBackend(t *testing.T, name string) *locBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, &xdstest.Backend{ID: name})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return &locBackend{name: name, port: lis.Addr().(*net.TCPAddr).Port, gs: gs}
}

// locCall makes one call with a short deadline and returns the answering
// backend, "" on an error.
func locCall(c testpb.TestServiceClient) string {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
	if err != nil {
		return ""
	}
	return resp.GetServerId()
}

// byZone counts n calls' answers by the zone in the backend's name
// ("a1" → "a"); failed calls count under "".
func byZone(c testpb.TestServiceClient, n int) map[string]int {
	out := map[string]int{}
	for range n {
		id := locCall(c)
		if id != "" {
			id = id[:1]
		}
		out[id]++
	}
	return out
}

func TestGRPCGoLocality(t *testing.T) {
	cfg := configDir{t: t, dir: t.TempDir()}
	a1, a2, b1 := startLocBackend(t, "a1"), startLocBackend(t, "a2"), startLocBackend(t, "b1")
	da, db, dc := startLocBackend(t, "a-dist"), startLocBackend(t, "b-dist"), startLocBackend(t, "c-dist")
	const interval = time.Second
	cfg.write(map[string]string{
		"se.yaml": fmt.Sprintf(locSE, "fo") + "---\n" + fmt.Sprintf(locSE, "dist"),
		"we.yaml": strings.Join([]string{
			locWE("a1", "fo", "r/a", a1.port), locWE("a2", "fo", "r/a", a2.port), locWE("b1", "fo", "r/b", b1.port),
			locWE("a-dist", "dist", "r/a", da.port), locWE("b-dist", "dist", "r/b", db.port), locWE("c-dist", "dist", "r/c", dc.port),
		}, "---\n"),
		// fo: outlier detection only, so Istio's default locality
		// failover applies; dist: 80/20 from zone a.
		"dr.yaml": fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: fo, namespace: default}
spec:
  host: fo.mesh.internal
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 1, interval: %s, baseEjectionTime: 30s}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: dist, namespace: default}
spec:
  host: dist.mesh.internal
  trafficPolicy:
    loadBalancer:
      localityLbSetting:
        distribute:
        - from: r/a/*
          to: {"r/a/*": 80, "r/b/*": 20}
`, interval),
	})
	vm := testenv.StartVMesh(t, "--config-dir", cfg.dir, "--debounce-quiet", "20ms", "--debounce-max", "200ms")
	client := xdstest.Node{ID: "client-a", Namespace: "default", Labels: map[string]string{"app": "client"}, Locality: "r/a"}

	t.Run("failover", func(t *testing.T) {
		fo := xdstest.Dial(t, vm.XDSAddr, client, "fo.mesh.internal:7070")
		xdstest.CallUntil(t, fo, 20*time.Second)
		if c := byZone(fo, 100); c["a"] != 100 {
			t.Fatalf("answers by zone = %v, want all 100 from zone a (the client's)", c)
		}
		a1.gs.Stop()
		a2.gs.Stop()
		stopped := time.Now()
		budget := interval + time.Second
		for {
			if id := locCall(fo); strings.HasPrefix(id, "b") {
				t.Logf("failed over to %s %s after zone a stopped", id, time.Since(stopped).Round(time.Millisecond))
				break
			}
			if time.Since(stopped) > budget {
				t.Fatalf("no answer from zone b within %s (outlier detection interval + 1 s) of zone a stopping", budget)
			}
			time.Sleep(10 * time.Millisecond) // poll interval
		}
		if c := byZone(fo, 50); c["b"] != 50 {
			t.Fatalf("after failover = %v, want all from zone b", c)
		}
	})

	t.Run("distribute 80/20", func(t *testing.T) {
		dist := xdstest.Dial(t, vm.XDSAddr, client, "dist.mesh.internal:7070")
		xdstest.Eventually(t, "both zones answering", func() bool { c := byZone(dist, 50); return c["a"] > 0 && c["b"] > 0 })
		const n = 2000
		c := byZone(dist, n)
		// 80 % of 2000: sd 0.9 %; ± 5 % is over 5 sd. Zone c, which the
		// rule does not name, keeps its locality without endpoints (as
		// Istio's) and gets nothing.
		if share := float64(c["a"]) / n; math.Abs(share-0.8) > 0.05 || c["a"]+c["b"] != n {
			t.Fatalf("zone a share = %.3f (%v), want 0.80 ± 0.05, nothing to zone c", share, c)
		}
	})
}
