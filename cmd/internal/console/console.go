// Package console is vmesh's read-only web console, served at /ui/ on the
// control plane's HTTP port: server-rendered html/template pages (overview,
// services, graph, proxies, one proxy, changes) with a little plain JavaScript,
// everything embedded in the binary. A page stays live through one
// server-sent-events stream (/ui/events): the console ticks when the
// Store's snapshot or the proxies' sync state changes, and the page fetches
// itself again. The browser polls nothing on a timer.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/analysis"
	"github.com/vmesh/vmesh/registries"
	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

//go:embed assets
var assets embed.FS

// Sources is what the console reads. Store is required; a nil function or
// handler leaves its part of the console empty.
type Sources struct {
	// Store is the control plane's config Store.
	Store *store.Store
	// Warnings returns every warning of a Store snapshot (its sources'
	// own and the analysis across them); nil: the console analyses the
	// snapshots itself.
	Warnings func(*store.Snapshot) []store.ConfigError
	// Syncz returns every connected proxy's sync state, as
	// xds.(*Server).Syncz does.
	Syncz func() []xds.SyncStatus
	// ConfigDump serves ?proxy=ID as xds.(*Server).ConfigDumpHandler does.
	ConfigDump http.Handler
	// Registries returns each registry adapter's state (see RegistryStatus).
	Registries func() []adapter.Status
	// Rollout returns the staged rollout's state, nil without one, as
	// xds.(*Server).RolloutStatus does.
	Rollout func() *xds.RolloutStatus
	// TrustDomain completes a proxy's identity (spiffe://TD/ns/NS/sa/SA);
	// empty means cluster.local.
	TrustDomain string
}

// Console serves the pages. Build it with New (or Mount) and run Run so that
// it records the change history and feeds the live updates.
type Console struct {
	src     Sources
	pages   map[string]*template.Template
	static  http.Handler
	perPage int
	hub     *hub
	// streams holds a token per open /ui/events stream; streamLifetime
	// ends each one; streamRefused counts the streams refused (or is nil).
	streams        chan struct{}
	streamLifetime time.Duration
	streamRefused  func()
	// traffic answers the graph's rates; nil without a Prometheus server.
	traffic        *trafficSource
	trafficURL     string
	trafficWindow  time.Duration
	trafficTimeout time.Duration

	mu      sync.Mutex
	model   *model.Snapshot // built from modelOf
	modelOf *store.Snapshot
	// routes are the Gateway API routes' status rows of routesOf.
	routes   []RouteRow
	routesOf *store.Snapshot
	history  []Change // newest last, at most maxHistory
}

// Option tunes a Console.
type Option func(*Console)

// WithPageSize sets how many rows a paginated page shows (default 50).
func WithPageSize(n int) Option {
	return func(c *Console) {
		if n > 0 {
			c.perPage = n
		}
	}
}

// WithEventStreams bounds the live-update streams (/ui/events): at most
// max open at once (more are refused with 503 and refused, when not nil,
// is called), each ending after lifetime (the browser then opens a new
// one). A value <= 0 keeps its default (DefaultMaxEventStreams,
// DefaultEventStreamLifetime).
func WithEventStreams(max int, lifetime time.Duration, refused func()) Option {
	return func(c *Console) {
		if max > 0 {
			c.streams = make(chan struct{}, max)
		}
		if lifetime > 0 {
			c.streamLifetime = lifetime
		}
		c.streamRefused = refused
	}
}

// New returns a console reading src.
func New(src Sources, opts ...Option) (*Console, error) {
	if src.Store == nil {
		return nil, errors.New("console: nil Store")
	}
	if src.TrustDomain == "" {
		src.TrustDomain = "cluster.local"
	}
	if src.Warnings == nil {
		src.Warnings = new(analysis.Cache).Warnings
	}
	c := &Console{src: src, perPage: 50, hub: newHub(),
		streams: make(chan struct{}, DefaultMaxEventStreams), streamLifetime: DefaultEventStreamLifetime}
	for _, o := range opts {
		o(c)
	}
	var err error
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, fmt.Errorf("console: static assets: %w", err)
	}
	if c.trafficURL != "" {
		if c.traffic, err = newTrafficSource(c.trafficURL, c.trafficWindow, c.trafficTimeout); err != nil {
			return nil, err
		}
	}
	c.static = http.StripPrefix(Prefix+"static/", http.FileServerFS(static))
	return c, nil
}

// Mux is where Mount serves the console: an *http.ServeMux, or a wrapper
// of one.
type Mux interface {
	Handle(pattern string, handler http.Handler)
}

// Mount builds a console of src, serves it at Prefix on mux and returns it,
// to be run with the control plane's other parts. It panics when src has no
// Store (a wiring mistake).
func Mount(mux Mux, src Sources, opts ...Option) *Console {
	c, err := New(src, opts...)
	if err != nil {
		panic(err)
	}
	mux.Handle(Prefix, c)
	return c
}

// RegistryStatus returns r's Status method, or nil when r is nil (no
// registry configured).
func RegistryStatus(r *registries.Runner) func() []adapter.Status {
	if r == nil {
		return nil
	}
	return r.Status
}

// ServeHTTP serves the console's pages under Prefix.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the console is read-only", http.StatusMethodNotAllowed)
		return
	}
	switch p := r.URL.Path; p {
	case Prefix:
		c.render(w, http.StatusOK, "overview", c.overview())
	case Prefix + "services":
		c.render(w, http.StatusOK, "services", c.services(r.URL.Query()))
	case Prefix + "proxies":
		c.render(w, http.StatusOK, "proxies", c.proxies(r.URL.Query()))
	case Prefix + "proxy":
		d, code := c.proxy(r.Context(), r.URL.Query().Get("id"))
		c.render(w, code, "proxy", d)
	case Prefix + "graph":
		c.render(w, http.StatusOK, "graph", c.graph(r.Context()))
	case Prefix + "changes":
		c.render(w, http.StatusOK, "changes", c.changes())
	case Prefix + "events":
		c.events(w, r)
	default:
		if len(p) > len(Prefix+"static/") && p[:len(Prefix+"static/")] == Prefix+"static/" {
			c.static.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	}
}

// Run records the change history and feeds the live updates until ctx ends.
func (c *Console) Run(ctx context.Context) error {
	w := newWatcher(c)
	defer w.close()
	tick := time.NewTicker(storeCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.sub.C():
			w.storeChanged()
		case <-tick.C:
			w.check(time.Now())
		}
	}
}
