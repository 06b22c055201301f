package controlplane

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
