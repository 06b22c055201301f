package xds_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// gammaConfig is a mesh whose only routes are a GRPCRoute (GAMMA: its
// parentRef is the ServiceEntry echo): calls of grpc.testing.TestService
// with x-canary: true go to the v2 ServiceEntry (the rule with more
// header matches comes first, as the GRPCRoute's precedence says), the
// others to v1 and v2 by backendRefs weights 80/20. The ServiceEntry echo itself selects no workload, so a call
// succeeds only through the generated route.
func gammaConfig(v1, v2 *xdstest.Backend) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.mesh.internal]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo-front}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo-v1, namespace: default}
spec:
  hosts: [echo-v1.mesh.internal]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo, version: v1}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo-v2, namespace: default}
spec:
  hosts: [echo-v2.mesh.internal]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo, version: v2}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: default}
spec: {address: 127.0.0.1, ports: {grpc: %d}, labels: {app: echo, version: v1}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: default}
spec: {address: 127.0.0.1, ports: {grpc: %d}, labels: {app: echo, version: v2}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: echo, namespace: default}
spec:
  parentRefs: [{group: networking.istio.io, kind: ServiceEntry, name: echo}]
  rules:
  - matches: [{method: {service: grpc.testing.TestService}, headers: [{name: x-canary, value: "true"}]}]
    backendRefs: [{group: networking.istio.io, kind: ServiceEntry, name: echo-v2, port: 7070}]
  - matches: [{method: {service: grpc.testing.TestService}}]
    backendRefs:
    - {group: networking.istio.io, kind: ServiceEntry, name: echo-v1, port: 7070, weight: 80}
    - {group: networking.istio.io, kind: ServiceEntry, name: echo-v2, port: 7070, weight: 20}
`, v1.ID, v1.Port, v2.ID, v2.Port)
}

// TestGRPCRouteSplitsProxyless: a Gateway API GRPCRoute, decoded from YAML
// and converted by the control plane's gatewayapi.Writer, routes a real
// grpc-go xDS client: a header match sends every canary call to v2, and
// the other calls split 80/20 between the v1 and v2 ServiceEntries by the
// backendRefs' weights.
func TestGRPCRouteSplitsProxyless(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := store.NewStore()
	m := startMesh(t, ctx, st)
	v1 := xdstest.StartBackend(t, m.addr, xdstest.Node{ID: "echo-v1-0", Namespace: "default"})
	v2 := xdstest.StartBackend(t, m.addr, xdstest.Node{ID: "echo-v2-0", Namespace: "default"})

	objs, errs := filestore.Decode("gamma.yaml", []byte(gammaConfig(v1, v2)))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	w, err := gatewayapi.NewWriter(st, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-w.Synced()
	for _, s := range st.Snapshot().Sources {
		if s.Source == gatewayapi.SourceName && (len(s.Warnings) > 0 || s.Objects != 1) {
			t.Fatalf("gateway-api source: %d objects, warnings %v; want 1 and none", s.Objects, s.Warnings)
		}
	}

	client := xdstest.Dial(t, m.addr, xdstest.Node{ID: "echo-client", Namespace: "default"}, "echo.mesh.internal:7070")
	xdstest.CallUntil(t, client, 20*time.Second) // only the generated route leads anywhere

	call := func(ctx context.Context) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := client.UnaryCall(cctx, &testpb.SimpleRequest{})
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		return resp.GetServerId()
	}
	canary := metadata.AppendToOutgoingContext(ctx, "x-canary", "true")
	for range 50 {
		if id := call(canary); id != v2.ID {
			t.Fatalf("a canary call reached %s, want %s (the header match)", id, v2.ID)
		}
	}
	const n = 1000
	by := map[string]int{}
	for range n {
		by[call(ctx)]++
	}
	// 80/20 over 1000 calls: the v1 share is 800 ± 12.6 (one standard
	// deviation); 740..860 is ±4.7 of them.
	t.Logf("answers: %v", by)
	if by[v1.ID]+by[v2.ID] != n || by[v1.ID] < 740 || by[v1.ID] > 860 {
		t.Errorf("answers %v: want v1 ≈ 80%% (740..860 of %d) and v2 the rest", by, n)
	}

	// The writer follows the route: v1's weight 0 sends everything to v2.
	objs, errs = filestore.Decode("gamma.yaml", []byte(strings.Replace(gammaConfig(v1, v2), "weight: 80", "weight: 0", 1)))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, "all calls on v2", func() bool {
		for range 20 { // 20 in a row at 80/20: 1 in 10^14
			if call(ctx) != v2.ID {
				return false
			}
		}
		return true
	})
}
