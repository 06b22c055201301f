package loadgen

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
	// Servers lists the servers to measure, in order: "vmesh", "baseline".
	Servers []string `json:"servers"`
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
}

// DefaultOptions returns the scale: 1,000 services × 10 endpoints,
// 100 VirtualServices, 1,000 proxies, vmesh then the baseline.
func DefaultOptions() Options {
	return Options{
		Size:          Size{Services: 1000, Endpoints: 10, VirtualServices: 100, Namespaces: 10},
		Proxies:       1000,
		DeltaFraction: 0.5, EnvoyFraction: 0.5, ListenersPerProxy: 5, StreamsPerConn: 1,
		Changes: 5, Servers: []string{ServerVmesh, ServerBaseline},
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
	case o.Proxies < 1:
		return fmt.Errorf("loadgen: need at least one proxy")
	case o.DeltaFraction < 0 || o.DeltaFraction > 1 || o.EnvoyFraction < 0 || o.EnvoyFraction > 1:
		return fmt.Errorf("loadgen: fractions must be within 0..1")
	case o.ListenersPerProxy < 2:
		return fmt.Errorf("loadgen: a proxyless proxy dials at least 2 services")
	case o.StreamsPerConn < 1 || o.Changes < 0 || o.ConnectParallel < 1:
		return fmt.Errorf("loadgen: streams per connection and connect parallelism must be >= 1, changes >= 0")
	case slices.ContainsFunc(o.Kinds, func(k string) bool { return k != ChangeRouting && k != ChangeEndpoint }):
		return fmt.Errorf("loadgen: change kinds are %s and %s, not %v", ChangeRouting, ChangeEndpoint, o.Kinds)
	case len(o.Servers) == 0:
		return fmt.Errorf("loadgen: no server to measure")
	}
	for _, s := range o.Servers {
		if s != ServerVmesh && s != ServerBaseline {
			return fmt.Errorf("loadgen: unknown server %q", s)
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
	Errors  []string       `json:"errors,omitempty"`
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
	// Debounce is the part of the latency that is deliberate waiting (the
	// file watch's and the push's debounce), for vmesh.
	Debounce time.Duration `json:"debounce"`
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
	if o.Spawn == nil {
		o.Spawn = SelfSpawner
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
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
		} else {
			seen := map[int]bool{0: true, 1: true}
			s.Listeners = []string{RouteName(0), RouteName(1)}
			for k := 0; len(s.Listeners) < min(o.ListenersPerProxy, o.Size.Services) && k < 10*o.ListenersPerProxy; k++ {
				svc := (i*7919 + k*104729) % o.Size.Services
				if !seen[svc] {
					seen[svc] = true
					s.Listeners = append(s.Listeners, RouteName(svc))
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
	if err := Write(cfgDir, o.Size); err != nil {
		return nil, err
	}
	extra := []string{"-debounce-quiet", o.DebounceQuiet.String()}
	if o.Pprof {
		extra = append(extra, "-pprof")
	}
	t0 := time.Now()
	child, err := StartChild(ctx, o.Spawn, kind, cfgDir, extra...)
	if err != nil {
		return nil, err
	}
	defer child.Stop()
	sr.Startup = time.Since(t0)
	idle, err := child.Stats()
	if err != nil {
		return nil, err
	}
	sr.IdleRSS = idle.RSS
	fmt.Fprintf(o.Progress, "%s: serving %d services on %s after %s (rss %s)\n", kind, o.Size.Services, child.Addrs.XDS, sr.Startup.Round(time.Millisecond), MiB(idle.RSS))

	// Connect the proxies.
	var received atomic.Int64
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
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
			cc, err := grpc.NewClient("passthrough:///"+child.Addrs.XDS,
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithContextDialer(dial),
				grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
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
	cfg := changer{kind: kind, dir: cfgDir, size: o.Size, child: child, gens: map[string]int{}}
	if kind == ServerVmesh {
		cfg.debounce = DirDebounce + o.DebounceQuiet
	}
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
		if _, _, _, _, err := cfg.measure(ctx, ck, 0, proxies, &received, o.ChangeTimeout); err != nil {
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
		cr := ChangeReport{Kind: ck, Changes: o.Changes, Debounce: cfg.debounce}
		var all []time.Duration
		var bytes int64
		var cpu, hcpu time.Duration
		for n := range o.Changes {
			svc := n % 2
			h0 := SelfCPU()
			lat, expected, b, c, err := cfg.measure(ctx, ck, svc, proxies, &received, o.ChangeTimeout)
			hc := SelfCPU() - h0
			hcpu += hc
			if err != nil {
				return nil, err
			}
			cr.Expected += expected
			cr.Missing += expected - len(lat)
			all = append(all, lat...)
			bytes += b
			cpu += c
			l := Summarize(lat)
			fmt.Fprintf(o.Progress, "%s: %s change %d (svc %d): %d/%d ACKs, p50 %s p99 %s max %s, %s sent, server cpu %s, harness cpu %s\n",
				kind, ck, n+1, svc, len(lat), expected, ms(l.P50), ms(l.P99), ms(l.Max), Bytes(b), c, hc.Round(time.Millisecond))
		}
		cr.Latency = Summarize(all)
		if o.Changes > 0 {
			cr.BytesPerChange = bytes / int64(o.Changes)
			cr.CPUPerChange = cpu / time.Duration(o.Changes)
			cr.HarnessCPUPerChange = hcpu / time.Duration(o.Changes)
		}
		sr.Changes = append(sr.Changes, cr)
	}
	final, err := child.Stats()
	if err != nil {
		return nil, err
	}
	sr.PeakRSS, sr.CPU = final.PeakRSS, final.CPU
	return sr, nil
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

// DirDebounce is the quiet period of vmesh's directory source.
const DirDebounce = 100 * time.Millisecond

// changer makes changes to one server's config and measures them.
type changer struct {
	kind     string
	dir      string
	size     Size
	child    *Child
	gens     map[string]int
	debounce time.Duration
}

// measure makes one change and waits until every proxy holding a changed
// resource has ACKed it. It returns the latencies, how many ACKs were
// expected, the bytes the proxies received and the server CPU used from
// the change until shortly after the last ACK.
func (c *changer) measure(ctx context.Context, kind string, svc int, proxies []*Proxy, received *atomic.Int64, timeout time.Duration) ([]time.Duration, int, int64, time.Duration, error) {
	key := fmt.Sprintf("%s/%d", kind, svc)
	c.gens[key]++
	gen := c.gens[key]
	var pr *Probe
	write := func() error { return WriteRouting(c.dir, c.size, svc, gen) }
	if kind == ChangeRouting {
		pr = NewProbe(resourcev3.RouteType, RouteName(svc))
	} else {
		pr = NewProbe(resourcev3.EndpointType, ChangedEndpointClusters(svc)...)
		write = func() error { return WriteEndpoints(c.dir, c.size, svc, gen) }
	}
	want := 0
	for _, p := range proxies {
		if p.Watch(pr) {
			want++
		}
	}
	if c.kind == ServerBaseline {
		if err := write(); err != nil {
			return nil, 0, 0, 0, err
		}
		if err := c.child.Control(ctx, "prepare"); err != nil {
			return nil, 0, 0, 0, err
		}
	}
	before, err := c.child.Stats()
	if err != nil {
		return nil, 0, 0, 0, err
	}
	bytes0 := received.Load()
	start := time.Now()
	pr.Arm(want, start)
	if c.kind == ServerBaseline {
		err = c.child.Control(ctx, "apply")
	} else {
		err = write()
	}
	if err != nil {
		return nil, 0, 0, 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	lat := pr.Wait(wctx)
	cancel()
	// Let the server finish what the ACKs started before reading its CPU.
	time.Sleep(250 * time.Millisecond)
	after, err := c.child.Stats()
	if err != nil {
		return nil, 0, 0, 0, err
	}
	return lat, want, received.Load() - bytes0, after.CPU - before.CPU, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
