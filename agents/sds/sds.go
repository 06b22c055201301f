// Package sds serves the VM's workload certificate to Envoy over the Secret
// Discovery Service on a Unix socket, under Istio's secret names: "default"
// (the certificate chain and key) and "ROOTCA" (the trusted roots). Every
// Update pushes the new pair to every open stream, state of the world and
// delta.
package sds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// Secret names, Istio's.
const (
	DefaultSecret = "default"
	RootSecret    = "ROOTCA"
)

// Server is an SDS server. Create it with New, feed it with Update and
// serve it with Serve.
type Server struct {
	log     *slog.Logger
	met     *metrics
	cache   *cachev3.LinearCache
	first   chan struct{} // closed by the first Update
	onFirst sync.Once
	// gid, when not -1, owns the socket (SetSocketGroup).
	gid int
	// creds are the file credentials (credentials.go).
	creds credentials
	// files are the certificate files (files.go).
	files files
}

// credentials is the Server's file-credential state.
type credentials struct {
	// served maps each credential to the secret names it is served under;
	// written only by the goroutine of ServeCredentials.
	served map[string][]string
	mu     sync.Mutex
	states []CredentialState
	// names are the secret names the credentials are served under.
	names map[string]bool
	// asked are the secret names (other than the workload's own) streams
	// asked for.
	asked map[string]bool
	// onHeld, when set, gets Held after every read of the directory.
	onHeld func([]string)
}

// OnHeld makes the Server call f with what it holds (Report: the
// credential secrets, the certificate files it serves and those it
// refuses) after every read of the credentials directory or of
// certificate files, the first included: the agent reports them to the
// control plane, which warns about the credentials a proxy's config names
// and its agent lacks. Call it before ServeCredentials and Serve.
func (s *Server) OnHeld(f func(held []string)) { s.creds.onHeld = f }

// SetSocketGroup makes the socket Serve creates owned by group gid (the
// proxy group Envoy runs as with traffic capture), so a non-root Envoy can
// connect. Call it before Serve.
func (s *Server) SetSocketGroup(gid int) { s.gid = gid }

// New returns a Server with no secrets yet: requests wait until the first
// Update. Metrics are registered on reg when it is not nil.
func New(logger *slog.Logger, reg prometheus.Registerer) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{
		log:   logger,
		met:   newMetrics(reg),
		cache: cachev3.NewLinearCache(resourcev3.SecretType, cachev3.WithVersionPrefix("sds-")),
		first: make(chan struct{}),
		gid:   -1,
		creds: credentials{served: map[string][]string{}, asked: map[string]bool{}},
		files: files{states: map[string]*FileState{}, wake: make(chan struct{}, 1)},
	}
}

// Secrets builds the two secrets for a certificate chain (leaf first), its
// PEM key and the PEM trusted roots.
func Secrets(chainPEM, keyPEM, rootsPEM []byte) (def, root *tlsv3.Secret) {
	def = &tlsv3.Secret{Name: DefaultSecret, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: inlineBytes(chainPEM),
		PrivateKey:       inlineBytes(keyPEM),
	}}}
	root = &tlsv3.Secret{Name: RootSecret, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: inlineBytes(rootsPEM),
	}}}
	return def, root
}

// inlineBytes is a DataSource holding b.
func inlineBytes(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}

// Update installs a new certificate pair and pushes it to every stream. It
// rejects a chain and key that do not form a pair, and empty roots.
func (s *Server) Update(chainPEM, keyPEM, rootsPEM []byte) error {
	if _, err := tls.X509KeyPair(chainPEM, keyPEM); err != nil {
		return fmt.Errorf("sds: certificate pair: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(rootsPEM) {
		return errors.New("sds: no root certificate")
	}
	def, root := Secrets(chainPEM, keyPEM, rootsPEM)
	for _, sec := range []*tlsv3.Secret{def, root} {
		if err := sec.ValidateAll(); err != nil {
			return fmt.Errorf("sds: secret %s: %w", sec.GetName(), err)
		}
	}
	if err := s.cache.UpdateResources(map[string]types.Resource{DefaultSecret: def, RootSecret: root}, nil); err != nil {
		return fmt.Errorf("sds: %w", err)
	}
	s.met.updates.Inc()
	s.onFirst.Do(func() { close(s.first) })
	return nil
}

// Register adds the SecretDiscoveryService to a gRPC server; the server
// lives as long as ctx.
func (s *Server) Register(ctx context.Context, g grpc.ServiceRegistrar) {
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(context.Context, int64, string) error {
			s.met.streams.Inc()
			return nil
		},
		StreamClosedFunc: func(int64, *corev3.Node) { s.met.streams.Dec() },
		StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
			s.requested(r.GetResourceNames())
			return nil
		},
		StreamDeltaRequestFunc: func(_ int64, r *discoveryv3.DeltaDiscoveryRequest) error {
			s.requested(r.GetResourceNamesSubscribe())
			return nil
		},
		DeltaStreamOpenFunc: func(context.Context, int64, string) error {
			s.met.streams.Inc()
			return nil
		},
		DeltaStreamClosedFunc: func(int64, *corev3.Node) { s.met.streams.Dec() },
		StreamResponseFunc: func(context.Context, int64, *discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse) {
			s.met.responses.WithLabelValues("sotw").Inc()
		},
		StreamDeltaResponseFunc: func(int64, *discoveryv3.DeltaDiscoveryRequest, *discoveryv3.DeltaDiscoveryResponse) {
			s.met.responses.WithLabelValues("delta").Inc()
		},
	}
	secretv3.RegisterSecretDiscoveryServiceServer(g, serverv3.NewServer(ctx, s.cache, cb))
}

// Serve waits for the first Update, then listens on the Unix socket at path
// (replacing a stale socket file, mode 0660) and serves SDS until ctx is
// done. Not listening before there is a certificate keeps Envoy retrying
// instead of reading "no such secret".
func (s *Server) Serve(ctx context.Context, path string) error {
	select {
	case <-ctx.Done():
		return nil
	case <-s.first:
	}
	lis, err := ListenUnixGroup(path, s.gid)
	if err != nil {
		return fmt.Errorf("sds: %w", err)
	}
	g := grpc.NewServer()
	s.Register(ctx, g)
	done := make(chan error, 1)
	go func() { done <- g.Serve(lis) }()
	s.log.Info("SDS serving", "socket", path)
	select {
	case <-ctx.Done():
		g.Stop()
		<-done
		return nil
	case err := <-done:
		return fmt.Errorf("sds: serve %s: %w", path, err)
	}
}

// ListenUnix listens on a Unix socket at path, creating its directory and
// removing a stale socket left by an earlier run; the socket gets mode 0660.
func ListenUnix(path string) (net.Listener, error) { return ListenUnixGroup(path, -1) }

// ListenUnixGroup is ListenUnix with the socket owned by group gid (-1:
// the process's).
func ListenUnixGroup(path string, gid int) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o660); err != nil {
		lis.Close()
		return nil, err
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			lis.Close()
			return nil, err
		}
	}
	return lis, nil
}
