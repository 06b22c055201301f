package controlplane_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/vmesh/vmesh/agents/caclient"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

const greeterCluster = "outbound|50051||greeter.demo.vmesh.internal"

// edsStream is an ADS stream watching the greeter cluster's endpoints.
type edsStream struct {
	t      *testing.T
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
}

func openEDS(ctx context.Context, t *testing.T, cc *grpc.ClientConn, id string) *edsStream {
	t.Helper()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": "demo", "SERVICE_ACCOUNT": "greeter"})
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		Node: &corev3.Node{Id: id, Metadata: md}, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{greeterCluster},
	}); err != nil {
		t.Fatal(err)
	}
	s := &edsStream{t: t, stream: stream}
	s.next()
	return s
}

// next receives a response and ACKs it, so the stream watches on.
func (s *edsStream) next() *discoveryv3.DiscoveryResponse {
	s.t.Helper()
	resp, err := s.stream.Recv()
	if err != nil {
		s.t.Fatalf("receive: %v", err)
	}
	if err := s.stream.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl: resourcev3.EndpointType, ResourceNames: []string{greeterCluster},
		VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce,
	}); err != nil {
		s.t.Fatalf("ACK: %v", err)
	}
	return resp
}

// TestSecureStreamsEndOnRevocationAndExpiry: an mTLS xDS stream on the
// secure port that was accepted when it opened ends, with Unauthenticated
// naming the reason and without a push after the event, when its
// certificate's identity or serial is revoked (in this process or by the
// CLI, another process writing the revocation list) or when the
// certificate expires. A plaintext stream watching the same cluster gets
// the push the secure one does not.
func TestSecureStreamsEndOnRevocationAndExpiry(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		// end revokes the certificate, or waits for its expiry; it returns
		// the time of the event.
		end  func(t *testing.T, cp *controlplane.ControlPlane, dataDir string, leaf *tls.Certificate) time.Time
		want string
	}{
		{
			name: "identity revoked by the CLI",
			end: func(t *testing.T, cp *controlplane.ControlPlane, dataDir string, _ *tls.Certificate) time.Time {
				now := time.Now()
				if err := ca.Revoke(ca.Config{DataDir: filepath.Join(dataDir, "ca")}, nil, ca.RevokeRequest{Identity: "spiffe://cluster.local/ns/demo/sa/greeter", Reason: "VM decommissioned"}); err != nil {
					t.Fatal(err)
				}
				return now
			},
			want: "identity spiffe://cluster.local/ns/demo/sa/greeter revoked",
		},
		{
			name: "serial revoked in process",
			end: func(t *testing.T, cp *controlplane.ControlPlane, _ string, pair *tls.Certificate) time.Time {
				now := time.Now()
				if err := cp.CA().Revoke(pair.Leaf, "key leaked"); err != nil {
					t.Fatal(err)
				}
				return now
			},
			want: "revoked at",
		},
		{
			name: "certificate expired",
			ttl:  4 * time.Second,
			end: func(t *testing.T, _ *controlplane.ControlPlane, _ string, pair *tls.Certificate) time.Time {
				<-time.After(time.Until(pair.Leaf.NotAfter))
				return pair.Leaf.NotAfter
			},
			want: "cert_expired",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			configDir := filepath.Join(dir, "config")
			if err := os.MkdirAll(configDir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"greeter.yaml", "workloads.yaml"} {
				b, err := os.ReadFile(filepath.Join("../../../examples/quickstart/config", f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(configDir, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cfg := controlplane.DefaultConfig()
			cfg.ConfigDir, cfg.DataDir = configDir, filepath.Join(dir, "data")
			cp, _ := startIn(t, cfg)
			waitReady(t, cp)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			token, _, err := cp.CA().CreateToken(ca.TokenRequest{Namespace: "demo", ServiceAccount: "greeter", TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			tc0 := &tls.Config{RootCAs: cp.CA().TrustBundle().CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
			boot, err := grpc.NewClient(cp.SecureAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc0)))
			if err != nil {
				t.Fatal(err)
			}
			defer boot.Close()
			pair, err := caclient.Fetch(ctx, boot, caclient.Request{Token: token, TTL: tc.ttl})
			if err != nil {
				t.Fatal(err)
			}
			tc1 := tc0.Clone()
			tc1.Certificates = []tls.Certificate{pair.Certificate}
			secureCC, err := grpc.NewClient(cp.SecureAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc1)))
			if err != nil {
				t.Fatal(err)
			}
			defer secureCC.Close()
			plainCC, err := grpc.NewClient(cp.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer plainCC.Close()

			secure := openEDS(ctx, t, secureCC, "vm-secure")
			plain := openEDS(ctx, t, plainCC, "vm-plain")
			type result struct {
				resp *discoveryv3.DiscoveryResponse
				err  error
				at   time.Time
			}
			got := make(chan result, 1)
			go func() {
				resp, err := secure.stream.Recv()
				got <- result{resp, err, time.Now()}
			}()

			leaf := &pair.Certificate
			at := tc.end(t, cp, cfg.DataDir, leaf)
			// A change of the watched endpoints: pushed to the plaintext
			// stream, never to the secure one.
			b, _ := os.ReadFile(filepath.Join(configDir, "workloads.yaml"))
			if err := os.WriteFile(filepath.Join(configDir, "workloads.yaml"), []byte(strings.ReplaceAll(string(b), "18061", "18071")), 0o644); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-got:
				if r.err == nil {
					t.Fatalf("the secure stream got a push after its certificate was refused: version %s", r.resp.VersionInfo)
				}
				if status.Code(r.err) != codes.Unauthenticated || !strings.Contains(r.err.Error(), tc.want) {
					t.Fatalf("the secure stream ended with %v, want Unauthenticated naming %q", r.err, tc.want)
				}
				if d := r.at.Sub(at); d > 5*time.Second {
					t.Fatalf("the secure stream ended %s after the event, want within 5 s", d)
				}
				t.Logf("ended %s after the event: %v", r.at.Sub(at).Round(time.Millisecond), r.err)
			case <-time.After(time.Until(at.Add(5 * time.Second))):
				t.Fatal("the secure stream still open 5 s after the event")
			}
			if resp := plain.next(); !strings.Contains(resp.String(), "18071") {
				t.Fatalf("the plaintext stream's push lacks the new port: %v", resp)
			}
			// A new stream with the refused certificate is refused too.
			st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(secureCC).StreamAggregatedResources(ctx)
			if err == nil {
				_, err = st.Recv()
			}
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("a new stream with the refused certificate: %v, want Unauthenticated", err)
			}
		})
	}
}

// TestSecureDeltaStreamEndsOnRevocation: the same for a delta xDS stream,
// whose handler (go-control-plane's) only returns when a receive fails,
// revoked by the CLI with no config change after it: CA.Run's re-read of
// the revocation list ends the stream.
func TestSecureDeltaStreamEndsOnRevocation(t *testing.T) {
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir, cfg.DataDir = "../../../examples/quickstart", t.TempDir()
	cp, _ := startIn(t, cfg)
	waitReady(t, cp)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token, _, err := cp.CA().CreateToken(ca.TokenRequest{Namespace: "demo", ServiceAccount: "greeter", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{RootCAs: cp.CA().TrustBundle().CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
	boot, err := grpc.NewClient(cp.SecureAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	defer boot.Close()
	pair, err := caclient.Fetch(ctx, boot, caclient.Request{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	tc = tc.Clone()
	tc.Certificates = []tls.Certificate{pair.Certificate}
	cc, err := grpc.NewClient(cp.SecureAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": "demo"})
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node: &corev3.Node{Id: "vm-delta", Metadata: md}, TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{greeterCluster},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: resp.Nonce}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := stream.Recv()
		got <- err
	}()
	at := time.Now()
	if err := ca.Revoke(ca.Config{DataDir: filepath.Join(cfg.DataDir, "ca")}, nil, ca.RevokeRequest{Identity: "spiffe://cluster.local/ns/demo/sa/greeter", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "cert_revoked") {
			t.Fatalf("the delta stream ended with %v, want Unauthenticated naming cert_revoked", err)
		}
		t.Logf("ended %s after the revocation: %v", time.Since(at).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("the delta stream still open 5 s after the revocation")
	}
}
