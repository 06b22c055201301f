package mcp

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// Authorize decides whether the stream whose context it is given may read
// the mesh's config over MCP. It returns who the client is (its mesh
// identity, or how it was let in), shown in /debug/syncz and the log, or
// the gRPC status error the stream ends with.
type Authorize func(ctx context.Context) (identity string, err error)

// Options configure a Server.
type Options struct {
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
	// Authorize decides who may read config; nil refuses every stream.
	Authorize Authorize
	// ControlPlane, when set, is every response's control_plane.
	ControlPlane *corev3.ControlPlane
}

// Server serves the Store's objects over state-of-the-world ADS, one
// response per subscribed type URL: every object of the type (SotW), at
// the version of the snapshot the type last changed at. A snapshot sends a
// client only the types whose content changed; a type URL vmesh has no
// kind for (EnvoyFilter, Telemetry, MeshConfig, ...) is answered once,
// with no resource, as istiod's api generator answers it.
type Server struct {
	logger       *slog.Logger
	authorize    Authorize
	controlPlane *corev3.ControlPlane

	mu sync.Mutex
	// snap and version are the latest snapshot Update gave; seq counts
	// the updates.
	snap    *store.Snapshot
	version string
	seq     uint64
	types   map[store.Kind]*typeState
	clients map[*client]struct{}
}

// typeState is one kind's resources at a snapshot. A push compares the
// pointer a stream was sent with the current one: a new typeState is made
// only when the content changed.
type typeState struct {
	seq     uint64 // the update it was last looked at
	version string // the version its content last changed at
	hash    [sha256.Size]byte
	// enc holds each object's encoding, by object (Store objects never
	// change), for the next update to reuse.
	enc       map[*store.Object]*anypb.Any
	resources []*anypb.Any
}

// NewServer returns a Server.
func NewServer(opts Options) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{logger: logger.With("component", "mcp"), authorize: opts.Authorize, controlPlane: opts.ControlPlane,
		types: map[store.Kind]*typeState{}, clients: map[*client]struct{}{}}
}

// Update serves snap from now on, at version (xds.Version: the Store
// revision and the git commit). Each client is sent the types that
// changed.
func (s *Server) Update(snap *store.Snapshot, version string) {
	if snap == nil {
		return
	}
	s.mu.Lock()
	s.snap, s.version = snap, version
	s.seq++
	for c := range s.clients {
		c.poke()
	}
	s.mu.Unlock()
}

// stateLocked returns kind's state at the latest update, encoding only the
// objects the previous state did not hold.
func (s *Server) stateLocked(kind store.Kind) (*typeState, error) {
	prev := s.types[kind]
	if prev != nil && prev.seq == s.seq {
		return prev, nil
	}
	objs := slices.Clone(s.snap.List(kind))
	slices.SortFunc(objs, compareObjects)
	next := &typeState{seq: s.seq, version: s.version, enc: make(map[*store.Object]*anypb.Any, len(objs)), resources: make([]*anypb.Any, 0, len(objs))}
	h := sha256.New()
	for _, o := range objs {
		a := prev.cached(o)
		if a == nil {
			var err error
			if a, err = Encode(o); err != nil {
				return nil, err
			}
		}
		next.enc[o] = a
		next.resources = append(next.resources, a)
		h.Write([]byte(o.Namespace + "/" + o.Name + "\x00" + strconv.Itoa(len(a.Value)) + "\x00"))
		h.Write(a.Value)
	}
	h.Sum(next.hash[:0])
	if prev != nil && bytes.Equal(prev.hash[:], next.hash[:]) {
		prev.seq, prev.enc = s.seq, next.enc
		return prev, nil
	}
	s.types[kind] = next
	return next, nil
}

func (t *typeState) cached(o *store.Object) *anypb.Any {
	if t == nil {
		return nil
	}
	return t.enc[o]
}

// Stream is the ADS stream Serve serves.
type Stream = discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer

// Serve serves one SotW ADS stream whose first request, already received,
// is first, until the client ends it or ctx (the stream's) ends.
func (s *Server) Serve(stream Stream, first *discoveryv3.DiscoveryRequest) error {
	ctx := stream.Context()
	if s.authorize == nil {
		return status.Error(codes.PermissionDenied, "this server serves no config over MCP")
	}
	identity, err := s.authorize(ctx)
	if err != nil {
		s.logger.Warn("MCP client refused", "node", first.GetNode().GetId(), "error", err)
		return err
	}
	node := first.GetNode()
	if node.GetId() == "" {
		return status.Error(codes.InvalidArgument, "the first request of an MCP stream names no node id")
	}
	c := &client{id: node.GetId(), namespace: namespaceOf(node), identity: identity, connected: time.Now(),
		wake: make(chan struct{}, 1), subs: map[string]*sub{}}
	s.mu.Lock()
	s.clients[c] = struct{}{}
	s.mu.Unlock()
	s.logger.Info("MCP client connected", "client", c.id, "identity", identity)
	defer func() {
		s.mu.Lock()
		delete(s.clients, c)
		s.mu.Unlock()
		s.logger.Info("MCP client disconnected", "client", c.id)
	}()

	reqs := make(chan *discoveryv3.DiscoveryRequest)
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	s.request(c, first)
	for {
		if err := s.send(stream, c); err != nil {
			return err
		}
		select {
		case req := <-reqs:
			s.request(c, req)
		case <-c.wake:
		case err := <-errc:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

// request applies one request to the stream's subscriptions: a new type
// URL subscribes; the nonce of the last response ACKs or NACKs it; a
// request without a nonce for a subscribed type asks for it again.
func (s *Server) request(c *client, req *discoveryv3.DiscoveryRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := req.GetTypeUrl()
	sb := c.subs[t]
	switch {
	case sb == nil:
		kind, served := KindOf(t)
		c.subs[t] = &sub{kind: kind, served: served, fresh: true}
	case req.GetResponseNonce() == "":
		sb.fresh = true
	case req.GetResponseNonce() != sb.nonce:
		// An answer to a superseded response: the newer one is pending.
	case req.GetErrorDetail() != nil:
		msg := req.GetErrorDetail().GetMessage()
		if sb.status.Nack != msg {
			s.logger.Warn("MCP client rejected config (NACK)", "client", c.id, "type", t, "version", sb.status.Sent, "error", msg)
		}
		sb.status.Nack, sb.status.NackVersion = msg, sb.status.Sent
	default:
		sb.status.Acked, sb.status.Nack, sb.status.NackVersion = sb.status.Sent, "", ""
	}
}

// send sends every subscribed type that is new, asked for again, or
// changed since it was last sent.
func (s *Server) send(stream Stream, c *client) error {
	s.mu.Lock()
	if s.snap == nil {
		s.mu.Unlock()
		return nil // nothing to serve before the first snapshot
	}
	c.mu.Lock()
	var out []*discoveryv3.DiscoveryResponse
	for _, t := range slices.Sorted(maps.Keys(c.subs)) {
		sb := c.subs[t]
		var ts *typeState
		if sb.served {
			var err error
			if ts, err = s.stateLocked(sb.kind); err != nil {
				c.mu.Unlock()
				s.mu.Unlock()
				return status.Errorf(codes.Internal, "encoding %s: %v", sb.kind, err)
			}
		}
		if !sb.fresh && ts == sb.sent {
			continue
		}
		version := s.version
		var resources []*anypb.Any
		if ts != nil {
			version, resources = ts.version, ts.resources
		}
		c.nonce++
		sb.fresh, sb.sent, sb.nonce = false, ts, strconv.FormatUint(c.nonce, 10)
		sb.status.Sent, sb.status.Resources = version, len(resources)
		out = append(out, &discoveryv3.DiscoveryResponse{VersionInfo: version, Resources: resources, TypeUrl: t, Nonce: sb.nonce, ControlPlane: s.controlPlane})
	}
	c.mu.Unlock()
	s.mu.Unlock()
	for _, r := range out {
		if err := stream.Send(r); err != nil {
			return err
		}
	}
	return nil
}

// client is one MCP stream.
type client struct {
	id, namespace, identity string
	connected               time.Time
	wake                    chan struct{}

	mu    sync.Mutex // guards what follows
	subs  map[string]*sub
	nonce uint64
}

func (c *client) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// sub is one subscribed type URL of a stream.
type sub struct {
	kind   store.Kind
	served bool
	// fresh says the type is to be sent whatever was sent before; sent is
	// the state last sent (nil for a type vmesh does not serve).
	fresh  bool
	sent   *typeState
	nonce  string
	status TypeStatus
}

// TypeStatus is the sync state of one type URL on one MCP stream.
type TypeStatus struct {
	// Sent is the version_info of the last response sent.
	Sent string `json:"sent,omitempty"`
	// Acked is the last version the client accepted.
	Acked string `json:"acked,omitempty"`
	// Nack is the error of the last rejected response, cleared by an ACK.
	Nack string `json:"nack,omitempty"`
	// NackVersion is the version that was rejected.
	NackVersion string `json:"nackVersion,omitempty"`
	// Resources is how many resources the last response carried.
	Resources int `json:"resources"`
}

// ClientStatus is one connected MCP client.
type ClientStatus struct {
	ID        string
	Namespace string
	// Identity is who Authorize said the client is.
	Identity  string
	Connected time.Time
	// Types holds the sync state by type URL.
	Types map[string]TypeStatus
}

// Clients returns the connected MCP clients, sorted by id.
func (s *Server) Clients() []ClientStatus {
	s.mu.Lock()
	cs := slices.Collect(maps.Keys(s.clients))
	s.mu.Unlock()
	out := make([]ClientStatus, 0, len(cs))
	for _, c := range cs {
		st := ClientStatus{ID: c.id, Namespace: c.namespace, Identity: c.identity, Connected: c.connected, Types: map[string]TypeStatus{}}
		c.mu.Lock()
		for t, sb := range c.subs {
			st.Types[t] = sb.status
		}
		c.mu.Unlock()
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ClientStatus) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), a.Connected.Compare(b.Connected))
	})
	return out
}

// namespaceOf returns the namespace a node names: its NAMESPACE metadata,
// else the one of Istio's id form type~ip~id~namespace.svc.cluster.local.
func namespaceOf(n *corev3.Node) string {
	if ns := n.GetMetadata().GetFields()["NAMESPACE"].GetStringValue(); ns != "" {
		return ns
	}
	parts := strings.SplitN(n.GetId(), "~", 4)
	if len(parts) == 4 {
		if ns, _, ok := strings.Cut(parts[3], "."); ok {
			return ns
		}
	}
	return ""
}
