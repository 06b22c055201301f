package xds

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	restv3 "github.com/envoyproxy/go-control-plane/pkg/server/rest/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/mcp"
	"google.golang.org/grpc"
)

// Options configure a Server.
type Options struct {
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Observer, when set, learns about streams and agents' health reports
	// (auto-registration).
	Observer Observer
	// ControlPlaneID, when set, is every response's control_plane.identifier
	// (the server's name and build), so a proxy's config dump tells which
	// control plane sent it.
	ControlPlaneID string
	// Pushed, when set, is called with each snapshot once it is pushed.
	Pushed func(*model.Snapshot)
	// Rollout, when set, stages every git commit: canaries first, the
	// rest after a bake time (rollout.go).
	Rollout *RolloutOptions
	// MCPAuthorize decides which streams may read the mesh's config over
	// MCP (mcp.go): nil refuses every one.
	MCPAuthorize mcp.Authorize
}

// Server serves model snapshots over xDS. Build it with NewServer, register
// it on gRPC servers with Register (or use Serve), and run its push engine
// on a model.Feed with Run.
type Server struct {
	logger  *slog.Logger
	metrics *metrics
	// cache serves every proxy but a rollout's canaries, cand those
	// (rollout.go); arms dispatches the streams between them.
	cache   *cache
	cand    *cache
	arms    *arms
	codec   *requestCodec
	xds     serverv3.Server
	streams *streams
	// mcp serves the Store's config to MCP clients (mcp.go).
	mcp *mcp.Server

	ctx    context.Context // ends the xDS streams when Run returns
	cancel context.CancelFunc

	ready chan struct{} // closed after the first snapshot is pushed
	// pushed is Options.Pushed.
	pushed func(*model.Snapshot)

	// pushMu orders pushes and rollout changes; last is the latest
	// snapshot the feed made, and canariesOn says the canaries are on the
	// candidate cache. Guarded by pushMu.
	pushMu     sync.Mutex
	last       *model.Snapshot
	canariesOn bool
	// rollout is nil without Options.Rollout.
	rollout *rollout
}

// NewServer returns a Server.
func NewServer(opts Options) (*Server, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "xds")
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{logger: logger, metrics: m, codec: newRequestCodec(), ready: make(chan struct{}), pushed: opts.Pushed}
	s.cache, s.cand = newCache(logger, m), newCache(logger.With("arm", "candidate"), m)
	if opts.ControlPlaneID != "" {
		s.cache.controlPlane = &corev3.ControlPlane{Identifier: opts.ControlPlaneID}
		s.cand.controlPlane = s.cache.controlPlane
	}
	s.arms = newArms(s.cache, s.cand)
	s.mcp = mcp.NewServer(mcp.Options{Logger: logger, Authorize: opts.MCPAuthorize, ControlPlane: s.cache.controlPlane})
	if opts.Rollout != nil {
		if err := opts.Rollout.Validate(); err != nil {
			return nil, err
		}
		ro := *opts.Rollout
		ro.Selector = maps.Clone(ro.Selector)
		s.rollout = &rollout{opts: ro, held: m.rolloutHeld, phase: PhaseIdle}
	}
	s.streams = newStreams(logger, m, s.arms, opts.Observer)
	s.streams.nacked = s.rolloutNack
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// ADS streams are served by vmesh's own stream loops, sotwADS and
	// deltaADS, so that every stream's subscriptions (what it asks for and
	// holds) are vmesh's outright: one response channel per stream
	// (go-control-plane's default SotW mode makes one per request, which
	// hides from the cache what a stream holds), and a subscription kept
	// as is when a request repeats it. go-control-plane supplies the gRPC
	// service, the callback and cache interfaces and the protocol types.
	cb := s.streams.callbacks()
	s.xds = serverv3.NewServerAdvanced(restv3.NewServer(s.arms, cb), &sotwADS{ctx: s.ctx, cache: s.arms, callbacks: cb}, &deltaADS{ctx: s.ctx, cache: s.arms, callbacks: cb})
	return s, nil
}

// Register adds the xDS services (ADS, SotW and delta) to a gRPC server
// built with GRPCServerOptions. The same Server may be registered on
// several gRPC servers (plaintext 15010, TLS 15012).
func (s *Server) Register(gs *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, &adsMux{Server: s.xds, mcp: s.mcp})
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

// Run pushes every snapshot feed makes, the first one at once, until ctx
// ends. When Run returns, the xDS streams end.
func (s *Server) Run(ctx context.Context, feed *model.Feed) error {
	defer s.cancel()
	first := true
	return feed.Run(ctx, func(u model.Update) {
		s.push(u)
		if s.pushed != nil {
			s.pushed(u.Snapshot)
		}
		if first {
			close(s.ready)
			first = false
		}
	})
}

// push hands a snapshot to the cache, which answers every stream whose
// config changed.
func (s *Server) push(u model.Update) {
	start := time.Now()
	snap := u.Snapshot
	s.metrics.modelSeconds.Observe(u.Built.Seconds())
	if u.Changes > 0 {
		s.metrics.debouncedEvents.Observe(float64(u.Changes))
	}
	s.pushMu.Lock()
	s.last = snap
	var st pushStats
	if s.rollout != nil {
		st = s.rolloutPushLocked(snap, u.First)
	} else {
		st = s.cache.push(snap, u.First)
	}
	s.pushMu.Unlock()
	// MCP clients read the latest config, as /debug/config shows it,
	// whatever a rollout holds back from the proxies.
	s.mcp.Update(snap.Source(), Version(snap))
	svcs, eps, routing := snap.Objects()
	s.logger.Info("pushed config", "version", Version(snap), "edsOnly", st.edsOnly, "changes", u.Changes,
		"leading", u.Leading, "services", svcs, "endpoints", eps, "routing", routing, "groups", st.groups, "responses", st.responses,
		"took", (u.Built + time.Since(start)).Round(time.Microsecond))
	// Config the model does not use is not logged here, at a push: it is a
	// warning found when the config is read (filestore/warnings.go and
	// model/analysis), logged once per change by its source and shown in
	// /debug/config and vmesh_config_warnings.
}
