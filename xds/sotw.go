package xds

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	sotwv3 "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sotwADS serves state-of-the-world ADS streams for go-control-plane's
// server (serverv3.NewServerAdvanced), the way its ordered ADS mode does:
// one response channel per stream, responses in the order the cache gives
// them, a request with a stale nonce ignored, a queued response of a type
// dropped when a request of that type supersedes it. It differs in one
// thing: a request that repeats the stream's subscription (every ACK of a
// client that does not change what it watches) keeps the subscription as
// it is, instead of rebuilding its name set; an Envoy repeats its 1,000
// cluster names in every EDS ACK.
type sotwADS struct {
	ctx       context.Context
	cache     cachev3.ConfigWatcher
	callbacks sotwv3.Callbacks
	streams   atomic.Int64
}

var _ sotwv3.Server = (*sotwADS)(nil)

// receive reads a stream's requests into the returned channel until the
// stream or ctx ends; then it closes the channel.
func receive[Req any](ctx context.Context, st interface {
	Recv() (Req, error)
	Context() context.Context
}) <-chan Req {
	reqs := make(chan Req)
	go func() {
		defer close(reqs)
		for {
			req, err := st.Recv()
			if err != nil {
				return
			}
			select {
			case reqs <- req:
			case <-st.Context().Done():
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return reqs
}

// sotwWatch is a stream's open watch of one type.
type sotwWatch struct {
	cancel func()
	sub    *subscription
	names  []string // the resource names of the request the watch is for
	nonce  string   // of the last response sent for the type
}

// StreamHandler serves one ADS stream until it ends.
func (s *sotwADS) StreamHandler(st stream.Stream, typeURL string) error {
	if typeURL != resourcev3.AnyType {
		return status.Errorf(codes.Unimplemented, "xds: only aggregated (ADS) streams are served, not %s", typeURL)
	}
	reqs := receive(s.ctx, st)

	id := s.streams.Add(1)
	node := &corev3.Node{}
	watches := map[string]*sotwWatch{}
	// Room for one answer per type: the cache answers a watch once.
	responses := make(chan cachev3.Response, 16)
	defer func() {
		for _, w := range watches {
			w.cancel()
		}
		// Then the cache forgets the stream (and its group, if it was the
		// last stream of the group).
		if sc, ok := s.cache.(interface{ streamClosed(chan cachev3.Response) }); ok {
			sc.streamClosed(responses)
		}
		s.callbacks.OnStreamClosed(id, node)
	}()
	if err := s.callbacks.OnStreamOpen(st.Context(), id, typeURL); err != nil {
		return err
	}
	var nonce int64
	send := func(resp cachev3.Response) error {
		out, err := resp.GetDiscoveryResponse()
		if err != nil {
			return err
		}
		w := watches[resp.GetRequest().GetTypeUrl()]
		if w == nil {
			return errors.New("xds: response for a type without a watch")
		}
		nonce++
		out.Nonce = strconv.FormatInt(nonce, 10)
		a, ok := resp.(heldAnswer)
		if !ok {
			a = plainAnswer(resp.GetReturnedResources())
		}
		w.sub.deliver(a)
		w.nonce = out.Nonce
		s.callbacks.OnStreamResponse(resp.GetContext(), id, resp.GetRequest(), out)
		return st.Send(out)
	}
	for {
		select {
		case <-s.ctx.Done():
			return nil
		case resp := <-responses:
			if err := send(resp); err != nil {
				return status.Errorf(codes.Unavailable, "%v", err)
			}
		case req, ok := <-reqs:
			if !ok {
				return nil
			}
			if req.GetNode() != nil {
				node = req.GetNode()
			} else {
				req.Node = node
			}
			t := req.GetTypeUrl()
			if t == "" {
				return status.Errorf(codes.InvalidArgument, "type URL is required for ADS")
			}
			if err := s.callbacks.OnStreamRequest(id, req); err != nil {
				return err
			}
			w := watches[t]
			if w == nil {
				// Legacy wildcard on, as in go-control-plane: an empty first
				// request subscribes to everything.
				w = &sotwWatch{cancel: func() {}, sub: newSotwSubscription(req.GetResourceNames(), true), names: req.GetResourceNames()}
				watches[t] = w
			} else {
				if w.nonce != "" && req.GetResponseNonce() != w.nonce {
					continue // stale: answers a response the client has not seen yet
				}
				w.cancel()
				// Send what is queued for other types; a queued answer of
				// this type is superseded by the request.
				for drained := false; !drained; {
					select {
					case resp := <-responses:
						if resp.GetRequest().GetTypeUrl() != t {
							if err := send(resp); err != nil {
								return status.Errorf(codes.Unavailable, "%v", err)
							}
						}
					default:
						drained = true
					}
				}
				if !slices.Equal(w.names, req.GetResourceNames()) {
					w.sub.setNames(req.GetResourceNames())
					w.names = req.GetResourceNames()
				}
			}
			cancel, err := s.cache.CreateWatch(req, w.sub, responses)
			if err != nil {
				return err
			}
			w.cancel = cancel
		}
	}
}
