package controlplane

import (
	"context"
	"errors"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/xds"
)

// nodeIdentityStream refuses xDS requests whose node claims another identity
// than the stream's mesh certificate: a workload gets only its own
// namespace's and service account's config on the secure port.
type nodeIdentityStream struct {
	grpc.ServerStream
	namespace, serviceAccount string
	refused                   error // why the stream was refused, if it was
}

func (s *nodeIdentityStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	var node *corev3.Node
	switch req := m.(type) {
	case *discoveryv3.DiscoveryRequest:
		node = req.GetNode()
	case *discoveryv3.DeltaDiscoveryRequest:
		node = req.GetNode()
	}
	if node == nil {
		return nil // later requests of a stream may omit the node
	}
	p, err := xds.ProxyFromNode(node)
	if err != nil {
		s.refused = status.Error(codes.InvalidArgument, err.Error())
		return s.refused
	}
	if p.Namespace != s.namespace || (p.ServiceAccount != "" && p.ServiceAccount != s.serviceAccount) {
		s.refused = status.Errorf(codes.PermissionDenied, "node %s claims %s/%s but its certificate is for %s/%s",
			p.ID, p.Namespace, p.ServiceAccount, s.namespace, s.serviceAccount)
		return s.refused
	}
	return nil
}

// watchedStream is an xDS stream whose client certificate is watched by the
// CA (ca.WatchPeer): once the watch ends with a rejection (the certificate
// expired or was revoked), it receives and sends nothing more, and the
// handler returns, so the stream ends with that reason. Each response is
// sent only after the certificate is checked again.
type watchedStream struct {
	grpc.ServerStream
	watch *ca.PeerWatch
}

func (s *watchedStream) Context() context.Context { return s.watch.Context() }

// ended returns the status the stream ends with when its certificate was
// rejected while it was open, nil otherwise.
func (s *watchedStream) ended() error {
	ctx := s.watch.Context()
	if ctx.Err() == nil {
		return nil
	}
	var rej *ca.Error
	if !errors.As(context.Cause(ctx), &rej) {
		return nil // the stream itself ended
	}
	return status.Errorf(rej.Code(), "xDS stream ended: %v", rej)
}

// RecvMsg returns as soon as the certificate is rejected, even while no
// request arrives: the xDS handlers only return when a receive fails. The
// receive left behind ends with the stream (the status is written as the
// handler returns), and is never followed by another.
func (s *watchedStream) RecvMsg(m any) error {
	if err := s.ended(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- s.ServerStream.RecvMsg(m) }()
	select {
	case err := <-done:
		return err
	case <-s.watch.Context().Done():
		if err := s.ended(); err != nil {
			return err
		}
		return <-done
	}
}

// SendMsg sends nothing once the certificate is rejected.
func (s *watchedStream) SendMsg(m any) error {
	_ = s.watch.Check()
	if err := s.ended(); err != nil {
		return err
	}
	return s.ServerStream.SendMsg(m)
}
