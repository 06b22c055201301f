//go:build replicabench

// The replica benchmark of issue 21: three `vmesh serve` processes sharing
// state through a real ZooKeeper or a real Consul dev agent, 1,000
// simulated proxyless gRPC proxies on each. It is behind the build tag
// replicabench, so neither `make test` nor `make bench` runs it:
//
//	make bench-replicas
//	go test -tags replicabench -count=1 -timeout 60m -run TestReplicaLoad -v ./cmd/vmesh-load/internal/loadgen/
//
// VMESH_REPLICA_RUNS (default 1) repeats each backend's run and prints the
// medians; VMESH_REPLICA_BACKENDS (default "zookeeper,consul") picks them.

package loadgen

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/spiffe"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/writers/sharedstate"
	"github.com/vmesh/vmesh/xds/node"
)

// Sizes of the replica benchmark.
const (
	benchReplicas        = 3
	benchProxiesPerRep   = 1000
	benchVMs             = 100 // auto-registered through replica A
	benchConnectParallel = 64  // proxies connecting at once, per replica
	benchSteady          = 20 * time.Second
	benchChanges         = 3 // VirtualService changes measured (after one warm-up)
)

// replicaRun is what one run measured, per replica where it is a slice.
type replicaRun struct {
	Backend                 string
	LoadBefore, LoadAfter   string
	Connect                 time.Duration   // all 3,000 streams synced
	ConnectCPU              []time.Duration // per replica
	SteadyCPU               []time.Duration // per replica, over benchSteady
	ChangeCPU               []time.Duration // per replica, mean per change
	IdleRSS                 []int64         // per replica, before the proxies connect
	PeakRSS, RSS            []int64         // per replica, at the end
	HarnessConnectCPU       time.Duration   // the test process's own CPU while connecting
	Listed                  []int           // the proxies of each replica in C's /debug/replicas
	VMVisible               time.Duration   // the VMs registered through A all shared by B and C
	ChangeP50, ChangeP99    time.Duration   // VirtualService change → ACKed by all 3,000
	ChangeMax               time.Duration
	ChangeACKs, ChangeWants int
}

func TestReplicaLoad(t *testing.T) {
	runs := 1
	if v := os.Getenv("VMESH_REPLICA_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("VMESH_REPLICA_RUNS=%q: want a positive count", v)
		}
		runs = n
	}
	backends := []string{sharedstate.TypeZooKeeper, sharedstate.TypeConsul}
	if v := os.Getenv("VMESH_REPLICA_BACKENDS"); v != "" {
		backends = strings.Split(v, ",")
	}
	if _, err := RaiseFileLimit(); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "vmesh")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/vmesh/vmesh/cmd/vmesh").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, backend := range backends {
		var all []replicaRun
		for i := range runs {
			t.Run(fmt.Sprintf("%s/run%d", backend, i+1), func(t *testing.T) {
				var spec sharedstate.Spec
				switch backend {
				case sharedstate.TypeZooKeeper:
					spec = sharedstate.Spec{Type: backend, Address: testenv.StartZooKeeper(t).Addr}
				case sharedstate.TypeConsul:
					spec = sharedstate.Spec{Type: backend, Address: testenv.StartConsul(t).HTTPAddr}
				default:
					t.Fatalf("backend %q: want zookeeper or consul", backend)
				}
				r := runReplicaLoad(t, bin, spec)
				logRun(t, r)
				all = append(all, r)
			})
		}
		if len(all) > 1 {
			logMedians(t, backend, all)
		}
	}
}

// vmGroupYAML is the WorkloadGroup the simulated VMs register under, and a
// ServiceEntry selecting them.
const vmGroupYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vm-app, namespace: ns-0}
spec:
  hosts: [vm-app.mesh.internal]
  ports: [{number: 7070, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: vm-app}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: vm-app, namespace: ns-0}
spec:
  metadata: {labels: {app: vm-app}}
  template:
    ports: {grpc: 7070}
    serviceAccount: vm-app
`

func runReplicaLoad(t *testing.T, bin string, spec sharedstate.Spec) replicaRun {
	r := replicaRun{Backend: spec.Type, LoadBefore: loadAvg()}
	sz := Size{Services: 1000, Endpoints: 10, VirtualServices: 100, Namespaces: 10}
	cfgDir := t.TempDir()
	if err := Write(cfgDir, sz, SourceDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "ns-0", "vm-app.yaml"), []byte(vmGroupYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cacerts := benchPluginCA(t)

	// Three replicas, started one after another (each loads the config).
	reps := make([]*benchServe, benchReplicas)
	for i := range reps {
		id := string(rune('A' + i))
		reps[i] = startBenchServe(t, bin, "--config-dir", cfgDir, "--cacerts-dir", cacerts, "--state", spec.String(),
			"--replica-id", id, "--debounce-quiet", "100ms")
		t.Logf("%s: replica %s serving (pid %d): xds %s, secure %s", spec.Type, id, reps[i].pid(), reps[i].xdsAddr, reps[i].secureAddr)
	}
	stats := func() []ProcStats {
		out := make([]ProcStats, len(reps))
		for i, rp := range reps {
			st, err := ReadProcStats(rp.pid())
			if err != nil {
				t.Fatal(err)
			}
			out[i] = st
		}
		return out
	}
	cpuSince := func(before []ProcStats) []time.Duration {
		now := stats()
		d := make([]time.Duration, len(now))
		for i := range now {
			d[i] = now[i].CPU - before[i].CPU
		}
		return d
	}

	ctx := t.Context()
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })

	// The VMs: mTLS ADS streams to A's secure port that name the
	// WorkloadGroup (as the agent's do), with certificates of the shared CA.
	vmCert := benchVMCert(t, cacerts)
	roots := x509.NewCertPool()
	rootPEM, err := os.ReadFile(filepath.Join(cacerts, ca.PluginRootCertFile))
	if err != nil || !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("root: %v", err)
	}
	vmConn, err := grpc.NewClient("passthrough:///"+reps[0].secureAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{vmCert}, MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vmConn.Close() })
	vmStart := time.Now()
	var vmErrs atomic.Int64
	var vmErr atomic.Value
	for i := range benchVMs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runBenchVM(pctx, vmConn, i); err != nil && pctx.Err() == nil {
				vmErrs.Add(1)
				vmErr.Store(err.Error())
			}
		}()
	}
	waitFor(t, 2*time.Minute, "the VMs registered through A shared by B and C", func() bool {
		if vmErrs.Load() > 0 {
			t.Fatalf("%d VM streams failed: %v", vmErrs.Load(), vmErr.Load())
		}
		var a sharedstate.Status
		if getStatus(reps[0].httpAddr, &a) != nil || a.Written < benchVMs {
			return false
		}
		for _, rp := range reps[1:] {
			var st sharedstate.Status
			if getStatus(rp.httpAddr, &st) != nil || st.Shared < benchVMs || len(st.Replicas) != benchReplicas {
				return false
			}
		}
		return true
	})
	r.VMVisible = time.Since(vmStart)
	t.Logf("%s: %d VMs registered through A, shared by B and C after %s", spec.Type, benchVMs, r.VMVisible.Round(time.Millisecond))

	// The proxies: 1,000 proxyless gRPC nodes (state of the world, as
	// grpc-go) on each replica, one connection each.
	o := DefaultOptions()
	o.Size, o.Proxies, o.EnvoyFraction, o.DeltaFraction = sz, benchProxiesPerRep, 0, 0
	shared := NewShared()
	var proxies []*Proxy
	type dialed struct {
		p  *Proxy
		cc *grpc.ClientConn
	}
	perReplica := make([][]dialed, len(reps))
	for ri, rp := range reps {
		for _, s := range Specs(o) {
			s.ID = fmt.Sprintf("%c-%s", 'a'+ri, s.ID)
			cc, err := grpc.NewClient("passthrough:///"+rp.xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.ForceCodecV2(newClientCodec())))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cc.Close() })
			p := NewProxy(s, shared)
			proxies = append(proxies, p)
			perReplica[ri] = append(perReplica[ri], dialed{p, cc})
		}
	}
	before := stats()
	for _, st := range before {
		r.IdleRSS = append(r.IdleRSS, st.RSS)
	}
	connectStart, harness0 := time.Now(), SelfCPU()
	var synced, failed atomic.Int64
	var failure atomic.Value
	// Each replica's proxies connect at most benchConnectParallel at a
	// time (a proxy holds its slot until synced); the three in parallel.
	for _, ds := range perReplica {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := make(chan struct{}, benchConnectParallel)
			for _, d := range ds {
				select {
				case sem <- struct{}{}:
				case <-pctx.Done():
					return
				}
				wg.Add(2)
				go func() {
					defer wg.Done()
					if err := d.p.Run(pctx, d.cc); err != nil && pctx.Err() == nil {
						failed.Add(1)
						failure.Store(err.Error())
					}
				}()
				go func() {
					defer wg.Done()
					select {
					case <-d.p.Synced():
						synced.Add(1)
					case <-pctx.Done():
					}
					<-sem
				}()
			}
		}()
	}
	total := benchReplicas * benchProxiesPerRep
	waitFor(t, 15*time.Minute, "every proxy synced", func() bool {
		if failed.Load() > 0 {
			t.Fatalf("%d proxies failed: %v", failed.Load(), failure.Load())
		}
		return int(synced.Load()) == total
	})
	r.Connect = time.Since(connectStart)
	r.ConnectCPU = cpuSince(before)
	r.HarnessConnectCPU = SelfCPU() - harness0
	t.Logf("%s: %d proxies synced in %s, replica CPU %v", spec.Type, total, r.Connect.Round(time.Millisecond), roundAll(r.ConnectCPU))

	// Steady state: nothing changes for benchSteady.
	before = stats()
	time.Sleep(benchSteady) // a measuring window, not synchronisation
	r.SteadyCPU = cpuSince(before)
	t.Logf("%s: steady %s, replica CPU %v", spec.Type, benchSteady, roundAll(r.SteadyCPU))
	// The shared state knows the three replicas and their proxies (each
	// replica's heartbeat record carries its count): C's /debug/replicas.
	waitFor(t, 30*time.Second, "C's /debug/replicas lists A, B and C with their proxies", func() bool {
		var st sharedstate.Status
		if getStatus(reps[2].httpAddr, &st) != nil || len(st.Replicas) != benchReplicas {
			return false
		}
		counts := make([]int, 0, benchReplicas)
		for _, rr := range st.Replicas {
			if rr.Proxies < benchProxiesPerRep {
				return false
			}
			counts = append(counts, rr.Proxies)
		}
		r.Listed = counts
		return true
	})

	// VirtualService changes of service 0, which every proxy dials: one
	// warm-up, then benchChanges measured.
	var lat []time.Duration
	changeCPU := make([]time.Duration, benchReplicas)
	for gen := 1; gen <= benchChanges+1; gen++ {
		pr := NewProbe(resourcev3.RouteType, SourceDir.RouteName(0))
		want := 0
		for _, p := range proxies {
			if p.Watch(pr) {
				want++
			}
		}
		before = stats()
		start := time.Now()
		pr.Arm(want, start)
		if err := WriteRouting(cfgDir, sz, SourceDir, 0, gen); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		got := pr.Wait(wctx)
		cancel()
		time.Sleep(250 * time.Millisecond) // let the replicas finish what the ACKs started before reading CPU
		cpu := cpuSince(before)
		l := Summarize(got)
		t.Logf("%s: VirtualService change %d: %d/%d ACKs, p50 %s p99 %s max %s, replica CPU %v", spec.Type, gen, len(got), want, ms(l.P50), ms(l.P99), ms(l.Max), roundAll(cpu))
		if len(got) < want {
			t.Fatalf("change %d: only %d of %d proxies ACKed within a minute", gen, len(got), want)
		}
		if gen == 1 {
			continue // warm-up
		}
		lat = append(lat, got...)
		r.ChangeWants += want
		for i := range cpu {
			changeCPU[i] += cpu[i] / benchChanges
		}
	}
	r.ChangeACKs = len(lat)
	r.ChangeCPU = changeCPU
	l := Summarize(lat)
	r.ChangeP50, r.ChangeP99, r.ChangeMax = l.P50, l.P99, l.Max
	for _, st := range stats() {
		r.PeakRSS = append(r.PeakRSS, st.PeakRSS)
		r.RSS = append(r.RSS, st.RSS)
	}
	r.LoadAfter = loadAvg()
	return r
}

// runBenchVM holds one simulated VM's stream: a node naming the
// WorkloadGroup vm-app with its own IP, subscribed to one listener, ACKing
// every response.
func runBenchVM(ctx context.Context, conn grpc.ClientConnInterface, i int) error {
	id := node.Identity{ID: fmt.Sprintf("vm-%03d", i), Namespace: "ns-0", ServiceAccount: "vm-app", WorkloadName: fmt.Sprintf("vm-%03d", i),
		IPs: []string{fmt.Sprintf("10.77.%d.%d", i/250, i%250+1)}, WorkloadGroup: "vm-app", Generator: "grpc"}
	n, err := id.Node()
	if err != nil {
		return err
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("vm %d: %w", i, err)
	}
	names := []string{SourceDir.RouteName(0)}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: n, TypeUrl: resourcev3.ListenerType, ResourceNames: names}); err != nil {
		return fmt.Errorf("vm %d: %w", i, err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("vm %d: %w", i, err)
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(), ResourceNames: names}); err != nil {
			return fmt.Errorf("vm %d: %w", i, err)
		}
	}
}

// benchVMCert is a workload certificate of the shared CA for
// ns-0/vm-app, the VMs' identity.
func benchVMCert(t *testing.T, cacerts string) tls.Certificate {
	t.Helper()
	c, err := ca.Open(ca.Config{DataDir: t.TempDir(), CACertsDir: cacerts}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := spiffe.Identity{TrustDomain: spiffe.DefaultTrustDomain, Namespace: "ns-0", ServiceAccount: "vm-app"}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id.URL()}}, key)
	if err != nil {
		t.Fatal(err)
	}
	_, chain, err := c.SignCSR(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair([]byte(strings.Join(chain, "")), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// benchPluginCA writes an Istio plug-in cacerts directory (a root and one
// intermediate) the three replicas share.
func benchPluginCA(t *testing.T) string {
	t.Helper()
	now := time.Now()
	mk := func(cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		sn, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
		tmpl := &x509.Certificate{SerialNumber: sn, Subject: pkix.Name{CommonName: cn, Organization: []string{"vmesh bench"}},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature}
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	root, rootKey, rootPEM := mk("bench root", nil, nil)
	_, midKey, midPEM := mk("bench intermediate", root, rootKey)
	keyDER, err := x509.MarshalECPrivateKey(midKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		ca.PluginCACertFile: midPEM, ca.PluginCAKeyFile: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		ca.PluginCertChainFile: append(slices.Clone(midPEM), rootPEM...), ca.PluginRootCertFile: rootPEM,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// benchServe is a `vmesh serve` child process.
type benchServe struct {
	httpAddr, xdsAddr, secureAddr string
	cmd                           *exec.Cmd
	exited                        chan struct{}
}

func (s *benchServe) pid() int { return s.cmd.Process.Pid }

// startBenchServe runs `vmesh serve` with args on kernel-assigned ports and
// waits for its "vmesh serving" line and its /ready.
func startBenchServe(t *testing.T, bin string, args ...string) *benchServe {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--http-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0", "--secure-addr", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--log-format", "json"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &benchServe{cmd: cmd, exited: make(chan struct{})}
	serving := make(chan struct{})
	var mu sync.Mutex
	var tail []string
	go func() {
		defer close(s.exited)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			mu.Lock()
			tail = append(tail, sc.Text())
			if len(tail) > 50 {
				tail = tail[1:]
			}
			mu.Unlock()
			var e struct{ Msg, HTTP, XDS, Secure string }
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "vmesh serving" {
				s.httpAddr, s.xdsAddr, s.secureAddr = e.HTTP, e.XDS, e.Secure
				close(serving)
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.exited
	})
	select {
	case <-serving:
	case <-s.exited:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("vmesh serve exited:\n%s", strings.Join(tail, "\n"))
	case <-time.After(3 * time.Minute):
		t.Fatal("vmesh serve did not serve within 3 minutes")
	}
	waitFor(t, 3*time.Minute, "vmesh serve ready (its config loaded)", func() bool {
		resp, err := http.Get("http://" + s.httpAddr + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

func getStatus(httpAddr string, st *sharedstate.Status) error {
	resp, err := http.Get("http://" + httpAddr + "/debug/replicas")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/debug/replicas: %s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(st)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}

func logRun(t *testing.T, r replicaRun) {
	t.Helper()
	t.Logf("RESULT %s: load %s → %s; connect %d streams %s (harness CPU %s); VMs shared %s; proxies per replica in C's /debug/replicas %v; change → all ACKed p50 %s p99 %s max %s (%d/%d)",
		r.Backend, r.LoadBefore, r.LoadAfter, benchReplicas*benchProxiesPerRep, r.Connect.Round(time.Millisecond),
		r.HarnessConnectCPU.Round(10*time.Millisecond), r.VMVisible.Round(time.Millisecond), r.Listed,
		ms(r.ChangeP50), ms(r.ChangeP99), ms(r.ChangeMax), r.ChangeACKs, r.ChangeWants)
	for i := range r.ConnectCPU {
		t.Logf("RESULT %s replica %c: CPU connect %s, steady %s %s, per change %s; RSS %s → %s, peak %s",
			r.Backend, 'A'+i, r.ConnectCPU[i].Round(10*time.Millisecond), benchSteady, r.SteadyCPU[i].Round(10*time.Millisecond),
			r.ChangeCPU[i].Round(time.Millisecond), MiB(r.IdleRSS[i]), MiB(r.RSS[i]), MiB(r.PeakRSS[i]))
	}
}

// median of the values f picks from the runs.
func median[T int64 | time.Duration](runs []replicaRun, f func(replicaRun) T) T {
	vs := make([]T, len(runs))
	for i, r := range runs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

func logMedians(t *testing.T, backend string, runs []replicaRun) {
	t.Helper()
	t.Logf("MEDIAN of %d %s runs: connect %s; VMs shared %s; change → all ACKed p50 %s p99 %s", len(runs), backend,
		median(runs, func(r replicaRun) time.Duration { return r.Connect }).Round(time.Millisecond),
		median(runs, func(r replicaRun) time.Duration { return r.VMVisible }).Round(time.Millisecond),
		ms(median(runs, func(r replicaRun) time.Duration { return r.ChangeP50 })), ms(median(runs, func(r replicaRun) time.Duration { return r.ChangeP99 })))
	for i := range benchReplicas {
		t.Logf("MEDIAN %s replica %c: CPU connect %s, steady %s %s, per change %s; RSS before connect %s, peak %s", backend, 'A'+i,
			median(runs, func(r replicaRun) time.Duration { return r.ConnectCPU[i] }).Round(10*time.Millisecond), benchSteady,
			median(runs, func(r replicaRun) time.Duration { return r.SteadyCPU[i] }).Round(10*time.Millisecond),
			median(runs, func(r replicaRun) time.Duration { return r.ChangeCPU[i] }).Round(time.Millisecond),
			MiB(median(runs, func(r replicaRun) int64 { return r.IdleRSS[i] })), MiB(median(runs, func(r replicaRun) int64 { return r.PeakRSS[i] })))
	}
}
