// Command istio-load-server is the Istio server mode of vmesh's load
// harness (cmd/vmesh-load -servers istio -istio-server PATH): it serves the
// harness's generated config directory from Istio's own DiscoveryServer
// (istio.io/istio release 1.31, in-process through pilot/test/xds's fake
// discovery server, with its in-memory config store and ServiceEntry
// registry) over TCP, so that the harness's simulated proxies measure Istio
// end to end beside vmesh and go-control-plane.
//
// It speaks the harness's child protocol: it prints its addresses as one
// JSON line on standard output once it serves, takes changes on an HTTP
// control address (POST /prepare re-reads the directory and works out what
// changed; POST /apply hands the changed objects to Istio's config store,
// which then debounces and pushes as istiod does), and exits when its
// standard input closes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"istio.io/istio/pilot/pkg/config/kube/crd"
	xdsfake "istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config"
	istiolog "istio.io/istio/pkg/log"
)

// childCommand is the first argument the harness passes to its children.
const childCommand = "__server"

// addrs is the harness's first line from a child.
type addrs struct {
	XDS     string `json:"xds"`
	HTTP    string `json:"http"`
	Control string `json:"control,omitempty"`
}

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == childCommand {
		args = args[1:]
	}
	if err := run(args); err != nil {
		fmt.Fprintln(os.Stderr, "istio-load-server:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fset := flag.NewFlagSet("istio-load-server", flag.ContinueOnError)
	fset.String("kind", "istio", "server kind (the harness passes it; only istio)")
	dir := fset.String("dir", "", "config directory the harness generated")
	fset.String("data-dir", "", "unused (the harness passes it)")
	debounce := fset.Duration("debounce-quiet", 100*time.Millisecond, "Istio's push debounce (PILOT_DEBOUNCE_AFTER)")
	fset.Bool("pprof", false, "unused")
	logs := fset.Bool("log", false, "show Istio's error logs")
	requestLimit := fset.Float64("request-limit", 0, "Istio's limit on new xDS streams per second (PILOT_MAX_REQUESTS_PER_SECOND, 25 in istiod); 0 lifts it, since the harness's proxies do not retry a refused stream as Envoy would")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("-dir is required")
	}
	level := istiolog.NoneLevel
	if *logs {
		level = istiolog.ErrorLevel
	}
	for _, sc := range istiolog.Scopes() {
		sc.SetOutputLevel(level)
	}
	configs, err := load(*dir)
	if err != nil {
		return err
	}
	f := &failer{}
	defer f.cleanup()
	var xdsAddr string
	s := xdsfake.NewFakeDiscoveryServer(f, xdsfake.FakeOptions{
		Configs:      configs,
		DebounceTime: *debounce,
		ListenerBuilder: func() (net.Listener, error) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err == nil {
				xdsAddr = l.Addr().String()
			}
			return l, err
		},
	})
	s.Discovery.RequestRateLimit.SetLimit(rate.Limit(*requestLimit))
	srv := &server{dir: *dir, fds: s, current: byKey(configs)}

	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /prepare", func(w http.ResponseWriter, _ *http.Request) {
		if err := srv.prepare(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("POST /apply", func(w http.ResponseWriter, _ *http.Request) {
		if err := srv.apply(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ctl) }()
	defer hs.Close()

	b, _ := json.Marshal(addrs{XDS: xdsAddr, Control: ctl.Addr().String()})
	fmt.Printf("%s\n", b)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the harness holds our stdin open
		cancel()
	}()
	<-ctx.Done()
	return nil
}

// load reads every .yaml file under dir as istiod's file config source
// would: each object gets the domain suffix cluster.local, namespace
// default when it has none, and one creation time.
func load(dir string) ([]config.Config, error) {
	var out []config.Config
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".yaml") || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		cs, unknown, err := crd.ParseInputs(string(data))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if len(unknown) > 0 {
			return fmt.Errorf("%s: %d documents of kinds Istio does not know", p, len(unknown))
		}
		for i := range cs {
			cs[i].Domain = "cluster.local"
			if cs[i].Namespace == "" {
				cs[i].Namespace = "default"
			}
			cs[i].CreationTimestamp = t0
		}
		out = append(out, cs...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	return out, nil
}

type key struct{ kind, namespace, name string }

func keyOf(c config.Config) key { return key{c.GroupVersionKind.String(), c.Namespace, c.Name} }

func byKey(cs []config.Config) map[key]config.Config {
	out := make(map[key]config.Config, len(cs))
	for _, c := range cs {
		out[keyOf(c)] = c
	}
	return out
}

// server applies the harness's changes to Istio's config store.
type server struct {
	dir string
	fds *xdsfake.FakeDiscoveryServer

	mu      sync.Mutex
	current map[key]config.Config
	pending *change
}

type change struct {
	next    map[key]config.Config
	set     []config.Config
	removed []config.Config
}

// prepare re-reads the directory and works out which objects changed (the
// unmeasured part of a change, as for the harness's go-control-plane
// baselines).
func (s *server) prepare() error {
	cs, err := load(s.dir)
	if err != nil {
		return err
	}
	next := byKey(cs)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &change{next: next}
	for k, n := range next {
		if o, ok := s.current[k]; !ok || !same(o, n) {
			c.set = append(c.set, n)
		}
	}
	for k, o := range s.current {
		if _, ok := next[k]; !ok {
			c.removed = append(c.removed, o)
		}
	}
	s.pending = c
	return nil
}

func same(a, b config.Config) bool {
	return maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) &&
		proto.Equal(a.Spec.(proto.Message), b.Spec.(proto.Message))
}

// apply hands the prepared change to Istio's config store: what istiod's
// config controllers do when a watched object changes.
func (s *server) apply() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		return errors.New("nothing prepared")
	}
	store := s.fds.Store()
	for _, c := range s.pending.set {
		c.ResourceVersion = ""
		var err error
		if store.Get(c.GroupVersionKind, c.Name, c.Namespace) != nil {
			_, err = store.Update(c)
		} else {
			_, err = store.Create(c)
		}
		if err != nil {
			return fmt.Errorf("%s %s/%s: %w", c.GroupVersionKind.Kind, c.Namespace, c.Name, err)
		}
	}
	for _, c := range s.pending.removed {
		if err := store.Delete(c.GroupVersionKind, c.Name, c.Namespace, nil); err != nil {
			return fmt.Errorf("%s %s/%s: %w", c.GroupVersionKind.Kind, c.Namespace, c.Name, err)
		}
	}
	s.current, s.pending = s.pending.next, nil
	return nil
}

// failer is the test.Failer the fake discovery server wants: a failure
// ends the server.
type failer struct{ cleanups []func() }

func (f *failer) Fail()                          { panic("istio fake discovery server failed") }
func (f *failer) FailNow()                       { panic("istio fake discovery server failed") }
func (f *failer) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (f *failer) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (f *failer) Log(args ...any)                {}
func (f *failer) Logf(format string, a ...any)   {}
func (f *failer) Helper()                        {}
func (f *failer) Skip(args ...any)               { panic(fmt.Sprint(args...)) }
func (f *failer) Cleanup(fn func())              { f.cleanups = append(f.cleanups, fn) }
func (f *failer) TempDir() string {
	d, err := os.MkdirTemp("", "istio-load-server")
	if err != nil {
		panic(err)
	}
	f.cleanups = append(f.cleanups, func() { os.RemoveAll(d) })
	return d
}

func (f *failer) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	f.cleanups = nil
}
