package controlplane

import (
	"cmp"
	"context"
	"slices"

	"github.com/vmesh/vmesh/model"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// authorizeMCP decides who may read the mesh's config over MCP (xds/mcp):
// on the secure port, a client whose mesh certificate is of the root
// namespace or listed in mcp.identities (the secure port's interceptor has
// already checked the certificate and that the node claims its
// namespace); on the plaintext port, anyone when mcp.plaintext is set,
// no one otherwise. Every other proxy reads only its own config: the whole
// mesh's is given deliberately.
func (cp *ControlPlane) authorizeMCP(ctx context.Context) (string, error) {
	p, _ := peer.FromContext(ctx)
	if _, tls := p.AuthInfo.(credentials.TLSInfo); !tls {
		if !cp.cfg.MCP.Plaintext {
			return "", status.Error(codes.PermissionDenied, "config over MCP is served on the plaintext xDS port only with mcp.plaintext (vmesh serve --mcp-plaintext); on the secure port, to a mesh certificate of the root namespace or of mcp.identities")
		}
		addr := ""
		if p != nil && p.Addr != nil {
			addr = " " + p.Addr.String()
		}
		return "plaintext" + addr, nil
	}
	if cp.ca == nil {
		return "", status.Error(codes.Unavailable, "no CA to check the client's certificate")
	}
	id, err := cp.ca.PeerIdentity(ctx)
	if err != nil {
		return "", status.Errorf(codes.Unauthenticated, "config over MCP needs a mesh certificate: %v", err)
	}
	root := cmp.Or(cp.cfg.CA.RootNamespace, model.DefaultRootNamespace)
	if id.Namespace == root || slices.Contains(cp.cfg.MCP.Identities, id.String()) {
		return id.String(), nil
	}
	return "", status.Errorf(codes.PermissionDenied, "%s may not read the mesh's config over MCP: only the root namespace %s and mcp.identities may", id, root)
}
