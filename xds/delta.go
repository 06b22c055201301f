package xds

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	deltav3 "github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"github.com/vmesh/vmesh/xds/gen"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// deltaADS serves incremental (delta) ADS streams for go-control-plane's
// server (serverv3.NewServerAdvanced), as go-control-plane's delta server
// does (the same callbacks, nonces and subscription rules, legacy wildcard
// on), with the stream's subscriptions vmesh's own (subscription): what a
// stream holds changes only in this goroutine, when an answer is delivered
// or a request unsubscribes.
type deltaADS struct {
	ctx       context.Context
	cache     cachev3.ConfigWatcher
	callbacks deltav3.Callbacks
	streams   atomic.Int64
}

var _ deltav3.Server = (*deltaADS)(nil)

// deltaWatch is a delta stream's open watch of one type.
type deltaWatch struct {
	cancel func()
	sub    *subscription
}

// DeltaStreamHandler serves one delta ADS stream until it ends.
func (s *deltaADS) DeltaStreamHandler(st stream.DeltaStream, typeURL string) error {
	if typeURL != resourcev3.AnyType {
		return status.Errorf(codes.Unimplemented, "xds: only aggregated (ADS) streams are served, not %s", typeURL)
	}
	reqs := receive(s.ctx, st)

	id := s.streams.Add(1)
	node := &corev3.Node{}
	watches := map[string]*deltaWatch{}
	// Room for two answers per type, as go-control-plane's delta server
	// keeps: a cache answer and one made at a request can meet.
	responses := make(chan cachev3.DeltaResponse, 2*gen.NumTypes+2)
	defer func() {
		for _, w := range watches {
			w.cancel()
		}
		s.callbacks.OnDeltaStreamClosed(id, node)
	}()
	if err := s.callbacks.OnDeltaStreamOpen(st.Context(), id, typeURL); err != nil {
		return err
	}
	var nonce int64
	send := func(resp cachev3.DeltaResponse) error {
		out, err := resp.GetDeltaDiscoveryResponse()
		if err != nil {
			return err
		}
		w := watches[resp.GetDeltaRequest().GetTypeUrl()]
		if w == nil {
			return fmt.Errorf("xds: delta response for a type without a watch")
		}
		a, ok := resp.(heldAnswer)
		if !ok {
			a = plainAnswer(resp.GetNextVersionMap())
		}
		nonce++
		out.Nonce = strconv.FormatInt(nonce, 10)
		s.callbacks.OnStreamDeltaResponse(id, resp.GetDeltaRequest(), out)
		if err := st.Send(out); err != nil {
			return err
		}
		w.sub.deliver(a)
		return nil
	}
	// sendQueued sends every answer already queued, before a request is
	// processed (go-control-plane's order: a request's watch must see what
	// the stream holds after them).
	sendQueued := func() error {
		for {
			select {
			case resp := <-responses:
				if err := send(resp); err != nil {
					return err
				}
			default:
				return nil
			}
		}
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
			if err := sendQueued(); err != nil {
				return status.Errorf(codes.Unavailable, "%v", err)
			}
			if err := s.callbacks.OnStreamDeltaRequest(id, req); err != nil {
				return err
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
			w := watches[t]
			if w == nil {
				w = &deltaWatch{cancel: func() {}, sub: newDeltaSubscription(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(), req.GetInitialResourceVersions(), true)}
				watches[t] = w
			} else {
				w.cancel()
				w.sub.update(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
			}
			cancel, err := s.cache.CreateDeltaWatch(req, w.sub, responses)
			if err != nil {
				return err
			}
			w.cancel = cancel
		}
	}
}
