// Package xdsproxy is the agent's xDS proxy: Envoy opens its ADS stream (state
// of the world or delta) on a Unix socket, and the proxy forwards it, message
// by message in both directions, to the control plane over mTLS with the
// VM's current certificate. It also carries the workload's health to the
// control plane the way Istio's agent does: a request of type
// istio.v1.HealthInformation on the ADS stream, with an empty error_detail
// when healthy and the probe's failure in error_detail when not. Without an
// Envoy (proxyless-only VMs) the agent keeps a stream of its own for that
// (RunNodeStream).
package xdsproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/agents/internal/failover"
	"github.com/vmesh/vmesh/internal/refusal"
	"github.com/vmesh/vmesh/internal/retry"
	"github.com/vmesh/vmesh/xds/nds"
	networking "istio.io/api/networking/v1alpha3"
)

// HealthInfoType is the type URL of health reports (Istio's).
const HealthInfoType = "type.googleapis.com/istio.v1.HealthInformation"

// CredentialsType is the type URL of the agent's credential reports
// (vmesh's, xds.CredentialsType): a request on each of its Envoy's ADS
// streams whose resource names are the file credentials' secrets the
// agent holds (sds.Server.Held), sent after the stream's first request
// and again whenever they change. The control plane never answers it.
const CredentialsType = "type.googleapis.com/vmesh.v1.HeldCredentials"

// Config configures a Proxy.
type Config struct {
	// Upstream is host:port of the control plane's xDS port (TLS).
	Upstream string
	// Upstreams are more replicas of the control plane to fail over to,
	// after Upstream: each new upstream connection goes to the first of
	// them that accepts, so streams move to a live replica when one dies.
	Upstreams []string
	// TLS returns the client TLS configuration for a new upstream
	// connection (trust bundle and current certificate); each proxied stream
	// gets its own connection, so a rotated certificate is used by the next
	// stream.
	TLS func() *tls.Config
	// RetryMin and RetryMax bound the node stream's reconnect backoff.
	RetryMin, RetryMax time.Duration
	// NameTable, when set, makes the node stream subscribe to the name
	// table (NDS) and receives each one.
	NameTable func(nds.Table)
	// WorkloadGroup, when set, makes the node stream subscribe to the
	// WorkloadGroup of that name (in the node's namespace), and
	// OnWorkloadGroup receives it on every change: nil when the control
	// plane has no such group.
	WorkloadGroup   string
	OnWorkloadGroup func(*networking.WorkloadGroup)
	// OnUnauthenticated, when set, is called with the error of every
	// stream (the node stream or a proxied one) the control plane ended
	// or refused as Unauthenticated: it no longer accepts the certificate
	// (revoked, expired). The agent renews the certificate then, and stops
	// if the renewal is refused for good.
	OnUnauthenticated func(error)
}

// WorkloadGroupType is the type URL of the WorkloadGroups the control plane
// serves to agents (xds.WorkloadGroupType).
const WorkloadGroupType = "type.googleapis.com/istio.networking.v1alpha3.WorkloadGroup"

// Proxy forwards ADS streams and health reports. It is safe for concurrent
// use.
type Proxy struct {
	cfg Config
	log *slog.Logger
	met *metrics

	connected atomic.Bool

	mu      sync.Mutex
	health  *health.Status
	held    []string // nil until ReportCredentials
	streams map[*upstream]struct{}
	// refused gets the first permanent refusal a proxied stream met; Serve
	// returns it.
	refused chan error
}

// New returns a Proxy. Metrics are registered on reg when it is not nil.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(cfg.Upstream); err != nil {
		return nil, fmt.Errorf("xdsproxy: upstream %q: %w", cfg.Upstream, err)
	}
	if err := failover.Validate(cfg.upstreams()); err != nil {
		return nil, fmt.Errorf("xdsproxy: %w", err)
	}
	if cfg.TLS == nil {
		return nil, errors.New("xdsproxy: no TLS configuration")
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 500 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(30*time.Second, cfg.RetryMin)
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Proxy{cfg: cfg, log: logger, met: newMetrics(reg), streams: map[*upstream]struct{}{}, refused: make(chan error, 1)}, nil
}

// upstream is one open stream to the control plane that health reports
// can be injected into.
type upstream struct {
	mu   sync.Mutex // serialises Send
	send func(*health.Status) error
	// sendHeld sends a credential report; nil on the agent's own stream
	// (its Envoy's streams carry them).
	sendHeld func([]string) error
	started  bool // the first (node-carrying) request went out
}

// ReportCredentials records the credential secrets the agent holds and
// sends them on every open stream of its Envoy (CredentialsType); streams
// opened later send them too.
func (p *Proxy) ReportCredentials(held []string) error {
	held = append([]string{}, held...)
	p.mu.Lock()
	p.held = held
	ups := make([]*upstream, 0, len(p.streams))
	for u := range p.streams {
		ups = append(ups, u)
	}
	p.mu.Unlock()
	var errs []error
	for _, u := range ups {
		u.mu.Lock()
		if u.started && u.sendHeld != nil {
			if err := u.sendHeld(held); err != nil {
				errs = append(errs, fmt.Errorf("xdsproxy: credential report: %w", err))
			}
		}
		u.mu.Unlock()
	}
	return errors.Join(errs...)
}

// CredentialsRequest is the SotW request that reports held.
func CredentialsRequest(held []string) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{TypeUrl: CredentialsType, ResourceNames: held}
}

// DeltaCredentialsRequest is the delta request that reports held.
func DeltaCredentialsRequest(held []string) *discoveryv3.DeltaDiscoveryRequest {
	return &discoveryv3.DeltaDiscoveryRequest{TypeUrl: CredentialsType, ResourceNamesSubscribe: held}
}

// Report records the workload's health and sends it on every open stream
// to the control plane; streams opened later send it too. It implements
// health.Reporter.
func (p *Proxy) Report(_ context.Context, s health.Status) error {
	p.mu.Lock()
	p.health = &s
	ups := make([]*upstream, 0, len(p.streams))
	for u := range p.streams {
		ups = append(ups, u)
	}
	p.mu.Unlock()
	var errs []error
	for _, u := range ups {
		u.mu.Lock()
		if u.started {
			errs = append(errs, p.sendHealth(u, &s))
		}
		u.mu.Unlock()
	}
	return errors.Join(errs...)
}

func (p *Proxy) sendHealth(u *upstream, s *health.Status) error {
	if err := u.send(s); err != nil {
		return fmt.Errorf("xdsproxy: health report: %w", err)
	}
	label := "healthy"
	if !s.Healthy {
		label = "unhealthy"
	}
	p.met.health.WithLabelValues(label).Inc()
	return nil
}

func (p *Proxy) currentHealth() *health.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health
}

func errorDetail(s *health.Status) *statuspb.Status {
	if s.Healthy {
		return nil
	}
	msg := s.Message
	if msg == "" {
		msg = "unhealthy"
	}
	return &statuspb.Status{Code: int32(codes.Internal), Message: msg}
}

// HealthRequest is the SotW request that reports s.
func HealthRequest(s health.Status) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{TypeUrl: HealthInfoType, ErrorDetail: errorDetail(&s)}
}

// DeltaHealthRequest is the delta request that reports s.
func DeltaHealthRequest(s health.Status) *discoveryv3.DeltaDiscoveryRequest {
	return &discoveryv3.DeltaDiscoveryRequest{TypeUrl: HealthInfoType, ErrorDetail: errorDetail(&s)}
}

// register tracks u until the returned func is called.
func (p *Proxy) register(u *upstream) func() {
	p.mu.Lock()
	p.streams[u] = struct{}{}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.streams, u)
		p.mu.Unlock()
	}
}

// forwarded marks u started after its first request went out and sends the
// current health and held credentials, if known, right behind it.
func (p *Proxy) forwarded(u *upstream) error {
	if u.started {
		return nil
	}
	u.started = true
	if h := p.currentHealth(); h != nil {
		if err := p.sendHealth(u, h); err != nil {
			return err
		}
	}
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	if held != nil && u.sendHeld != nil {
		if err := u.sendHeld(held); err != nil {
			return fmt.Errorf("xdsproxy: credential report: %w", err)
		}
	}
	return nil
}

// upstreams lists Upstream and the replicas to fail over to.
func (c Config) upstreams() []string { return append([]string{c.Upstream}, c.Upstreams...) }

// dial opens a fresh connection to the control plane: the first replica
// that accepts.
func (p *Proxy) dial() (*grpc.ClientConn, error) {
	tlsCfg := p.cfg.TLS()
	if len(p.cfg.Upstreams) > 0 && tlsCfg.ServerName != "" {
		if host, _, _ := net.SplitHostPort(p.cfg.Upstream); tlsCfg.ServerName == host {
			// The default name is the first replica's host: each replica
			// is verified against its own host instead.
			tlsCfg = tlsCfg.Clone()
			tlsCfg.ServerName = ""
		}
	}
	cc, err := failover.Dial(p.cfg.upstreams(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		return nil, fmt.Errorf("xdsproxy: dial %s: %w", strings.Join(p.cfg.upstreams(), ","), err)
	}
	return cc, nil
}

// Serve serves the ADS proxy on lis until ctx is done. It returns a
// *refusal.PermanentError when the control plane refused a proxied stream
// for good (an unknown WorkloadGroup, say): the data plane would only be
// refused again.
func (p *Proxy) Serve(ctx context.Context, lis net.Listener) error {
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, &adsServer{p: p})
	done := make(chan error, 1)
	go func() { done <- g.Serve(lis) }()
	p.log.Info("xDS proxy serving", "listen", lis.Addr().String(), "upstream", strings.Join(p.cfg.upstreams(), ","))
	select {
	case <-ctx.Done():
		g.Stop()
		<-done
		return nil
	case err := <-done:
		return fmt.Errorf("xdsproxy: serve: %w", err)
	case err := <-p.refused:
		g.Stop()
		<-done
		return err
	}
}

type adsServer struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	p *Proxy
}

// stream abstracts the SotW and delta message types for pipe.
type stream[Req, Resp any] interface {
	Send(Resp) error
	Recv() (Req, error)
}

type clientStream[Req, Resp any] interface {
	Send(Req) error
	Recv() (Resp, error)
	CloseSend() error
}

func (a *adsServer) StreamAggregatedResources(down discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return pipe(a.p, "sotw", down,
		func(ctx context.Context, cc *grpc.ClientConn) (clientStream[*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse], error) {
			return discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		},
		func(s *health.Status) *discoveryv3.DiscoveryRequest { return HealthRequest(*s) }, CredentialsRequest)
}

func (a *adsServer) DeltaAggregatedResources(down discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return pipe(a.p, "delta", down,
		func(ctx context.Context, cc *grpc.ClientConn) (clientStream[*discoveryv3.DeltaDiscoveryRequest, *discoveryv3.DeltaDiscoveryResponse], error) {
			return discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
		},
		func(s *health.Status) *discoveryv3.DeltaDiscoveryRequest { return DeltaHealthRequest(*s) }, DeltaCredentialsRequest)
}

// pipe forwards one downstream stream to a new upstream stream until either
// side ends; the downstream gets the upstream's final status.
func pipe[Req, Resp any](p *Proxy, protocol string, down interface {
	stream[Req, Resp]
	grpc.ServerStream
}, open func(context.Context, *grpc.ClientConn) (clientStream[Req, Resp], error), healthReq func(*health.Status) Req, heldReq func([]string) Req) error {
	p.met.streams.WithLabelValues(protocol).Inc()
	defer p.met.streams.WithLabelValues(protocol).Dec()
	cc, err := p.dial()
	if err != nil {
		p.met.upstream.WithLabelValues("error").Inc()
		return status.Error(codes.Unavailable, err.Error())
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(down.Context())
	defer cancel()
	if md, ok := metadata.FromIncomingContext(down.Context()); ok {
		// Pass on what the data plane sent (e.g. its user agent), minus
		// transport headers grpc sets itself.
		md = md.Copy()
		for _, k := range []string{":authority", "content-type", "user-agent", "te"} {
			delete(md, k)
		}
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	up, err := open(ctx, cc)
	if err != nil {
		p.met.upstream.WithLabelValues("error").Inc()
		return status.Error(codes.Unavailable, fmt.Sprintf("xdsproxy: open upstream stream: %v", err))
	}
	p.met.upstream.WithLabelValues("ok").Inc()
	u := &upstream{}
	u.send = func(s *health.Status) error { return up.Send(healthReq(s)) }
	u.sendHeld = func(held []string) error { return up.Send(heldReq(held)) }
	defer p.register(u)()

	errc := make(chan error, 2)
	go func() { // downstream -> upstream
		for {
			req, err := down.Recv()
			if err != nil {
				// Under u.mu: a health or credential report may be
				// sending on up (grpc forbids CloseSend beside SendMsg).
				u.mu.Lock()
				up.CloseSend()
				u.mu.Unlock()
				if errors.Is(err, io.EOF) {
					err = nil
				}
				errc <- err
				return
			}
			u.mu.Lock()
			err = up.Send(req)
			if err == nil {
				err = p.forwarded(u)
			}
			u.mu.Unlock()
			if err != nil {
				errc <- err
				return
			}
			p.met.messages.WithLabelValues("upstream").Inc()
		}
	}()
	go func() { // upstream -> downstream
		for {
			resp, err := up.Recv()
			if err != nil {
				errc <- err
				return
			}
			if err := down.Send(resp); err != nil {
				errc <- err
				return
			}
			p.met.messages.WithLabelValues("downstream").Inc()
		}
	}()
	err = <-errc
	cancel()
	if err == nil {
		// The data plane closed its side: wait for the upstream to finish.
		err = <-errc
	}
	if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
		return nil
	}
	p.unauthenticated(err)
	if perr := refusal.Permanent("xDS stream", err); perr != nil {
		select {
		case p.refused <- perr:
		default:
		}
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unavailable, err.Error())
}

// RunNodeStream keeps an ADS stream of the agent's own open to the control
// plane, identified by node, until ctx is done, reconnecting with jittered
// backoff. Its first request carries the node and the current health:
// healthy when nothing was reported yet, so an agent that runs a probe
// reports "not ready yet" before starting the stream. With
// Config.NameTable set it also subscribes to the name table (NDS, as
// Istio's agent does) and hands every table received to it. It is the
// stream that registers the VM (its node carries the WorkloadGroup) and
// reports its health. It returns a *refusal.PermanentError when the
// control plane refused the stream for good.
func (p *Proxy) RunNodeStream(ctx context.Context, node *corev3.Node) error {
	backoff := retry.New(p.cfg.RetryMin, p.cfg.RetryMax)
	for {
		start := time.Now()
		err := p.nodeStream(ctx, node)
		p.connected.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if perr := refusal.Permanent("registration", err); perr != nil {
			return perr
		}
		p.unauthenticated(err)
		if time.Since(start) > p.cfg.RetryMax {
			backoff.Reset()
		}
		wait := backoff.Next()
		p.log.Warn("node stream to the control plane ended", "upstream", strings.Join(p.cfg.upstreams(), ","), "retry_in", wait, "error", err)
		if !retry.Sleep(ctx, wait) {
			return nil
		}
	}
}

// unauthenticated calls Config.OnUnauthenticated when err is an
// Unauthenticated status.
func (p *Proxy) unauthenticated(err error) {
	if p.cfg.OnUnauthenticated != nil && status.Code(err) == codes.Unauthenticated {
		p.cfg.OnUnauthenticated(err)
	}
}

// Connected reports whether the agent's own stream is up: open, and (when
// it asks for the name table) answered.
func (p *Proxy) Connected() bool { return p.connected.Load() }

func (p *Proxy) nodeStream(ctx context.Context, node *corev3.Node) error {
	p.met.streams.WithLabelValues("node").Inc()
	defer p.met.streams.WithLabelValues("node").Dec()
	cc, err := p.dial()
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		p.met.upstream.WithLabelValues("error").Inc()
		return fmt.Errorf("open stream: %w", err)
	}
	p.met.upstream.WithLabelValues("ok").Inc()
	u := &upstream{}
	first := true
	send := func(req *discoveryv3.DiscoveryRequest) error {
		if first {
			req.Node = node
			first = false
		}
		return up.Send(req)
	}
	u.send = func(s *health.Status) error { return send(HealthRequest(*s)) }
	defer p.register(u)()
	u.mu.Lock()
	h := p.currentHealth()
	if h == nil {
		h = &health.Status{Healthy: true}
	}
	err = p.sendHealth(u, h)
	u.started = err == nil
	if err == nil && p.cfg.NameTable != nil {
		err = send(&discoveryv3.DiscoveryRequest{TypeUrl: nds.TypeURL})
	}
	if err == nil && p.cfg.WorkloadGroup != "" && p.cfg.OnWorkloadGroup != nil {
		err = send(&discoveryv3.DiscoveryRequest{TypeUrl: WorkloadGroupType, ResourceNames: []string{p.cfg.WorkloadGroup}})
	}
	u.mu.Unlock()
	if err != nil {
		return err
	}
	if p.cfg.NameTable == nil {
		p.connected.Store(true)
	}
	for {
		// Responses other than name tables and the WorkloadGroup (the
		// control plane may answer health reports) are drained; Recv fails
		// when the stream ends.
		resp, err := up.Recv()
		if err != nil {
			return err
		}
		var ack *discoveryv3.DiscoveryRequest
		switch {
		case resp.GetTypeUrl() == nds.TypeURL && p.cfg.NameTable != nil:
			ack = p.takeNameTable(resp)
		case resp.GetTypeUrl() == WorkloadGroupType && p.cfg.OnWorkloadGroup != nil:
			ack = p.takeWorkloadGroup(resp)
		default:
			continue
		}
		u.mu.Lock()
		err = send(ack)
		u.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// ack returns the ACK of resp, or its NACK with err.
func ack(resp *discoveryv3.DiscoveryResponse, names []string, err error) *discoveryv3.DiscoveryRequest {
	a := &discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: names}
	if err != nil {
		a.VersionInfo = ""
		a.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
	}
	return a
}

// takeNameTable hands an NDS response to Config.NameTable and returns its
// ACK (or NACK).
func (p *Proxy) takeNameTable(resp *discoveryv3.DiscoveryResponse) *discoveryv3.DiscoveryRequest {
	t, err := nameTableOf(resp)
	if err != nil {
		p.met.nameTables.WithLabelValues("nack").Inc()
		p.log.Warn("rejected name table", "version", resp.GetVersionInfo(), "error", err)
		return ack(resp, nil, err)
	}
	p.met.nameTables.WithLabelValues("ack").Inc()
	p.cfg.NameTable(t)
	p.connected.Store(true)
	return ack(resp, nil, nil)
}

// takeWorkloadGroup hands the WorkloadGroup of a response (nil when it
// holds none) to Config.OnWorkloadGroup and returns its ACK (or NACK).
func (p *Proxy) takeWorkloadGroup(resp *discoveryv3.DiscoveryResponse) *discoveryv3.DiscoveryRequest {
	names := []string{p.cfg.WorkloadGroup}
	var wg *networking.WorkloadGroup
	for _, a := range resp.GetResources() {
		m := &networking.WorkloadGroup{}
		if err := a.UnmarshalTo(m); err != nil {
			p.log.Warn("rejected WorkloadGroup", "version", resp.GetVersionInfo(), "error", err)
			return ack(resp, names, fmt.Errorf("WorkloadGroup %s: %w", p.cfg.WorkloadGroup, err))
		}
		wg = m
	}
	p.cfg.OnWorkloadGroup(wg)
	return ack(resp, names, nil)
}

// nameTableOf reads the name table of an NDS response: one NameTable, or
// none (an empty table).
func nameTableOf(resp *discoveryv3.DiscoveryResponse) (nds.Table, error) {
	out := nds.Table{}
	for _, a := range resp.GetResources() {
		t, err := nds.FromAny(a)
		if err != nil {
			return nil, err
		}
		for h, ni := range t {
			out[h] = ni
		}
	}
	return out, nil
}
