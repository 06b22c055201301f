package sds_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/vmesh/vmesh/agents/certs"
	"github.com/vmesh/vmesh/agents/internal/agenttest"
	"github.com/vmesh/vmesh/agents/sds"
	"github.com/vmesh/vmesh/internal/testenv"
)

// rig is a real CA, a certificate manager rotating every ~1 s and an SDS
// server on a Unix socket fed by the manager.
type rig struct {
	m    *certs.Manager
	sock string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	c := agenttest.NewCA(t, nil)
	_, b := c.Bundle(t, "shop", "cart", "", nil)
	m, err := certs.New(certs.Config{Address: b.DiscoveryAddress, RootsPEM: b.RootCerts, Token: b.Token, TTL: 2 * time.Second}, agenttest.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := sds.New(agenttest.Logger(t), nil)
	sock := filepath.Join(t.TempDir(), "sds.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	go func() { m.Run(ctx); done <- struct{}{} }()
	go func() {
		if err := srv.Serve(ctx, sock); err != nil {
			t.Errorf("Serve: %v", err)
		}
		done <- struct{}{}
	}()
	sub, unsub := m.Subscribe()
	go func() {
		defer func() { unsub(); done <- struct{}{} }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub:
				kp := m.Current()
				if err := srv.Update(kp.ChainPEM, kp.KeyPEM, kp.RootsPEM); err != nil {
					t.Errorf("Update: %v", err)
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		for range 3 {
			<-done
		}
	})
	return &rig{m: m, sock: sock}
}

func (r *rig) dial(t *testing.T) secretv3.SecretDiscoveryServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+r.sock, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return secretv3.NewSecretDiscoveryServiceClient(conn)
}

// check decodes the secrets of a response and verifies that "default" is a
// usable pair issued no earlier than generation after, and "ROOTCA" holds
// roots that verify it. It returns the leaf's serial.
func check(t *testing.T, res []*anypb.Any) (serial string, notBefore time.Time) {
	t.Helper()
	var def, root *tlsv3.Secret
	for _, a := range res {
		s := &tlsv3.Secret{}
		if err := a.UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		if err := s.ValidateAll(); err != nil {
			t.Fatalf("secret %s: %v", s.GetName(), err)
		}
		switch s.GetName() {
		case sds.DefaultSecret:
			def = s
		case sds.RootSecret:
			root = s
		}
	}
	if def == nil || root == nil {
		t.Fatalf("response lacks default or ROOTCA: %v", res)
	}
	tc := def.GetTlsCertificate()
	pair, err := tls.X509KeyPair(tc.GetCertificateChain().GetInlineBytes(), tc.GetPrivateKey().GetInlineBytes())
	if err != nil {
		t.Fatalf("default secret is not a usable pair: %v", err)
	}
	if len(root.GetValidationContext().GetTrustedCa().GetInlineBytes()) == 0 {
		t.Fatal("ROOTCA has no trusted CA")
	}
	return pair.Leaf.SerialNumber.String(), pair.Leaf.NotBefore
}

// TestSotWStreamGetsEveryRotation: a state-of-the-world SDS client on the
// Unix socket receives the current pair, then a new pair after each
// rotation, each matching the manager's current certificate.
func TestSotWStreamGetsEveryRotation(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := r.dial(t).StreamSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "sidecar~127.0.0.1~vm.shop~shop.svc.cluster.local"}, TypeUrl: resourcev3.SecretType, ResourceNames: []string{sds.DefaultSecret, sds.RootSecret}}
	seen := map[string]bool{}
	for len(seen) < 3 {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d pairs: %v", len(seen), err)
		}
		serial, _ := check(t, resp.GetResources())
		if seen[serial] {
			t.Fatalf("pair %s pushed twice", serial)
		}
		seen[serial] = true
		if cur := r.m.Current(); cur.Leaf.SerialNumber.String() != serial {
			// A rotation may race the response; the next one must catch up.
			t.Logf("response %s, current %s", serial, cur.Leaf.SerialNumber)
		}
		req = &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.SecretType, ResourceNames: req.ResourceNames, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
	}
}

// TestDeltaStreamGetsEveryRotation is the same over delta SDS, with each
// secret on its own stream as Envoy does.
func TestDeltaStreamGetsEveryRotation(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := r.dial(t)
	stream, err := client.DeltaSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: resourcev3.SecretType, ResourceNamesSubscribe: []string{sds.DefaultSecret, sds.RootSecret}}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var last time.Time
	for len(seen) < 3 {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d pairs: %v", len(seen), err)
		}
		var anys []*anypb.Any
		for _, r := range resp.GetResources() {
			anys = append(anys, r.GetResource())
		}
		if len(anys) == 1 {
			// ROOTCA did not change; default did.
			anys = append(anys, rootOf(t, client, ctx))
		}
		serial, nb := check(t, anys)
		if nb.Before(last) {
			t.Fatal("an older certificate after a newer one")
		}
		last = nb
		seen[serial] = true
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.SecretType, ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
}

// rootOf fetches ROOTCA on a fresh SotW stream.
func rootOf(t *testing.T, c secretv3.SecretDiscoveryServiceClient, ctx context.Context) *anypb.Any {
	t.Helper()
	s, err := c.StreamSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.CloseSend()
	if err := s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n2"}, TypeUrl: resourcev3.SecretType, ResourceNames: []string{sds.RootSecret}}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 1 {
		t.Fatalf("ROOTCA stream got %d resources", len(resp.GetResources()))
	}
	return resp.GetResources()[0]
}

func TestUpdateRejectsEmptyPair(t *testing.T) {
	if err := sds.New(nil, nil).Update(nil, nil, nil); err == nil {
		t.Fatal("Update accepted an empty pair")
	}
}

// With capture Envoy runs as the proxy user: the sockets belong to its
// group (0660).
func TestListenUnixGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (chown of the socket)")
	}
	path := filepath.Join(t.TempDir(), "xds.sock")
	lis, err := sds.ListenUnixGroup(path, 1337)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if gid := st.Sys().(*syscall.Stat_t).Gid; gid != 1337 || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket gid %d mode %v, want 1337 and 0660", gid, st.Mode().Perm())
	}
}
