package xds_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/grpc/codes"
)

const echoHost = "echo.mesh.internal"

func serviceEntryYAML() string {
	return `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: echo
  namespace: default
spec:
  hosts: [echo.mesh.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {name: grpc, number: 7070, protocol: GRPC}
  workloadSelector:
    labels: {app: echo}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: other
  namespace: default
spec:
  hosts: [other.mesh.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {name: grpc, number: 7070, protocol: GRPC}
  workloadSelector:
    labels: {app: other}
`
}

func destinationRuleYAML() string {
	return `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: echo
  namespace: default
spec:
  host: echo.mesh.internal
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v2
    labels: {version: v2}
`
}

func workloadEntryYAML(name, app, version string, port uint32) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: %s
  namespace: default
spec:
  address: 127.0.0.1
  ports: {grpc: %d}
  labels: {app: %s, version: %s}
`, name, port, app, version)
}

func virtualServiceYAML(http string) string {
	return `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: echo
  namespace: default
spec:
  hosts: [echo.mesh.internal]
  http:
` + http
}

// counts makes n calls and counts answers by backend id (or status code).
func counts(client interface{}, n int, call func() (string, codes.Code)) map[string]int {
	out := map[string]int{}
	for range n {
		id, code := call()
		if code != codes.OK {
			id = code.String()
		}
		out[id]++
	}
	return out
}

// runRoutingScenario drives the end-to-end scenario against a mesh
// whose config w changes.
func runRoutingScenario(t *testing.T, m *mesh, w configWriter) {
	flaky := &failOnce{seen: map[string]bool{}}
	b1 := startBackend(t, m.addr, "b1", flaky)
	b2 := startBackend(t, m.addr, "b2", flaky)
	b3 := startBackend(t, m.addr, "b3", flaky)
	stranger := startBackend(t, m.addr, "stranger", flaky)
	w.write(map[string]string{
		"we/b1.yaml":       workloadEntryYAML("b1", "echo", "v1", b1.port),
		"we/b2.yaml":       workloadEntryYAML("b2", "echo", "v1", b2.port),
		"we/b3.yaml":       workloadEntryYAML("b3", "echo", "v2", b3.port),
		"we/stranger.yaml": workloadEntryYAML("stranger", "other", "v1", stranger.port),
	})

	client := dial(t, m.addr, "client-1", echoHost+":7070")
	one := func(md ...string) func() (string, codes.Code) {
		return func() (string, codes.Code) { return call(client, md...) }
	}

	t.Run("reaches only the service's backends", func(t *testing.T) {
		eventually(t, "all three backends answering", func() bool {
			c := counts(client, 30, one())
			return c["b1"] > 0 && c["b2"] > 0 && c["b3"] > 0
		})
		c := counts(client, 90, one())
		if c["stranger"] != 0 || c["b1"]+c["b2"]+c["b3"] != 90 {
			t.Fatalf("answers = %v, want only b1, b2, b3", c)
		}
	})

	t.Run("80/20 split", func(t *testing.T) {
		w.write(map[string]string{"vs.yaml": virtualServiceYAML(`  - route:
    - destination: {host: echo.mesh.internal, subset: v1}
`)})
		eventually(t, "all traffic on v1", func() bool { c := counts(client, 30, one()); return c["b3"] == 0 && c["b1"]+c["b2"] == 30 })
		w.write(map[string]string{"vs.yaml": virtualServiceYAML(`  - route:
    - destination: {host: echo.mesh.internal, subset: v1}
      weight: 80
    - destination: {host: echo.mesh.internal, subset: v2}
      weight: 20
`)})
		eventually(t, "v2 receiving traffic", func() bool { return counts(client, 20, one())["b3"] > 0 })
		const n = 1000
		c := counts(client, n, one())
		share := float64(c["b3"]) / n
		// 20% with n=1000: sd 1.3%; allow 5 sd.
		if math.Abs(share-0.2) > 0.065 || c["b1"]+c["b2"]+c["b3"] != n {
			t.Fatalf("v2 share = %.3f (%v), want 0.20 ± 0.065", share, c)
		}
	})

	t.Run("header match goes to v2 only", func(t *testing.T) {
		w.write(map[string]string{"vs.yaml": virtualServiceYAML(`  - name: canary
    match:
    - headers:
        x-canary: {exact: "true"}
    route:
    - destination: {host: echo.mesh.internal, subset: v2}
  - route:
    - destination: {host: echo.mesh.internal, subset: v1}
`)})
		eventually(t, "header route active", func() bool {
			return counts(client, 20, one("x-canary", "true"))["b3"] == 20 && counts(client, 20, one())["b3"] == 0
		})
		if c := counts(client, 100, one("x-canary", "true")); c["b3"] != 100 {
			t.Fatalf("canary calls = %v, want all on b3", c)
		}
		if c := counts(client, 100, one("x-canary", "false")); c["b3"] != 0 || c["b1"]+c["b2"] != 100 {
			t.Fatalf("other calls = %v, want all on v1", c)
		}
	})

	t.Run("deleting a WorkloadEntry stops its traffic", func(t *testing.T) {
		w.write(map[string]string{"we/b2.yaml": ""})
		eventually(t, "b2 gone", func() bool { return counts(client, 30, one())["b2"] == 0 })
		if c := counts(client, 100, one()); c["b2"] != 0 || c["b1"] != 100 {
			t.Fatalf("after delete = %v, want all on b1", c)
		}
	})

	t.Run("fault abort returns the configured status", func(t *testing.T) {
		w.write(map[string]string{"vs.yaml": virtualServiceYAML(`  - fault:
      abort:
        grpcStatus: RESOURCE_EXHAUSTED
        percentage: {value: 100}
    route:
    - destination: {host: echo.mesh.internal}
`)})
		eventually(t, "abort active", func() bool { _, code := call(client); return code == codes.ResourceExhausted })
		if c := counts(client, 50, one()); c[codes.ResourceExhausted.String()] != 50 {
			t.Fatalf("with abort = %v, want all RESOURCE_EXHAUSTED", c)
		}
	})

	t.Run("retry turns a transient UNAVAILABLE into success", func(t *testing.T) {
		token := 0
		fresh := func() string { token++; return fmt.Sprintf("%s-%d", t.Name(), token) }
		// Retries turned off (attempts: 0): the first failure is the answer.
		w.write(map[string]string{"vs.yaml": virtualServiceYAML(`  - retries: {attempts: 0}
    route:
    - destination: {host: echo.mesh.internal}
`)})
		eventually(t, "fault gone", func() bool { _, code := call(client); return code == codes.OK })
		eventually(t, "retries off", func() bool { _, code := call(client, "fail-once", fresh()); return code == codes.Unavailable })
		// No retries in the VirtualService: Istio's default retry policy
		// (2 attempts on unavailable among others) applies.
		w.write(map[string]string{"vs.yaml": virtualServiceYAML(`  - route:
    - destination: {host: echo.mesh.internal}
`)})
		eventually(t, "Istio's default retries active", func() bool { _, code := call(client, "fail-once", fresh()); return code == codes.OK })
		for range 30 {
			if id, code := call(client, "fail-once", fresh()); code != codes.OK {
				t.Fatalf("with Istio's default retries: code %v (backend %q), want OK", code, id)
			}
		}
		w.write(map[string]string{"vs.yaml": virtualServiceYAML(`  - retries:
      attempts: 3
      retryOn: unavailable
    route:
    - destination: {host: echo.mesh.internal}
`)})
		eventually(t, "retries active", func() bool { _, code := call(client, "fail-once", fresh()); return code == codes.OK })
		for range 30 {
			if id, code := call(client, "fail-once", fresh()); code != codes.OK {
				t.Fatalf("with retries: code %v (backend %q), want OK", code, id)
			}
		}
	})
}

func TestEndToEndDirectory(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	w := &dirWriter{t: t, dir: dir}
	w.write(map[string]string{"se.yaml": serviceEntryYAML(), "dr.yaml": destinationRuleYAML()})
	store := store.NewStore()
	src := filestore.NewDirSource(dir, store, testLogger(t))
	go func() { _ = src.Run(ctx) }()
	<-src.Ready()
	m := startMesh(t, ctx, store)
	runRoutingScenario(t, m, w)

	// What the client holds is inspectable (after the scenario, its route
	// sends everything to the whole service); unknown proxies are a 404.
	resp, err := http.Get(m.debug.URL + "/debug/config_dump?proxy=client-1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"outbound|7070||echo.mesh.internal": "`) || strings.Contains(string(body), `"outbound|7070|v1|echo.mesh.internal"`) || !strings.Contains(string(body), `"group": "grpc|default|-"`) {
		t.Errorf("config_dump: %d\n%.500s", resp.StatusCode, body)
	}
	if resp, err := http.Get(m.debug.URL + "/debug/config_dump?proxy=nobody"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("config_dump for an unknown proxy: %v %v, want 404", resp.StatusCode, err)
	}

	// Every proxy's ACKed versions name a Store revision.
	for _, st := range m.syncz() {
		for typ, ts := range st.Types {
			if ts.Nack != "" || !strings.HasPrefix(ts.Acked, "r") {
				t.Errorf("proxy %s %s: %+v, want an ACKed r<revision> version and no NACK", st.ID, typ, ts)
			}
		}
	}
}

func TestEndToEndGit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git: %v", err)
	}
	repo := t.TempDir()
	w := &gitWriter{t: t, dir: repo}
	w.git("init", "--quiet", "--initial-branch=main")
	w.git("config", "user.email", "test@vmesh.io")
	w.git("config", "user.name", "vmesh test")
	w.write(map[string]string{"mesh/se.yaml": serviceEntryYAML(), "mesh/dr.yaml": destinationRuleYAML()})

	store := store.NewStore()
	src, err := filestore.NewGitSource(filestore.GitConfig{
		Repo: repo, Ref: "main", Path: "mesh", Interval: time.Hour, WorkDir: filepath.Join(t.TempDir(), "clone"),
	}, store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	w.src = src
	go func() { _ = src.Run(ctx) }()
	<-src.Ready()
	m := startMesh(t, ctx, store)
	runRoutingScenario(t, m, &prefixWriter{w: w, prefix: "mesh/"})

	// The client's ACKed route version names the last commit.
	want := "@" + w.commit[:12]
	eventually(t, "client ACKs the last commit", func() bool {
		for _, st := range m.syncz() {
			if st.ID == "client-1" && strings.HasSuffix(st.Types["RDS"].Acked, want) {
				return true
			}
		}
		return false
	})
}

// prefixWriter writes files under a folder of another writer.
type prefixWriter struct {
	w      configWriter
	prefix string
}

func (p *prefixWriter) write(files map[string]string) {
	out := make(map[string]string, len(files))
	for k, v := range files {
		out[p.prefix+k] = v
	}
	p.w.write(out)
}
