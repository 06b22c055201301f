package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/xds"
)

// Options configure one harness run.
type Options struct {
	Size Size `json:"size"`
	// Proxies is the number of simulated proxies (ADS streams).
	Proxies int `json:"proxies"`
	// DeltaFraction and EnvoyFraction are the shares of proxies using the
	// delta protocol and Envoy-like subscriptions (the rest: state of the
	// world, proxyless-gRPC-like).
	DeltaFraction float64 `json:"deltaFraction"`
	EnvoyFraction float64 `json:"envoyFraction"`
	// ListenersPerProxy is how many services a proxyless proxy dials
	// (always including services 0 and 1, which the changes touch).
	ListenersPerProxy int `json:"listenersPerProxy"`
	// StreamsPerConn puts that many proxies' streams on one connection;
	// 1 gives every proxy its own connection, like real proxies.
	StreamsPerConn int `json:"streamsPerConn"`
	// Changes is how many changes of each kind to measure.
	Changes int `json:"changes"`
	// Burst, when above 0, adds a burst of that many endpoint changes
	// made evenly over one second, after the measured changes (BurstReport).
	Burst int `json:"burst,omitempty"`
	// Servers lists the servers to measure, in order: ServerVmesh,
	// ServerBaseline (go-control-plane's SnapshotCache), ServerLinear (its
	// LinearCache + MuxCache), ServerIstio (Istio's DiscoveryServer, run
	// from IstioServer).
	Servers []string `json:"servers"`
	// IstioServer is the path of the tools/istio-load-server binary, for
	// ServerIstio.
	IstioServer string `json:"istioServer,omitempty"`
	// Kinds are the kinds of change measured, in order (ChangeRouting,
	// ChangeEndpoint); empty means both.
	Kinds []string `json:"kinds,omitempty"`
	// DebounceQuiet is vmesh's xDS push debounce.
	DebounceQuiet time.Duration `json:"debounceQuiet"`
	// ChangeTimeout bounds the wait for one change's ACKs, ConnectTimeout
	// the wait for all proxies to sync.
	ChangeTimeout  time.Duration `json:"changeTimeout"`
	ConnectTimeout time.Duration `json:"connectTimeout"`
	// ConnectParallel bounds how many proxies connect at once.
	ConnectParallel int `json:"connectParallel"`
	// Pprof serves /debug/pprof on vmesh's HTTP port.
	Pprof bool `json:"pprof"`
	// Source is where the vmesh child reads the services and endpoints
	// (SourceDir, SourceGit, SourceZooKeeper); empty means SourceDir. The
	// baseline is always fed by the harness.
	Source Source `json:"source"`
	// ZooKeeper is host:port of a running ZooKeeper, for SourceZooKeeper.
	ZooKeeper string `json:"zookeeper,omitempty"`
	// Shape is what the Envoy-like proxies are (ShapeMixed when empty:
	// proxyless nodes subscribing like Envoy; or Envoy sidecars, one VM
	// each or sharing one IP).
	Shape Shape `json:"shape,omitempty"`

	// ConnsPerSourceAddr is how many connections the harness opens from
	// one loopback source address before it moves to the next (127.0.0.1,
	// 127.0.0.2, ...); 0 means connsPerSourceAddr, below the kernel's
	// ephemeral port range.
	ConnsPerSourceAddr int `json:"-"`
	// WorkDir holds the generated config; empty means a new temp dir.
	WorkDir string `json:"-"`
	// Spawn starts server children; nil means SelfSpawner.
	Spawn Spawner `json:"-"`
	// Progress receives progress lines; nil discards them.
	Progress io.Writer `json:"-"`
	// Logger receives errors of individual proxies; nil means slog.Default().
	Logger *slog.Logger `json:"-"`
	// OnServer, when set, is called once a server's proxies are synced,
	// before the changes (e.g. to start a profile); the function it returns
	// is called after the changes, while the server still runs.
	OnServer func(ctx context.Context, c *Child) (done func()) `json:"-"`
	// OnConnect, when set, is called as a server's proxies start to
	// connect (e.g. to profile the connection storm); the function it
	// returns is called once they are synced.
	OnConnect func(ctx context.Context, c *Child) (done func()) `json:"-"`
}

// MaxProxies bounds a run's simulated proxies: each holds a loopback
// connection (StreamsPerConn of them share one), and the harness raises its
// own open-file limit for them.
const MaxProxies = 100000

// DefaultOptions returns the scale: 1,000 services × 10 endpoints,
// 100 VirtualServices, 1,000 proxies, vmesh then the baseline.
func DefaultOptions() Options {
	return Options{
		Size:          Size{Services: 1000, Endpoints: 10, VirtualServices: 100, Namespaces: 10},
		Proxies:       1000,
		DeltaFraction: 0.5, EnvoyFraction: 0.5, ListenersPerProxy: 5, StreamsPerConn: 1,
		Changes: 5, Servers: []string{ServerVmesh, ServerBaseline}, Source: SourceDir,
		DebounceQuiet: 100 * time.Millisecond,
		ChangeTimeout: 60 * time.Second, ConnectTimeout: 15 * time.Minute, ConnectParallel: 256,
	}
}

// Validate checks the options.
func (o Options) Validate() error {
	if err := o.Size.Validate(); err != nil {
		return err
	}
	switch {
	case o.Proxies < 1 || o.Proxies > MaxProxies:
		return fmt.Errorf("loadgen: proxies must be within 1..%d, got %d", MaxProxies, o.Proxies)
	case o.DeltaFraction < 0 || o.DeltaFraction > 1 || o.EnvoyFraction < 0 || o.EnvoyFraction > 1:
		return fmt.Errorf("loadgen: fractions must be within 0..1")
	case o.ListenersPerProxy < 2:
		return fmt.Errorf("loadgen: a proxyless proxy dials at least 2 services")
	case o.StreamsPerConn < 1 || o.Changes < 0 || o.ConnectParallel < 1 || o.Burst < 0:
		return fmt.Errorf("loadgen: streams per connection and connect parallelism must be >= 1, changes >= 0")
	case slices.ContainsFunc(o.Kinds, func(k string) bool { return k != ChangeRouting && k != ChangeEndpoint }):
		return fmt.Errorf("loadgen: change kinds are %s and %s, not %v", ChangeRouting, ChangeEndpoint, o.Kinds)
	case len(o.Servers) == 0:
		return fmt.Errorf("loadgen: no server to measure")
	case o.Source != "" && o.Source != SourceDir && o.Source != SourceGit && o.Source != SourceZooKeeper:
		return fmt.Errorf("loadgen: unknown source %q (want %s, %s or %s)", o.Source, SourceDir, SourceGit, SourceZooKeeper)
	case o.Burst > 0 && o.Source != "" && o.Source != SourceDir:
		return fmt.Errorf("loadgen: a burst is made of file writes: it needs source %s", SourceDir)
	case o.Source == SourceZooKeeper && o.ZooKeeper == "":
		return fmt.Errorf("loadgen: source %s needs the host:port of a running ZooKeeper (-zookeeper)", SourceZooKeeper)
	}
	if err := o.Shape.validate(); err != nil {
		return err
	}
	for _, s := range o.Servers {
		switch s {
		case ServerVmesh, ServerBaseline, ServerLinear:
		case ServerIstio:
			if o.IstioServer == "" {
				return fmt.Errorf("loadgen: server %s needs the path of the tools/istio-load-server binary (-istio-server)", ServerIstio)
			}
		default:
			return fmt.Errorf("loadgen: unknown server %q (want %s, %s, %s or %s)", s, ServerVmesh, ServerBaseline, ServerLinear, ServerIstio)
		}
	}
	return nil
}

// Report is the result of a run.
type Report struct {
	Options Options        `json:"options"`
	Servers []ServerReport `json:"servers"`
}

// ServerReport is what one server did under load.
type ServerReport struct {
	Server string `json:"server"`
	// Startup is from process start to serving the initial config.
	Startup time.Duration `json:"startup"`
	// Connect is the phase in which all proxies connect and sync.
	Connect Phase `json:"connect"`
	Proxies int   `json:"proxies"`
	// ResourcesPerProxy is the mean number of resources a proxy holds.
	ResourcesPerProxy float64 `json:"resourcesPerProxy"`
	// IdleRSS is measured before, ConnectedRSS after the proxies connect.
	IdleRSS      int64 `json:"idleRSS"`
	ConnectedRSS int64 `json:"connectedRSS"`
	RSSPerProxy  int64 `json:"rssPerProxy"`
	PeakRSS      int64 `json:"peakRSS"`
	// CPU is the server's CPU time over the whole run.
	CPU     time.Duration  `json:"cpu"`
	Changes []ChangeReport `json:"changes"`
	// Burst is the burst of endpoint changes (Options.Burst), if any.
	Burst  *BurstReport `json:"burst,omitempty"`
	Errors []string     `json:"errors,omitempty"`
}

// BurstReport is what a burst of endpoint changes cost: Changes writes
// (alternating between services 0 and 1) made evenly over Span, measured
// from the first write until the server is idle again.
type BurstReport struct {
	Changes int           `json:"changes"`
	Span    time.Duration `json:"span"`
	// CPUPerChange and BytesPerChange are the server's CPU and the bytes
	// the proxies received over the burst, divided by Changes: against a
	// ChangeReport's, what batching the burst saved. For go-control-plane
	// and Istio, a change includes building and applying its snapshot or
	// objects (outside the measured part of a single change).
	CPUPerChange   time.Duration `json:"cpuPerChange"`
	BytesPerChange int64         `json:"bytesPerChange"`
}

// Phase is the cost of a stretch of the run.
type Phase struct {
	Duration time.Duration `json:"duration"`
	CPU      time.Duration `json:"cpu"`
	Bytes    int64         `json:"bytes"`
	// HarnessCPU is what the harness itself (the simulated proxies) used:
	// it shares the machine with the server.
	HarnessCPU time.Duration `json:"harnessCPU"`
}

// Change kinds.
const (
	ChangeRouting  = "virtualservice"
	ChangeEndpoint = "endpoint"
)

// ChangeReport aggregates the changes of one kind.
type ChangeReport struct {
	Kind    string `json:"kind"`
	Changes int    `json:"changes"`
	// Expected is how many proxy ACKs the changes called for (the proxies
	// holding a changed resource, summed over changes); Missing how many
	// did not arrive in time.
	Expected int     `json:"expected"`
	Missing  int     `json:"missing"`
	Latency  Latency `json:"latency"`
	// Debounce is the part of the latency that is deliberate waiting, for
	// vmesh: the push debounce, plus the directory source's for a change
	// that is a file write (not for a git commit or a ZooKeeper write).
	Debounce time.Duration `json:"debounce"`
	// ApplyPerChange is the mean time making the change itself took (part
	// of the latency): a file write; a git commit, push and webhook call; a
	// ZooKeeper multi; the baseline's SetSnapshot call.
	ApplyPerChange time.Duration `json:"applyPerChange"`
	// BytesPerChange and CPUPerChange are means over the changes.
	BytesPerChange int64         `json:"bytesPerChange"`
	CPUPerChange   time.Duration `json:"cpuPerChange"`
	// HarnessCPUPerChange is the simulated proxies' CPU per change.
	HarnessCPUPerChange time.Duration `json:"harnessCPUPerChange"`
}

// Run generates the config and measures each server in turn.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Shape == ShapeRouter {
		o.Size.Gateway = true
	}
	if o.Spawn == nil {
		o.Spawn = SelfSpawner
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Source == "" {
		o.Source = SourceDir
	}
	work := o.WorkDir
	if work == "" {
		d, err := os.MkdirTemp("", "vmesh-load-")
		if err != nil {
			return nil, fmt.Errorf("loadgen: %w", err)
		}
		defer os.RemoveAll(d)
		work = d
	}
	rep := &Report{Options: o}
	for _, kind := range o.Servers {
		sr, err := runServer(ctx, o, kind, filepath.Join(work, kind))
		if err != nil {
			return rep, err
		}
		rep.Servers = append(rep.Servers, *sr)
	}
	return rep, nil
}

// Specs returns the proxies of a run: spread over the namespaces, a quarter
// labelled tier=batch (scoped by a Sidecar), mixed protocols and styles.
func Specs(o Options) []ProxySpec {
	specs := make([]ProxySpec, o.Proxies)
	for i := range specs {
		tier := "web"
		if i%4 == 3 {
			tier = "batch"
		}
		s := ProxySpec{
			ID:        fmt.Sprintf("proxy-%05d", i),
			Namespace: fmt.Sprintf("ns-%d", i%o.Size.Namespaces),
			Labels:    map[string]string{"app": fmt.Sprintf("client-%d", i%50), "tier": tier},
			Delta:     spread(i, 0.6180339887498949) < o.DeltaFraction,
			Style:     StyleGRPC,
		}
		if spread(i, 0.41421356237309515) < o.EnvoyFraction {
			s.Style = StyleEnvoy
			o.Shape.applyShape(o.Size, &s, i)
		} else {
			seen := map[int]bool{0: true, 1: true}
			s.Listeners = []string{o.Source.RouteName(0), o.Source.RouteName(1)}
			for k := 0; len(s.Listeners) < min(o.ListenersPerProxy, o.Size.Services) && k < 10*o.ListenersPerProxy; k++ {
				svc := (i*7919 + k*104729) % o.Size.Services
				if !seen[svc] {
					seen[svc] = true
					s.Listeners = append(s.Listeners, o.Source.RouteName(svc))
				}
			}
		}
		specs[i] = s
	}
	return specs
}

// spread maps i to [0,1) evenly for every prefix of 0, 1, 2, ...
func spread(i int, alpha float64) float64 { _, f := math.Modf(float64(i+1) * alpha); return f }

// countingConn counts the bytes a proxy receives from the server.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func runServer(ctx context.Context, o Options, kind, dir string) (*ServerReport, error) {
	sr := &ServerReport{Server: kind, Proxies: o.Proxies}
	cfgDir := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	extra := []string{"-debounce-quiet", o.DebounceQuiet.String()}
	if o.Pprof {
		extra = append(extra, "-pprof")
	}
	cfg := changer{server: kind, src: o.Source, dir: cfgDir, size: o.Size, gens: map[string]int{}, shape: o.Shape}
	if kind == ServerVmesh || kind == ServerIstio {
		cfg.quiet = o.DebounceQuiet // Istio's push debounce is set to vmesh's
	}
	s0 := time.Now()
	switch {
	case kind != ServerVmesh || o.Source == SourceDir:
		// The baseline is fed by the harness whatever vmesh's source: the
		// same model, as files with the source's host names.
		if err := Write(cfgDir, o.Size, o.Source); err != nil {
			return nil, err
		}
	case o.Source == SourceGit:
		repo, err := newGitRepo(ctx, filepath.Join(dir, "git"))
		if err != nil {
			return nil, err
		}
		if err := Write(repo.Work, o.Size, o.Source); err != nil {
			return nil, err
		}
		if err := repo.CommitAll(ctx, "vmesh-load: generated config"); err != nil {
			return nil, err
		}
		cfg.git, cfg.dir = repo, repo.Work
		extra = append(extra, "-git-repo", repo.Bare, "-git-secret", repo.Secret)
		fmt.Fprintf(o.Progress, "%s: config committed to %s in %s\n", kind, repo.Bare, time.Since(s0).Round(time.Millisecond))
	case o.Source == SourceZooKeeper:
		reg, err := dialZooKeeper(ctx, o.ZooKeeper, o.Size, o.Logger)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := reg.Close(); err != nil {
				o.Logger.Error("cleaning up the harness's ZooKeeper nodes", "root", reg.base, "error", err)
			}
		}()
		if err := WriteRoutingConfig(cfgDir, o.Size, o.Source); err != nil {
			return nil, err
		}
		if err := reg.Register(ctx); err != nil {
			return nil, err
		}
		specs, err := json.Marshal(reg.Specs())
		if err != nil {
			return nil, fmt.Errorf("loadgen: %w", err)
		}
		cfg.zk = reg
		extra = append(extra, "-registries", string(specs), "-expect-workloads", strconv.Itoa(o.Size.Services*o.Size.Endpoints))
		fmt.Fprintf(o.Progress, "%s: registered %d Dubbo providers under %s in ZooKeeper %s in %s\n",
			kind, o.Size.Services*o.Size.Endpoints, reg.base, o.ZooKeeper, time.Since(s0).Round(time.Millisecond))
	}
	t0 := time.Now()
	spawn := o.Spawn
	if kind == ServerIstio {
		spawn = func(args []string) *exec.Cmd { return exec.Command(o.IstioServer, args...) }
	}
	child, err := StartChild(ctx, spawn, kind, cfgDir, extra...)
	if err != nil {
		return nil, err
	}
	defer child.Stop()
	sr.Startup = time.Since(t0)
	cfg.child = child
	idle, err := child.Stats()
	if err != nil {
		return nil, err
	}
	sr.IdleRSS = idle.RSS
	fmt.Fprintf(o.Progress, "%s: serving %d services on %s after %s (rss %s)\n", kind, o.Size.Services, child.Addrs.XDS, sr.Startup.Round(time.Millisecond), MiB(idle.RSS))

	// Connect the proxies.
	perAddr := o.ConnsPerSourceAddr
	if perAddr <= 0 {
		perAddr = connsPerSourceAddr
	}
	var received, dialled atomic.Int64
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		// Loopback only; past connsPerSourceAddr connections, from the
		// next loopback address (the server listens on 127.0.0.1).
		k := dialled.Add(1) - 1
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+k/int64(perAddr)))}}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, n: &received}, nil
	}
	shared := NewShared()
	specs := Specs(o)
	proxies := make([]*Proxy, len(specs))
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	pctx, stopProxies := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopProxies(); wg.Wait() }()
	var errMu sync.Mutex
	var failed int
	var connectDone func()
	if o.OnConnect != nil {
		connectDone = o.OnConnect(ctx, child)
	}
	connectStart, harness0 := time.Now(), SelfCPU()
	sem := make(chan struct{}, o.ConnectParallel)
	var synced atomic.Int64
	progressDone, stopProgress := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-stopProgress:
				return
			case <-t.C:
			}
			st, _ := child.Stats()
			n := synced.Load()
			fmt.Fprintf(o.Progress, "%s: %d/%d proxies synced, %s received, server rss %s, cpu %s\n",
				kind, n, len(specs), MiB(received.Load()), MiB(st.RSS), st.CPU.Round(10*time.Millisecond))
			if int(n) == len(specs) {
				return
			}
		}
	}()
	for i, spec := range specs {
		if i%o.StreamsPerConn == 0 {
			opts := []grpc.DialOption{
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithContextDialer(dial),
				grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.ForceCodecV2(newClientCodec())),
			}
			if spec.Style == StyleEnvoy {
				opts = append(opts, envoyWindows()...)
			}
			cc, err := grpc.NewClient("passthrough:///"+child.Addrs.XDS, opts...)
			if err != nil {
				return nil, fmt.Errorf("loadgen: %w", err)
			}
			conns = append(conns, cc)
		}
		cc := conns[len(conns)-1]
		p := NewProxy(spec, shared)
		proxies[i] = p
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := p.Run(pctx, cc); err != nil {
				errMu.Lock()
				failed++
				if failed <= 5 {
					sr.Errors = append(sr.Errors, err.Error())
				}
				errMu.Unlock()
				o.Logger.Error("proxy failed", "proxy", spec.ID, "error", err)
			}
		}()
		go func() {
			defer wg.Done()
			select {
			case <-p.Synced():
				synced.Add(1)
			case <-pctx.Done():
			}
			<-sem
		}()
	}
	deadline := time.NewTimer(o.ConnectTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for int(synced.Load()) < len(specs) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, fmt.Errorf("loadgen: %s: only %d of %d proxies synced after %s; errors: %v", kind, synced.Load(), len(specs), o.ConnectTimeout, sr.Errors)
		case <-tick.C:
		}
	}
	connectTook := time.Since(connectStart)
	if connectDone != nil {
		connectDone()
	}
	close(stopProgress)
	<-progressDone
	connected, err := child.Stats()
	if err != nil {
		return nil, err
	}
	sr.Connect = Phase{Duration: connectTook, CPU: connected.CPU - idle.CPU, Bytes: received.Load(), HarnessCPU: SelfCPU() - harness0}
	sr.ConnectedRSS = connected.RSS
	sr.RSSPerProxy = (connected.RSS - idle.RSS) / int64(len(specs))
	held := 0
	for _, p := range proxies {
		for _, t := range proxyTypes {
			held += p.Held(t)
		}
	}
	sr.ResourcesPerProxy = float64(held) / float64(len(proxies))
	fmt.Fprintf(o.Progress, "%s: %d proxies synced in %s, %.0f resources each, server rss %s (%s/proxy)\n",
		kind, len(specs), sr.Connect.Duration.Round(time.Millisecond), sr.ResourcesPerProxy, MiB(connected.RSS), Bytes(sr.RSSPerProxy))
	// Changes: VirtualServices, then endpoints, on services 0 and 1, which
	// every proxy can dial.
	kinds := o.Kinds
	if len(kinds) == 0 {
		kinds = []string{ChangeRouting, ChangeEndpoint}
	}
	// Measure the steady state: let the connection storm's work (the
	// server's and the harness's own garbage) finish, then make one
	// unmeasured change of each kind.
	took, err := settle(ctx, child)
	if err != nil {
		return nil, err
	}
	for _, ck := range kinds {
		if _, err := cfg.measure(ctx, ck, 0, proxies, &received, o.ChangeTimeout); err != nil {
			return nil, fmt.Errorf("loadgen: warm-up %s change: %w", ck, err)
		}
	}
	fmt.Fprintf(o.Progress, "%s: settled in %s, then one warm-up change of each kind\n", kind, took.Round(time.Millisecond))
	if o.OnServer != nil {
		if done := o.OnServer(ctx, child); done != nil {
			defer done()
		}
	}
	for _, ck := range kinds {
		cr := ChangeReport{Kind: ck, Changes: o.Changes, Debounce: cfg.Debounce(ck)}
		var all []time.Duration
		var bytes int64
		var cpu, hcpu, apply time.Duration
		for n := range o.Changes {
			svc := n % 2
			h0 := SelfCPU()
			m, err := cfg.measure(ctx, ck, svc, proxies, &received, o.ChangeTimeout)
			hc := SelfCPU() - h0
			hcpu += hc
			if err != nil {
				return nil, err
			}
			cr.Expected += m.want
			cr.Missing += m.want - len(m.lat)
			all = append(all, m.lat...)
			bytes += m.bytes
			cpu += m.cpu
			apply += m.apply
			l := Summarize(m.lat)
			fmt.Fprintf(o.Progress, "%s: %s change %d (svc %d): %d/%d ACKs, p50 %s p99 %s max %s (change made in %s), %s sent, server cpu %s, harness cpu %s\n",
				kind, ck, n+1, svc, len(m.lat), m.want, ms(l.P50), ms(l.P99), ms(l.Max), ms(m.apply), Bytes(m.bytes), m.cpu, hc.Round(time.Millisecond))
		}
		cr.Latency = Summarize(all)
		if o.Changes > 0 {
			cr.BytesPerChange = bytes / int64(o.Changes)
			cr.CPUPerChange = cpu / time.Duration(o.Changes)
			cr.HarnessCPUPerChange = hcpu / time.Duration(o.Changes)
			cr.ApplyPerChange = apply / time.Duration(o.Changes)
		}
		sr.Changes = append(sr.Changes, cr)
	}
	if o.Burst > 0 {
		br, err := cfg.burst(ctx, o.Burst, time.Second, &received)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Progress, "%s: burst of %d endpoint changes in %s: server cpu %s per change, %s sent per change\n",
			kind, br.Changes, br.Span, br.CPUPerChange, Bytes(br.BytesPerChange))
		sr.Burst = br
	}
	final, err := child.Stats()
	if err != nil {
		return nil, err
	}
	sr.PeakRSS, sr.CPU = final.PeakRSS, final.CPU
	return sr, nil
}

// burst makes n endpoint changes evenly over span (services 0 and 1 in
// turn), then waits until the server is idle, and reports the server's
// CPU and the bytes sent per change.
func (c *changer) burst(ctx context.Context, n int, span time.Duration, received *atomic.Int64) (*BurstReport, error) {
	if _, err := settle(ctx, c.child); err != nil {
		return nil, err
	}
	before, err := c.child.Stats()
	if err != nil {
		return nil, err
	}
	bytes0 := received.Load()
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(span * time.Duration(i) / time.Duration(n))); wait > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(wait):
			}
		}
		svc := i % 2
		c.gens[ChangeEndpoint+"/"+strconv.Itoa(svc)]++
		if err := WriteEndpoints(c.dir, c.size, c.src, svc, c.gens[ChangeEndpoint+"/"+strconv.Itoa(svc)]); err != nil {
			return nil, err
		}
		if c.server != ServerVmesh {
			if err := c.child.Control(ctx, "prepare"); err != nil {
				return nil, err
			}
			if err := c.child.Control(ctx, "apply"); err != nil {
				return nil, err
			}
		}
	}
	// Idle again: every push the burst caused is done.
	if _, err := settle(ctx, c.child); err != nil {
		return nil, err
	}
	after, err := c.child.Stats()
	if err != nil {
		return nil, err
	}
	return &BurstReport{Changes: n, Span: span, CPUPerChange: (after.CPU - before.CPU) / time.Duration(n),
		BytesPerChange: (received.Load() - bytes0) / int64(n)}, nil
}

// settle collects the harness's garbage and waits, at most 30 s, until the
// server child has used under 5 % of a core for half a second. It returns
// how long it waited.
func settle(ctx context.Context, child *Child) (time.Duration, error) {
	start := time.Now()
	runtime.GC()
	prev, err := child.Stats()
	if err != nil {
		return 0, err
	}
	for time.Since(start) < 30*time.Second {
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		now, err := child.Stats()
		if err != nil {
			return 0, err
		}
		if now.CPU-prev.CPU < 25*time.Millisecond {
			break
		}
		prev = now
	}
	return time.Since(start), nil
}

// DirSettle is how long vmesh's directory source lets a file's events
// settle before reading it (filestore.SettleQuiet).
const DirSettle = filestore.SettleQuiet

// changer makes changes to one server's config and measures them.
type changer struct {
	server string
	src    Source
	// dir holds the files the changes edit: the watched directory, the
	// git working clone, or the baseline's directory.
	dir   string
	size  Size
	child *Child
	gens  map[string]int
	// quiet is the push debounce of vmesh and Istio (0 for go-control-plane).
	quiet time.Duration
	git   *gitRepo    // SourceGit (vmesh)
	zk    *zkRegistry // SourceZooKeeper (vmesh)
	shape Shape
}

// Debounce returns the deliberate waiting in a change of kind: for Istio
// its push debounce (set to vmesh's); for vmesh, whose pushes are
// leading-edge (a change after a quiet period is built at once, and the
// harness spaces its changes), only the directory source's settle window
// when the change reaches vmesh as a file write (every change with
// SourceDir, the VirtualService changes with SourceZooKeeper; a git commit
// arrives by webhook and a ZooKeeper write by watch, neither waits).
func (c *changer) Debounce(kind string) time.Duration {
	switch {
	case c.server == ServerIstio:
		return c.quiet // it is handed the objects: its push debounce only
	case c.server != ServerVmesh:
		return 0
	case c.src == SourceGit, c.src == SourceZooKeeper && kind == ChangeEndpoint:
		return 0
	}
	return DirSettle
}

// measured is one change's outcome.
type measured struct {
	// lat are the ACK latencies that arrived; want how many were expected.
	lat  []time.Duration
	want int
	// bytes the proxies received and server CPU used from the change until
	// shortly after the last ACK.
	bytes int64
	cpu   time.Duration
	// apply is how long making the change took (within the latency).
	apply time.Duration
}

// measure makes one change and waits until every proxy holding a changed
// resource has ACKed it.
func (c *changer) measure(ctx context.Context, kind string, svc int, proxies []*Proxy, received *atomic.Int64, timeout time.Duration) (measured, error) {
	key := fmt.Sprintf("%s/%d", kind, svc)
	c.gens[key]++
	gen := c.gens[key]
	var pr *Probe
	write := func() error { return WriteRouting(c.dir, c.size, c.src, svc, gen) }
	rel := routingFile(c.size, svc)
	if kind == ChangeRouting {
		// vmesh names a proxyless route configuration host:port, Istio's
		// grpcgen outbound|port||host.
		names := c.shape.routeProbeNames(c.src, svc)
		if c.shape != ShapeRouter {
			names = append(names, xds.ClusterName(ServicePort, "", c.src.Host(svc)))
		}
		pr = NewProbe(resourcev3.RouteType, names...)
		if c.shape.sidecarShape() || c.shape == ShapeRouter {
			pr.Requires.TypeURL, pr.Requires.Name = resourcev3.ClusterType, xds.ClusterName(ServicePort, "", c.src.Host(svc))
		}
	} else {
		pr = NewProbe(resourcev3.EndpointType, c.src.ChangedEndpointClusters(svc)...)
		write = func() error { return WriteEndpoints(c.dir, c.size, c.src, svc, gen) }
		rel = endpointsFile(c.size, svc)
	}
	m := measured{}
	for _, p := range proxies {
		if p.Watch(pr) {
			m.want++
		}
	}
	// The unmeasured part: what happens before a change is made (the
	// baseline builds its snapshots; a git change is edited in the clone).
	apply := write
	switch {
	case c.server != ServerVmesh:
		if err := write(); err != nil {
			return m, err
		}
		if err := c.child.Control(ctx, "prepare"); err != nil {
			return m, err
		}
		apply = func() error { return c.child.Control(ctx, "apply") }
	case c.git != nil:
		if err := write(); err != nil {
			return m, err
		}
		apply = func() error {
			if err := c.git.Commit(ctx, rel, fmt.Sprintf("vmesh-load: %s change %d of service %d", kind, gen, svc)); err != nil {
				return err
			}
			head, err := c.git.Head(ctx)
			if err != nil {
				return err
			}
			return c.git.Notify(ctx, c.child.Addrs.HTTP, head)
		}
	case c.zk != nil && kind == ChangeEndpoint:
		apply = func() error { return c.zk.MoveEndpoint(svc, gen) }
	}
	before, err := c.child.Stats()
	if err != nil {
		return m, err
	}
	bytes0 := received.Load()
	start := time.Now()
	pr.Arm(m.want, start)
	if err := apply(); err != nil {
		return m, err
	}
	m.apply = time.Since(start)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	m.lat = pr.Wait(wctx)
	cancel()
	// Let the server finish what the ACKs started before reading its CPU.
	time.Sleep(250 * time.Millisecond)
	after, err := c.child.Stats()
	if err != nil {
		return m, err
	}
	m.bytes, m.cpu = received.Load()-bytes0, after.CPU-before.CPU
	return m, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// envoyWindows are the HTTP/2 flow-control windows Envoy advertises on
// its connection to the control plane (Http2ProtocolOptions' defaults:
// 16 MiB per stream, 24 MiB per connection), so an Envoy-like proxy
// receives a sidecar's hundreds of KB of routes as Envoy would, not in
// grpc-go's 64 KB steps.
func envoyWindows() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(16 << 20), grpc.WithInitialConnWindowSize(24 << 20)}
}
