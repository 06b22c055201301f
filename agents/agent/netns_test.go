package agent_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/agents/certs"
	"github.com/vmesh/vmesh/agents/internal/netnstest"
)

// The hosts of TestVMInNetns: the control plane's and the VM's network
// namespaces, joined by a veth; link-local addresses only, and the VM
// routes the VIP range 240.240/16 to the link (no default route).
const (
	cpAddr = "169.254.30.1"
	vmAddr = "169.254.30.2"
	// cpHost is the control plane's name in the VM's resolver.
	cpHost = "cp.mesh.test"
)

// binDir holds the vmesh binary the tests build; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	if dir := os.Getenv(envoyStandInEnv); dir != "" {
		// Started by an agent under test as its Envoy.
		os.Exit(envoyStandInMain(dir, os.Args[1:]))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// vmeshBinary builds cmd/vmesh once per test binary.
var vmeshBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "vmesh-bin-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "vmesh")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/vmesh")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/vmesh: %v\n%s", err, out)
	}
	return bin, nil
})

// proc is a vmesh process in a namespace, its output kept for failures.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
	// lines gets every output line.
	lines chan string
}

func startProc(t *testing.T, ns *netnstest.NS, dir, name string, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, ns, dir, name, nil, args...)
}

// startProcEnv is startProc with env added to the test's environment.
func startProcEnv(t *testing.T, ns *netnstest.NS, dir, name string, env []string, args ...string) *proc {
	t.Helper()
	bin, err := vmeshBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, done: make(chan struct{}), lines: make(chan string, 1024)}
	p.cmd = ns.Command(context.Background(), bin, args...)
	p.cmd.Dir = dir
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		_ = p.cmd.Wait()
		w.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("--- %s output:\n%s", p.name, p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// stop signals the process (ip netns exec execs it: the pid is vmesh's)
// and waits for it.
func (p *proc) stop(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitLog waits for a JSON log line with msg.
func (p *proc) waitLog(t *testing.T, msg string, d time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l := <-p.lines:
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
				return m
			}
		case <-p.done:
			t.Fatalf("%s exited before logging %q:\n%s", p.name, msg, p.output())
		case <-deadline:
			t.Fatalf("%s did not log %q within %v:\n%s", p.name, msg, d, p.output())
		}
	}
}

const meshConfig = `apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: vms, namespace: default}
spec:
  metadata: {labels: {app: vmapp}}
  template: {serviceAccount: vm, ports: {http: 8080}}
  probe: {periodSeconds: 1, failureThreshold: 1, grpc: {port: 50051}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vmapp, namespace: default}
spec:
  hosts: [vmapp.default.svc.cluster.local]
  ports: [{name: http, number: 8080, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: vmapp}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews.default.svc.cluster.local]
  ports: [{name: http, number: 9080, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.20.0.1}]
`

func dbConfig(addr string) string {
	return `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: default}
spec:
  hosts: [db.example.com]
  addresses: [` + addr + `]
  ports: [{name: tcp, number: 5432, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 10.77.9.9}]
`
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// upstreamResolver is the VM's own DNS server, in the control plane's
// namespace on port 53: www.example.org is 192.0.2.80, cpHost the control
// plane's address, the rest NXDOMAIN.
func upstreamResolver(t *testing.T, ns *netnstest.NS) {
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA && strings.EqualFold(q.Name, "www.example.org.") {
			rr, _ := dns.NewRR("www.example.org. 60 IN A 192.0.2.80")
			m.Answer = append(m.Answer, rr)
		} else if q.Qtype == dns.TypeA && strings.EqualFold(q.Name, cpHost+".") {
			rr, _ := dns.NewRR(cpHost + ". 60 IN A " + cpAddr)
			m.Answer = append(m.Answer, rr)
		} else if strings.EqualFold(q.Name, cpHost+".") {
			// NOERROR, no record (AAAA).
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	udp := &dns.Server{PacketConn: ns.ListenUDP(t, cpAddr+":53"), Handler: h}
	tcp := &dns.Server{Listener: ns.Listen(t, cpAddr+":53"), Handler: h}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	t.Cleanup(func() { _ = udp.Shutdown(); _ = tcp.Shutdown() })
}

// envoyStandIn accepts on l, records each connection's original
// destination and answers one HTTP response, as Envoy would proxy it.
func envoyStandIn(t *testing.T, l net.Listener) <-chan netip.AddrPort {
	ch := make(chan netip.AddrPort, 64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				dst, err := netnstest.OriginalDst(c)
				if err != nil {
					t.Errorf("SO_ORIGINAL_DST: %v", err)
				}
				ch <- dst
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 4096)
				if n, _ := c.Read(buf); n > 0 {
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(dst.String()), dst.String())
				}
			}()
		}
	}()
	return ch
}

// httpIn returns an HTTP client whose connections start in ns.
func httpIn(ns *netnstest.NS) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			return ns.Dial(network, addr, 3*time.Second)
		},
	}}
}

func get(c *http.Client, url string) (int, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func until(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, d, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestVMInNetns runs `vmesh serve` and `vmesh agent` for real, each in a
// network namespace of its own, the VM's with capture and the DNS proxy on:
//
//   - an unmodified client (curl) in the VM calling
//     reviews.default.svc.cluster.local:9080 resolves it through the agent
//     and is captured: the stand-in for Envoy on 15001 reads the original
//     destination, the service's VIP and port;
//   - a connection from the control plane's host to the workload port
//     reaches the stand-in on 15006;
//   - dig in the VM: a mesh host answers its VIP or ServiceEntry address, a
//     non-mesh name the upstream resolver's answer, over UDP and TCP, short
//     names through the search list; an address change is answered within
//     2 s;
//   - 127.0.0.1:15020 is ready, lists every metric the README documents and
//     shows the name table;
//   - the auto-registered WorkloadEntry goes within grace + 1 s of kill -9
//     while an application (with the agent's grpc-bootstrap.json node)
//     stays connected;
//   - the rules stay when the agent stops (SIGTERM) or is killed (kill -9),
//     the agent starts again with them in place, and `vmesh agent
//     cleanup` leaves no vmesh rule.
//
// It runs once per capture backend, nftables and iptables.
func TestVMInNetns(t *testing.T) {
	netnstest.Require(t, "nft", "iptables", "iptables-save", "dig", "curl", "go")
	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) { testVMInNetns(t, mode) })
	}
}

func testVMInNetns(t *testing.T, mode string) {
	if _, err := vmeshBinary(); err != nil {
		t.Fatal(err)
	}
	cp, vm := netnstest.New(t, "cp"), netnstest.New(t, "vm")
	vmDev, _ := netnstest.Link(t, vm, vmAddr, cp, cpAddr)
	netnstest.Run(t, "ip", "-n", vm.Name, "route", "add", "240.240.0.0/16", "dev", vmDev)
	// ip netns exec puts /etc/netns/<ns>/resolv.conf over /etc/resolv.conf
	// for what runs in the VM (curl, dig).
	resolv := "nameserver " + cpAddr + "\nsearch corp.example\noptions ndots:1 timeout:2 attempts:1\n"
	etcDir := filepath.Join("/etc/netns", vm.Name)
	writeFile(t, filepath.Join(etcDir, "resolv.conf"), resolv)
	t.Cleanup(func() {
		os.RemoveAll(etcDir)
		os.Remove("/etc/netns") // only when empty: it may be the system's
	})

	// The control plane.
	tmp := t.TempDir()
	cfgDir, dataDir := filepath.Join(tmp, "config"), filepath.Join(tmp, "data")
	writeFile(t, filepath.Join(cfgDir, "mesh.yaml"), meshConfig)
	writeFile(t, filepath.Join(cfgDir, "db.yaml"), dbConfig("10.77.0.1"))
	const grace = 2 * time.Second
	serve := startProc(t, cp, tmp, "vmesh serve", "serve", "--config-dir", cfgDir, "--data-dir", dataDir,
		"--http-addr", cpAddr+":15014", "--xds-addr", "127.0.0.1:15010", "--secure-addr", cpAddr+":15012", "--secure-host", cpAddr,
		"--registration-grace", grace.String(), "--debounce-quiet", "20ms", "--debounce-max", "200ms", "--log-format", "json")
	serve.waitLog(t, "vmesh serving", 2*time.Minute)
	upstreamResolver(t, cp)
	bundleDir := filepath.Join(tmp, "bundle")
	bundle := startProc(t, cp, tmp, "vmesh vm bundle", "vm", "bundle", "--out", bundleDir, "--data-dir", dataDir, "--server", cpAddr+":15014",
		"--namespace", "default", "--service-account", "vm", "--workload-group", "vms", "--discovery-address", cpAddr+":15012")
	<-bundle.done
	if bundle.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("vm bundle failed:\n%s", bundle.output())
	}

	// The VM: the stand-ins for Envoy, then the agent.
	// The workload: a gRPC health service, probed by the agent as the
	// WorkloadGroup vmesh serves it says (a gRPC probe; no --probe).
	appSrv := grpc.NewServer()
	appHealth := grpchealth.NewServer()
	healthpb.RegisterHealthServer(appSrv, appHealth)
	go func() { _ = appSrv.Serve(vm.Listen(t, "127.0.0.1:50051")) }()
	t.Cleanup(appSrv.Stop)
	outbound := envoyStandIn(t, vm.Listen(t, "0.0.0.0:15001"))
	inbound := envoyStandIn(t, vm.Listen(t, "0.0.0.0:15006"))
	outDir := "out" // relative: the agent makes every generated path absolute
	agentArgs := []string{"agent", "--bundle", bundleDir, "--out", outDir, "--sockets", filepath.Join(tmp, "run"),
		"--workload-name", "vm1", "--ip", vmAddr, "--no-envoy", "--capture", "on", "--capture-mode", mode,
		"--resolv-conf", filepath.Join(etcDir, "resolv.conf"), "--log-format", "json"}
	agentProc := startProc(t, vm, tmp, "vmesh agent", agentArgs...)
	status := httpIn(vm)
	until(t, 30*time.Second, "agent ready", func() (bool, string) {
		code, body, err := get(status, "http://127.0.0.1:15020/healthz/ready")
		return err == nil && code == 200, fmt.Sprint(code, body, err)
	})
	if rules := vm.Ruleset(t); !strings.Contains(rules, ownRules[mode]) {
		t.Fatalf("no %s capture installed:\n%s", mode, rules)
	}

	// The name table arrived: reviews has a VIP.
	var dump struct {
		Table map[string]struct{ IPs []string } `json:"table"`
	}
	until(t, 10*time.Second, "name table", func() (bool, string) {
		_, body, err := get(status, "http://127.0.0.1:15020/debug/ndsz")
		if err != nil || json.Unmarshal([]byte(body), &dump) != nil {
			return false, fmt.Sprint(body, err)
		}
		return len(dump.Table["reviews.default.svc.cluster.local"].IPs) > 0, body
	})
	vip := dump.Table["reviews.default.svc.cluster.local"].IPs[0]
	if !strings.HasPrefix(vip, "240.240.") {
		t.Fatalf("reviews VIP %s, want one in 240.240.0.0/16", vip)
	}

	// curl, unmodified, in the VM.
	out := vm.Output(t, "curl", "-sS", "--max-time", "5", "http://reviews.default.svc.cluster.local:9080/")
	select {
	case dst := <-outbound:
		if dst.String() != vip+":9080" {
			t.Fatalf("stand-in for Envoy saw original destination %v, want %s:9080", dst, vip)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("curl was not captured to 15001 (curl said %q)", out)
	}
	if strings.TrimSpace(out) != vip+":9080" {
		t.Errorf("curl got %q", out)
	}

	// Inbound to the workload port, from the control plane's host.
	c, err := cp.Dial("tcp", vmAddr+":8080", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case dst := <-inbound:
		if dst.String() != vmAddr+":8080" {
			t.Fatalf("inbound stand-in saw %v, want %s:8080", dst, vmAddr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("inbound connection not captured to 15006")
	}

	// dig, UDP and TCP.
	dig := func(args ...string) []string {
		out := vm.Output(t, "dig", append([]string{"+short", "+time=2", "+tries=1"}, args...)...)
		return strings.Fields(out)
	}
	for _, proto := range []string{"+notcp", "+tcp"} {
		if got := dig(proto, "reviews.default.svc.cluster.local"); !slices.Equal(got, []string{vip}) {
			t.Errorf("dig %s reviews.default.svc.cluster.local = %v, want %s", proto, got, vip)
		}
		if got := dig(proto, "db.example.com"); !slices.Equal(got, []string{"10.77.0.1"}) {
			t.Errorf("dig %s db.example.com = %v, want 10.77.0.1", proto, got)
		}
		if got := dig(proto, "www.example.org"); !slices.Equal(got, []string{"192.0.2.80"}) {
			t.Errorf("dig %s www.example.org = %v, want the upstream's 192.0.2.80", proto, got)
		}
		if got := dig(proto, "+search", "reviews"); len(got) == 0 || got[len(got)-1] != vip {
			t.Errorf("dig %s +search reviews = %v, want ... %s", proto, got, vip)
		}
	}

	// A change of address: answered within 2 s.
	writeFile(t, filepath.Join(cfgDir, "db.yaml"), dbConfig("10.77.0.2"))
	changed := time.Now()
	until(t, 2*time.Second, "db.example.com's new address", func() (bool, string) {
		got := dig("db.example.com")
		return slices.Equal(got, []string{"10.77.0.2"}), fmt.Sprint(got)
	})
	t.Logf("address change answered after %v", time.Since(changed).Round(time.Millisecond))

	// The agent's port lists every documented metric.
	metrics := vm.Output(t, "curl", "-fsS", "--max-time", "5", "http://127.0.0.1:15020/stats/prometheus")
	for _, m := range documentedMetrics(t) {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m) + `(_bucket|_sum|_count)?[{ ]`).MatchString(metrics) {
			t.Errorf("/stats/prometheus lacks documented metric %s", m)
		}
	}

	// Generated files name absolute paths though --out was relative.
	gb, err := os.ReadFile(filepath.Join(tmp, outDir, "grpc-bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gb), `"`+filepath.Join(tmp, outDir, "cert-chain.pem")+`"`) || strings.Contains(string(gb), "AUTO_REGISTER_GROUP") {
		t.Errorf("grpc-bootstrap.json: want absolute paths and no AUTO_REGISTER_GROUP:\n%s", gb)
	}

	// Registered; an application stays connected with the bootstrap's node.
	entry := "vms-" + vmAddr
	cpHTTP := httpIn(cp)
	registered := func() (bool, string) {
		_, body, err := get(cpHTTP, "http://"+cpAddr+":15014/debug/config")
		return err == nil && strings.Contains(body, entry), fmt.Sprint(err)
	}
	until(t, 10*time.Second, "WorkloadEntry "+entry, registered)
	app, closeApp := connectApp(t, vm, filepath.Join(tmp, outDir), gb)
	defer closeApp()
	// The probe passes: the VM is the application's endpoint of vmapp; a
	// failing gRPC probe removes it within 5 s.
	waitEndpoints := func(d time.Duration, want []string) {
		t.Helper()
		deadline := time.Now().Add(d)
		var last []string
		for time.Now().Before(deadline) {
			if eps, ok := app.endpoints(time.Until(deadline)); ok {
				if last = eps; slices.Equal(eps, want) {
					return
				}
			}
		}
		t.Fatalf("vmapp endpoints %v, want %v within %v", last, want, d)
	}
	waitEndpoints(10*time.Second, []string{vmAddr})
	appHealth.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	failed := time.Now()
	waitEndpoints(5*time.Second, nil)
	t.Logf("failing gRPC probe removed the endpoint after %v", time.Since(failed).Round(time.Millisecond))
	appHealth.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	waitEndpoints(5*time.Second, []string{vmAddr})

	// SIGTERM: the rules stay (captured traffic fails while the agent is
	// down); the next start replaces them in place.
	agentProc.stop(syscall.SIGTERM)
	if rules := vm.Ruleset(t); !strings.Contains(rules, ownRules[mode]) {
		t.Fatalf("after SIGTERM the rules should still be there:\n%s", rules)
	}

	// kill -9: the rules stay until `vmesh agent cleanup`; the entry goes
	// within grace + 1 s although the application is still connected.
	agentProc = startProc(t, vm, tmp, "vmesh agent (2)", agentArgs...)
	until(t, 30*time.Second, "agent ready again", func() (bool, string) {
		code, body, err := get(status, "http://127.0.0.1:15020/healthz/ready")
		return err == nil && code == 200, fmt.Sprint(code, body, err)
	})
	until(t, 10*time.Second, "registered again", registered)
	agentProc.stop(syscall.SIGKILL)
	killed := time.Now()
	if rules := vm.Ruleset(t); !strings.Contains(rules, ownRules[mode]) {
		t.Fatalf("after kill -9 the rules should still be there:\n%s", rules)
	}
	until(t, grace+time.Second+500*time.Millisecond, "entry removed after kill -9", func() (bool, string) {
		ok, s := registered()
		return !ok, s
	})
	t.Logf("entry gone %v after kill -9 (grace %v)", time.Since(killed).Round(time.Millisecond), grace)
	cleanup := startProc(t, vm, tmp, "vmesh agent cleanup", "agent", "cleanup")
	<-cleanup.done
	if cleanup.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("vmesh agent cleanup failed:\n%s", cleanup.output())
	}
	assertNoRules(t, vm)
}

// appStream is a proxyless application's ADS stream.
type appStream struct {
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	resps  chan *discoveryv3.DiscoveryResponse
}

// endpoints returns the addresses of the latest EDS answer for cluster,
// waiting up to d for one.
func (a *appStream) endpoints(d time.Duration) ([]string, bool) {
	select {
	case r := <-a.resps:
		var out []string
		for _, res := range r.GetResources() {
			cla := &endpointv3.ClusterLoadAssignment{}
			if res.UnmarshalTo(cla) != nil {
				continue
			}
			for _, l := range cla.GetEndpoints() {
				for _, e := range l.GetLbEndpoints() {
					out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
				}
			}
		}
		_ = a.stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{vmappCluster},
			VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
		return out, true
	case <-time.After(d):
		return nil, false
	}
}

const vmappCluster = "outbound|8080||vmapp.default.svc.cluster.local"

// connectApp opens an application's xDS stream from the VM with the node
// of the agent's grpc-bootstrap.json and its certificate, as a proxyless
// application would, watching the endpoints of the VM's own service, and
// keeps it open until the returned func is called.
func connectApp(t *testing.T, vm *netnstest.NS, certDir string, bootstrapJSON []byte) (*appStream, func()) {
	t.Helper()
	var b struct {
		Node struct {
			ID       string         `json:"id"`
			Cluster  string         `json:"cluster"`
			Metadata map[string]any `json:"metadata"`
		} `json:"node"`
	}
	if err := json.Unmarshal(bootstrapJSON, &b); err != nil {
		t.Fatal(err)
	}
	md, err := structpb.NewStruct(b.Node.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(certDir, certs.CertChainFile), filepath.Join(certDir, certs.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	rootsPEM, err := os.ReadFile(filepath.Join(certDir, certs.RootCertFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootsPEM)
	cc, err := grpc.NewClient(cpAddr+":15012",
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots})),
		grpc.WithContextDialer(func(_ context.Context, addr string) (net.Conn, error) { return vm.Dial("tcp", addr, 3*time.Second) }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: b.Node.ID, Cluster: b.Node.Cluster, Metadata: md}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{vmappCluster}}); err != nil {
		t.Fatal(err)
	}
	a := &appStream{stream: stream, resps: make(chan *discoveryv3.DiscoveryResponse, 64)}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			a.resps <- r
		}
	}()
	return a, func() { cancel(); cc.Close() }
}

// ownRules is what the ruleset shows of vmesh's capture, by backend.
var ownRules = map[string]string{"nftables": "table inet vmesh", "iptables": "-A OUTPUT -j VMESH_OUTPUT"}

func assertNoRules(t *testing.T, ns *netnstest.NS) {
	t.Helper()
	rules := ns.Ruleset(t)
	if strings.Contains(strings.ToLower(rules), "vmesh") {
		t.Fatalf("vmesh rules left:\n%s", rules)
	}
}

// documentedMetrics returns the metric names in README.md's Metrics
// section.
func documentedMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "## Metrics")
	if !ok {
		t.Fatal("README.md has no Metrics section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	names := regexp.MustCompile("`(vmesh_[a-z_]+)").FindAllStringSubmatch(sec, -1)
	var out []string
	for _, n := range names {
		out = append(out, n[1])
	}
	if len(out) < 16 {
		t.Fatalf("README.md documents only %d metrics", len(out))
	}
	return out
}
