package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	deltav3 "github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	restv3 "github.com/envoyproxy/go-control-plane/pkg/server/rest/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"google.golang.org/grpc"
)

// Settings tune the push engine.
type Settings struct {
	// DebounceQuiet is how long the Store must stay quiet before a push.
	DebounceQuiet time.Duration
	// DebounceMax bounds how long a push waits under a steady stream of
	// changes.
	DebounceMax time.Duration
}

// DefaultSettings returns the defaults: 100ms quiet, 1s max.
func DefaultSettings() Settings {
	return Settings{DebounceQuiet: 100 * time.Millisecond, DebounceMax: time.Second}
}

// Validate checks the settings.
func (s Settings) Validate() error {
	if s.DebounceQuiet < 0 || s.DebounceMax < 0 {
		return fmt.Errorf("xds: debounce durations must not be negative (quiet %s, max %s)", s.DebounceQuiet, s.DebounceMax)
	}
	if s.DebounceMax < s.DebounceQuiet {
		return fmt.Errorf("xds: debounce max %s is shorter than quiet %s", s.DebounceMax, s.DebounceQuiet)
	}
	return nil
}

// Options configure a Server.
type Options struct {
	// Settings tune pushes; the zero value means DefaultSettings().
	Settings Settings
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Observer, when set, learns about streams and agents' health reports
	// (auto-registration).
	Observer Observer
	// Mesh names the root namespace of mesh-wide policies and the trust
	// domain of SPIFFE IDs (it must be the CA's); zero fields take
	// model.DefaultMesh()'s (istio-system, cluster.local).
	Mesh model.Mesh
	// ControlPlaneID, when set, is every response's control_plane.identifier
	// (the server's name and build), so a proxy's config dump tells which
	// control plane sent it.
	ControlPlaneID string
}

// Server serves the Store's config over xDS. Build it with NewServer,
// register it on gRPC servers with Register (or use Serve), and run its push
// engine with Run.
type Server struct {
	store    *filestore.Store
	settings Settings
	mesh     model.Mesh
	logger   *slog.Logger
	metrics  *metrics
	cache    *cache
	codec    *requestCodec
	xds      serverv3.Server
	streams  *streams

	ctx    context.Context // ends the xDS streams when Run returns
	cancel context.CancelFunc

	ready chan struct{} // closed after the first snapshot is pushed
}

// NewServer returns a Server for the store.
func NewServer(store *filestore.Store, opts Options) (*Server, error) {
	if store == nil {
		return nil, errors.New("xds: nil store")
	}
	st := opts.Settings
	if st == (Settings{}) {
		st = DefaultSettings()
	}
	if err := st.Validate(); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "xds")
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{store: store, settings: st, mesh: opts.Mesh, logger: logger, metrics: m, codec: newRequestCodec(), ready: make(chan struct{})}
	s.cache = newCache(logger, m)
	if opts.ControlPlaneID != "" {
		s.cache.controlPlane = &corev3.ControlPlane{Identifier: opts.ControlPlaneID}
	}
	s.streams = newStreams(logger, m, s.cache, opts.Observer)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// State-of-the-world ADS streams are served by sotwADS: one response
	// channel per stream (go-control-plane's default mode makes one per
	// request, which hides from the cache what a stream holds), and a
	// subscription kept as is when a request repeats it. Delta streams are
	// go-control-plane's.
	cb := s.streams.callbacks()
	s.xds = serverv3.NewServerAdvanced(restv3.NewServer(s.cache, cb), &sotwADS{ctx: s.ctx, cache: s.cache, callbacks: cb}, deltav3.NewServer(s.ctx, s.cache, cb))
	return s, nil
}

// Register adds the xDS services (ADS, SotW and delta) to a gRPC server
// built with GRPCServerOptions. The same Server may be registered on
// several gRPC servers (plaintext 15010, TLS 15012).
func (s *Server) Register(gs *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, s.xds)
}

// Serve serves plaintext xDS on lis until ctx ends. It does not run the
// push engine: call Run too.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	gs := grpc.NewServer(append(s.GRPCServerOptions(), grpc.MaxConcurrentStreams(1<<20))...)
	s.Register(gs)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case <-ctx.Done():
		gs.Stop()
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("xds: serving on %s: %w", lis.Addr(), err)
	}
}

// Ready is closed once the first config snapshot is served.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Run builds the model from the Store and pushes it, then pushes every
// debounced change until ctx ends. When Run returns, the xDS streams end.
func (s *Server) Run(ctx context.Context) error {
	defer s.cancel()
	sub := s.store.Subscribe()
	defer sub.Close()
	sub.Take()
	prev := s.pushSnapshot(nil, filestore.Changes{}, time.Now())
	close(s.ready)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.C():
		}
		first := time.Now()
		if !s.debounce(ctx, sub, first) {
			return nil
		}
		ch := sub.Take()
		if len(ch.Keys) == 0 {
			continue
		}
		prev = s.pushSnapshot(prev, ch, first)
	}
}

// debounce waits until the Store has been quiet for DebounceQuiet, or
// DebounceMax has passed since first. It returns false when ctx ends.
func (s *Server) debounce(ctx context.Context, sub *filestore.Subscription, first time.Time) bool {
	quiet := time.NewTimer(s.settings.DebounceQuiet)
	defer quiet.Stop()
	deadline := time.NewTimer(s.settings.DebounceMax - time.Since(first))
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return true
		case <-quiet.C:
			return true
		case <-sub.C():
			quiet.Reset(s.settings.DebounceQuiet)
		}
	}
}

// pushSnapshot builds the model for the Store's current snapshot and pushes
// it. When the Store snapshot is exactly prev's plus ch (no change arrived
// since ch was taken), the model is rebuilt from prev (model.Rebuild: only
// the affected services' endpoints when only WorkloadEntries changed).
func (s *Server) pushSnapshot(prev *model.Snapshot, ch filestore.Changes, first time.Time) *model.Snapshot {
	start := time.Now()
	fs := s.store.Snapshot()
	var snap *model.Snapshot
	if prev != nil && fs.Revision == ch.Revision {
		snap = model.Rebuild(prev, fs, ch.Keys)
	} else {
		snap = model.BuildWith(fs, s.mesh)
	}
	s.metrics.modelSeconds.Observe(time.Since(start).Seconds())
	changes := len(ch.Keys)
	if changes > 0 {
		s.metrics.debouncedEvents.Observe(float64(changes))
	}
	st := s.cache.push(snap, first)
	svcs, eps, routing := snap.Objects()
	s.logger.Info("pushed config", "version", Version(snap), "edsOnly", st.edsOnly, "changes", changes,
		"services", svcs, "endpoints", eps, "routing", routing, "groups", st.groups, "responses", st.responses,
		"took", time.Since(start).Round(time.Microsecond))
	for _, p := range snap.Problems {
		s.logger.Warn("config not used", "object", p.Object, "problem", p.Message)
	}
	return snap
}
