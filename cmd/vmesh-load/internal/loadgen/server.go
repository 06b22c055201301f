package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/registries"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// Server kinds the harness runs.
const (
	ServerVmesh = "vmesh"
	// ServerBaseline is go-control-plane's SnapshotCache serving
	// pre-built resources.
	ServerBaseline = "baseline"
	// ServerLinear is go-control-plane's LinearCache + MuxCache serving
	// pre-built resources.
	ServerLinear = "linear"
	// ServerIstio is Istio's own DiscoveryServer (tools/istio-load-server).
	ServerIstio = "istio"
)

// ChildCommand is the first argument that makes the harness binary run a
// server child instead of the harness (see ChildMain).
const ChildCommand = "__server"

// Addrs is what a server child reports on its first line of output.
type Addrs struct {
	XDS  string `json:"xds"`
	HTTP string `json:"http"`
	// Control is the baseline's HTTP control address (POST /prepare, /apply).
	Control string `json:"control,omitempty"`
}

// ChildMain runs a server child: args are the flags after ChildCommand. It
// serves until its standard input closes (the harness exited) and prints its
// addresses as one JSON line once it serves the initial config.
func ChildMain(args []string) error {
	fs := flag.NewFlagSet(ChildCommand, flag.ContinueOnError)
	kind := fs.String("kind", ServerVmesh, "vmesh or baseline")
	dir := fs.String("dir", "", "config directory")
	pprof := fs.Bool("pprof", false, "serve /debug/pprof (vmesh)")
	quiet := fs.Duration("debounce-quiet", 100*time.Millisecond, "xDS push debounce (vmesh)")
	dataDir := fs.String("data-dir", "", "vmesh data dir")
	gitRepo := fs.String("git-repo", "", "serve this git repository instead of -dir (vmesh)")
	gitSecret := fs.String("git-secret", "", "webhook secret of the git source (vmesh)")
	regs := fs.String("registries", "", "registry entries as a JSON list of registries.Spec (vmesh)")
	expect := fs.Int("expect-workloads", 0, "wait for this many WorkloadEntries before serving (vmesh)")
	logLevel := fs.String("log-level", "warn", "log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the harness holds our stdin open
		cancel()
	}()
	report := func(a Addrs) {
		b, _ := json.Marshal(a)
		fmt.Fprintf(os.Stdout, "%s\n", b)
	}
	switch *kind {
	case ServerVmesh:
		vo := VmeshOptions{Dir: *dir, DataDir: *dataDir, Pprof: *pprof, DebounceQuiet: *quiet, Logger: logger,
			GitRepo: *gitRepo, GitSecret: *gitSecret, ExpectWorkloads: *expect}
		if *gitRepo != "" {
			vo.Dir = ""
		}
		if *regs != "" {
			if err := json.Unmarshal([]byte(*regs), &vo.Registries); err != nil {
				return fmt.Errorf("loadgen: -registries: %w", err)
			}
		}
		return RunVmesh(ctx, vo, report)
	case ServerBaseline:
		return RunBaseline(ctx, *dir, logger, report)
	case ServerLinear:
		return RunLinear(ctx, *dir, logger, report)
	}
	return fmt.Errorf("loadgen: unknown server kind %q", *kind)
}

// VmeshOptions configure the vmesh server child.
type VmeshOptions struct {
	// Dir is the config directory; empty with GitRepo.
	Dir, DataDir string
	// GitRepo, when set, is the git repository to serve (polled hourly,
	// fetched at once on a webhook call signed with GitSecret).
	GitRepo, GitSecret string
	// Registries are registry entries served besides the config.
	Registries []registries.Spec
	// ExpectWorkloads makes RunVmesh wait, before reporting ready, until
	// the Store holds this many WorkloadEntries (a registry's first set
	// lands after the sources' readiness).
	ExpectWorkloads int
	Pprof           bool
	DebounceQuiet   time.Duration
	Logger          *slog.Logger
}

// GitPollInterval is the vmesh child's git poll interval: long, so changes
// arrive through the webhook, as in a GitOps deployment.
const GitPollInterval = time.Hour

// RunVmesh runs the whole vmesh control plane on loopback ports over the
// config directory (or git repository, and registries), calls ready once it
// serves, and runs until ctx ends.
func RunVmesh(ctx context.Context, o VmeshOptions, ready func(Addrs)) error {
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir, cfg.DataDir, cfg.Pprof = o.Dir, o.DataDir, o.Pprof
	if o.GitRepo != "" {
		cfg.Git.Repo, cfg.Git.Interval, cfg.Git.WebhookSecret = o.GitRepo, GitPollInterval, o.GitSecret
	}
	cfg.Registries = o.Registries
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	if o.DebounceQuiet > 0 {
		cfg.DebounceQuiet = o.DebounceQuiet
		cfg.DebounceMax = max(cfg.DebounceMax, o.DebounceQuiet)
	}
	cp, err := controlplane.New(cfg, o.Logger)
	if err != nil {
		return fmt.Errorf("loadgen: vmesh: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- cp.Run(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Minute)
	for !cp.Ready() || len(cp.Store().Snapshot().List(store.KindWorkloadEntry)) < o.ExpectWorkloads {
		select {
		case err := <-errc:
			return fmt.Errorf("loadgen: vmesh ended before ready: %w", err)
		case <-tick.C:
		}
		if cp.Ready() && time.Now().After(deadline) {
			return fmt.Errorf("loadgen: vmesh: %d of %d WorkloadEntries after 10 minutes (registries: %+v)",
				len(cp.Store().Snapshot().List(store.KindWorkloadEntry)), o.ExpectWorkloads, o.Registries)
		}
	}
	ready(Addrs{XDS: cp.XDSAddr(), HTTP: cp.HTTPAddr()})
	return <-errc
}

// baseline serves pre-built resources from go-control-plane's SnapshotCache:
// the same generators vmesh uses produce the resources, per proxy group, but
// ahead of time (POST /prepare), and a change is only SetSnapshot (POST
// /apply). Comparing it with vmesh shows what vmesh's translation costs.
type baseline struct {
	dir    string
	logger *slog.Logger
	cache  cachev3.SnapshotCache

	mu      sync.Mutex
	snap    *model.Snapshot
	groups  map[string]*xds.Proxy // representative proxy by group key
	pending *pendingState
}

type pendingState struct {
	snap  *model.Snapshot
	snaps map[string]*cachev3.Snapshot
}

// RunBaseline serves the config directory from a go-control-plane
// SnapshotCache until ctx ends, calling ready once it serves.
func RunBaseline(ctx context.Context, dir string, logger *slog.Logger, ready func(Addrs)) error {
	b := &baseline{dir: dir, logger: logger, groups: map[string]*xds.Proxy{}}
	snap, err := loadModel(dir)
	if err != nil {
		return err
	}
	b.snap = snap
	b.cache = cachev3.NewSnapshotCache(false, b, nil)
	srv := serverv3.NewServer(ctx, b.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error { return b.ensure(r.GetNode()) },
		StreamDeltaRequestFunc: func(_ int64, r *discoveryv3.DeltaDiscoveryRequest) error {
			if r.GetNode() == nil {
				return nil // only a stream's first request carries the node
			}
			return b.ensure(r.GetNode())
		},
	})
	return serveControlled(ctx, "baseline", srv, b.prepare, b.apply, ready)
}

func loadModel(dir string) (*model.Snapshot, error) {
	objs, errs, err := filestore.LoadPath(dir)
	if err != nil {
		return nil, fmt.Errorf("loadgen: baseline: %w", err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("loadgen: baseline: %s", errs[0].Error())
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "dir:" + dir, Class: store.ClassConfig}, objs); err != nil {
		return nil, fmt.Errorf("loadgen: baseline: %w", err)
	}
	return model.Build(st.Snapshot()), nil
}

// ID implements cachev3.NodeHash: proxies of one vmesh group share a snapshot.
func (b *baseline) ID(n *corev3.Node) string {
	p, err := xds.ProxyFromNode(n)
	if err != nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return xds.GroupKey(b.snap, p)
}

// ensure builds the snapshot of a node's group on its first request.
func (b *baseline) ensure(n *corev3.Node) error {
	p, err := xds.ProxyFromNode(n)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	key := xds.GroupKey(b.snap, p)
	if _, ok := b.groups[key]; ok {
		return nil
	}
	s, err := buildSnapshot(b.snap, p)
	if err != nil {
		return err
	}
	b.groups[key] = p
	return b.cache.SetSnapshot(context.Background(), key, s)
}

// prepare re-reads the directory and builds the next snapshot of every
// known group without serving it.
func (b *baseline) prepare() error {
	snap, err := loadModel(b.dir)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := &pendingState{snap: snap, snaps: map[string]*cachev3.Snapshot{}}
	for key, p := range b.groups {
		s, err := buildSnapshot(snap, p)
		if err != nil {
			return err
		}
		ps.snaps[key] = s
	}
	b.pending = ps
	return nil
}

// apply serves the prepared snapshots.
func (b *baseline) apply(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == nil {
		return errors.New("nothing prepared")
	}
	b.snap = b.pending.snap
	for key, s := range b.pending.snaps {
		if err := b.cache.SetSnapshot(ctx, key, s); err != nil {
			return err
		}
	}
	b.pending = nil
	return nil
}

// buildSnapshot generates one group's resources with vmesh's generators.
// Each type's version is a hash of its resources, so a type that did not
// change is not pushed; delta versions are computed here too.
func buildSnapshot(s *model.Snapshot, p *xds.Proxy) (*cachev3.Snapshot, error) {
	res, err := groupResources(s, p)
	if err != nil {
		return nil, err
	}
	out := &cachev3.Snapshot{}
	add := func(typeURL string, items []types.Resource) error {
		h := fnv.New64a()
		for _, r := range items {
			bs, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
			if err != nil {
				return err
			}
			h.Write(bs)
		}
		out.Resources[cachev3.GetResponseType(typeURL)] = cachev3.NewResources(strconv.FormatUint(h.Sum64(), 36), items)
		return nil
	}
	for _, t := range proxyTypes {
		if err := add(t, res[t]); err != nil {
			return nil, err
		}
	}
	if err := out.ConstructVersionMap(); err != nil {
		return nil, err
	}
	return out, nil
}

func asResources[T types.Resource](in []T) []types.Resource {
	out := make([]types.Resource, len(in))
	for i, r := range in {
		out[i] = r
	}
	return out
}

// Child is a running server child process.
type Child struct {
	Kind  string
	Addrs Addrs
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
}

// Spawner returns the command that runs the harness binary with args (the
// harness's own executable; tests use the test binary).
type Spawner func(args []string) *exec.Cmd

// SelfSpawner runs the current executable.
func SelfSpawner(args []string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, args...)
}

// StartChild starts a server child over dir and waits for its addresses.
func StartChild(ctx context.Context, spawn Spawner, kind, dir string, extra ...string) (*Child, error) {
	dataDir := filepath.Join(filepath.Dir(dir), kind+"-data")
	args := append([]string{ChildCommand, "-kind", kind, "-dir", dir, "-data-dir", dataDir}, extra...)
	cmd := spawn(args)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("loadgen: starting %s: %w", kind, err)
	}
	c := &Child{Kind: kind, cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
		c.done <- cmd.Wait()
	}()
	select {
	case l, ok := <-line:
		if !ok {
			c.Stop()
			return nil, fmt.Errorf("loadgen: %s server exited before serving", kind)
		}
		if err := json.Unmarshal([]byte(l), &c.Addrs); err != nil {
			c.Stop()
			return nil, fmt.Errorf("loadgen: %s server said %q: %w", kind, l, err)
		}
	case <-ctx.Done():
		c.Stop()
		return nil, ctx.Err()
	}
	return c, nil
}

// Pid returns the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Stats reads the child's CPU and memory.
func (c *Child) Stats() (ProcStats, error) { return ReadProcStats(c.Pid()) }

// Control posts to the baseline's control endpoint (prepare or apply).
func (c *Child) Control(ctx context.Context, what string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.Addrs.Control+"/"+what, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("loadgen: baseline %s: %w", what, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("loadgen: baseline %s: %s: %s", what, resp.Status, body)
	}
	return nil
}

// Stop ends the child (closing its stdin, then killing it after 5s).
func (c *Child) Stop() {
	c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// linear serves pre-built resources from go-control-plane's LinearCache,
// the second baseline: one LinearCache per proxy group and type, built with
// vmesh's generators when the group's first proxy asks. A MuxCache
// classifies requests by type; each type's groupMux picks the group's
// cache (MuxCache's own map of caches is fixed once it serves, and groups
// appear as proxies connect). A change re-generates every group's
// resources ahead of time (POST /prepare) and then hands each cache only
// the resources whose bytes changed (POST /apply: UpdateResources), so the
// cache sends only those.
type linear struct {
	dir string

	mu      sync.Mutex
	snap    *model.Snapshot
	groups  map[string]*linearGroup
	pending map[string]map[string]linearUpdate // group → type → update
}

type linearGroup struct {
	proxy  *xds.Proxy
	caches map[string]*cachev3.LinearCache
	bytes  map[string]map[string][]byte // type → name → serialised resource
}

type linearUpdate struct {
	set    map[string]types.Resource
	remove []string
	bytes  map[string][]byte
}

// RunLinear serves the config directory from LinearCaches behind a
// MuxCache until ctx ends, calling ready once it serves.
func RunLinear(ctx context.Context, dir string, logger *slog.Logger, ready func(Addrs)) error {
	snap, err := loadModel(dir)
	if err != nil {
		return err
	}
	l := &linear{dir: dir, snap: snap, groups: map[string]*linearGroup{}}
	mux := &cachev3.MuxCache{
		Classify:      func(r *cachev3.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cachev3.DeltaRequest) string { return r.GetTypeUrl() },
		Caches:        map[string]cachev3.Cache{},
	}
	for _, t := range proxyTypes {
		mux.Caches[t] = &groupMux{l: l, typeURL: t}
	}
	srv := serverv3.NewServer(ctx, mux, nil)
	return serveControlled(ctx, "linear", srv, l.prepare, func(context.Context) error { return l.apply() }, ready)
}

// serveControlled serves an ADS server and the control endpoints of a
// harness-fed server (POST /prepare, /apply) until ctx ends.
func serveControlled(ctx context.Context, name string, srv serverv3.Server, prepare func() error, apply func(context.Context) error, ready func(Addrs)) error {
	gs := grpc.NewServer(grpc.MaxConcurrentStreams(1 << 20))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("loadgen: %s: %w", name, err)
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		lis.Close()
		return fmt.Errorf("loadgen: %s: %w", name, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /prepare", func(w http.ResponseWriter, _ *http.Request) {
		if err := prepare(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("POST /apply", func(w http.ResponseWriter, _ *http.Request) {
		if err := apply(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ctl) }()
	go func() { _ = gs.Serve(lis) }()
	ready(Addrs{XDS: lis.Addr().String(), Control: ctl.Addr().String()})
	<-ctx.Done()
	gs.Stop()
	_ = hs.Close()
	return nil
}

// group returns the LinearCache group of a node, building it on its first
// request.
func (l *linear) group(n *corev3.Node) (*linearGroup, error) {
	p, err := xds.ProxyFromNode(n)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := xds.GroupKey(l.snap, p)
	if g := l.groups[key]; g != nil {
		return g, nil
	}
	res, err := groupResources(l.snap, p)
	if err != nil {
		return nil, err
	}
	g := &linearGroup{proxy: p, caches: map[string]*cachev3.LinearCache{}, bytes: map[string]map[string][]byte{}}
	for _, t := range proxyTypes {
		byName := map[string]types.Resource{}
		g.bytes[t] = map[string][]byte{}
		for _, r := range res[t] {
			name := cachev3.GetResourceName(r)
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
			if err != nil {
				return nil, err
			}
			byName[name], g.bytes[t][name] = r, b
		}
		g.caches[t] = cachev3.NewLinearCache(t, cachev3.WithInitialResources(byName))
	}
	l.groups[key] = g
	return g, nil
}

// prepare re-reads the directory and works out, per group and type, which
// resources changed.
func (l *linear) prepare() error {
	snap, err := loadModel(l.dir)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	pending := map[string]map[string]linearUpdate{}
	for key, g := range l.groups {
		res, err := groupResources(snap, g.proxy)
		if err != nil {
			return err
		}
		pending[key] = map[string]linearUpdate{}
		for _, t := range proxyTypes {
			u := linearUpdate{set: map[string]types.Resource{}, bytes: map[string][]byte{}}
			for _, r := range res[t] {
				name := cachev3.GetResourceName(r)
				b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
				if err != nil {
					return err
				}
				u.bytes[name] = b
				if old, ok := g.bytes[t][name]; !ok || !bytes.Equal(old, b) {
					u.set[name] = r
				}
			}
			for name := range g.bytes[t] {
				if _, ok := u.bytes[name]; !ok {
					u.remove = append(u.remove, name)
				}
			}
			pending[key][t] = u
		}
	}
	l.snap, l.pending = snap, pending
	return nil
}

// apply hands every cache its changed resources.
func (l *linear) apply() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		return errors.New("nothing prepared")
	}
	for key, byType := range l.pending {
		g := l.groups[key]
		for t, u := range byType {
			if len(u.set) > 0 || len(u.remove) > 0 {
				if err := g.caches[t].UpdateResources(u.set, u.remove); err != nil {
					return fmt.Errorf("loadgen: linear: %w", err)
				}
			}
			g.bytes[t] = u.bytes
		}
	}
	l.pending = nil
	return nil
}

// groupResources generates one group's resources with vmesh's generators.
func groupResources(s *model.Snapshot, p *xds.Proxy) (map[string][]types.Resource, error) {
	lds, err := xds.Listeners(s, p)
	if err != nil {
		return nil, err
	}
	rds, err := xds.Routes(s, p)
	if err != nil {
		return nil, err
	}
	cds, err := xds.Clusters(s, p)
	if err != nil {
		return nil, err
	}
	eds, err := xds.Endpoints(s, p)
	if err != nil {
		return nil, err
	}
	return map[string][]types.Resource{
		resourcev3.ListenerType: asResources(lds), resourcev3.RouteType: asResources(rds),
		resourcev3.ClusterType: asResources(cds), resourcev3.EndpointType: asResources(eds),
	}, nil
}

// groupMux is one type's cache for the MuxCache: it hands each request to
// its proxy group's LinearCache.
type groupMux struct {
	l       *linear
	typeURL string
}

var _ cachev3.Cache = (*groupMux)(nil)

func (m *groupMux) CreateWatch(r *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	g, err := m.l.group(r.GetNode())
	if err != nil {
		return nil, err
	}
	return g.caches[m.typeURL].CreateWatch(r, sub, ch)
}

func (m *groupMux) CreateDeltaWatch(r *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	g, err := m.l.group(r.GetNode())
	if err != nil {
		return nil, err
	}
	return g.caches[m.typeURL].CreateDeltaWatch(r, sub, ch)
}

func (m *groupMux) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("loadgen: linear: fetch is not supported")
}
