package caclient_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/tls/certprovider/pemfile"

	"github.com/vmesh/vmesh/agents/caclient"
	"github.com/vmesh/vmesh/ca"
	"github.com/vmesh/vmesh/ca/spiffe"
)

func TestFetchWriteFilesAndRenew(t *testing.T) {
	c, err := ca.New(ca.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := c.ServerTLSConfig([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)))
	c.Register(s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		<-served
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dial := func(cert *tls.Certificate) *grpc.ClientConn {
		cfg := &tls.Config{RootCAs: c.TrustBundle().CertPool(), MinVersion: tls.VersionTLS12}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	want := spiffe.Identity{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "cart"}
	tok, _, err := c.CreateToken(ca.TokenRequest{Namespace: "shop", ServiceAccount: "cart"})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := caclient.Fetch(ctx, dial(nil), caclient.Request{Token: tok, TTL: time.Hour, SPIFFEID: want.String()})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := spiffe.FromCertificate(kp.Leaf); err != nil || id != want {
		t.Fatalf("identity = %v, %v", id, err)
	}
	if got, wantAt := kp.RenewAt, kp.Leaf.NotBefore.Add(kp.Leaf.NotAfter.Sub(kp.Leaf.NotBefore)/2); !got.Equal(wantAt) {
		t.Fatalf("RenewAt = %s, want %s", got, wantAt)
	}

	dir := t.TempDir()
	if err := kp.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, caclient.KeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, st.Mode())
	}
	// grpc-go's own file_watcher provider loads what was written.
	prov, err := pemfile.NewProvider(pemfile.Options{
		CertFile: filepath.Join(dir, caclient.CertChainFile), KeyFile: filepath.Join(dir, caclient.KeyFile),
		RootFile: filepath.Join(dir, caclient.RootCertFile), RefreshDuration: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()
	km, err := prov.KeyMaterial(ctx)
	if err != nil {
		t.Fatalf("file_watcher cannot load the files: %v", err)
	}
	if len(km.Certs) != 1 || km.Roots == nil {
		t.Fatalf("key material: %d certs, roots %v", len(km.Certs), km.Roots != nil)
	}

	// Renew over mTLS with the issued pair and no token.
	renewed, err := caclient.Fetch(ctx, dial(&kp.Certificate), caclient.Request{})
	if err != nil {
		t.Fatalf("renewal: %v", err)
	}
	if renewed.Leaf.SerialNumber.Cmp(kp.Leaf.SerialNumber) == 0 {
		t.Fatal("renewal returned the same certificate")
	}
	if id, _ := spiffe.FromCertificate(renewed.Leaf); id != want {
		t.Fatalf("renewed identity = %v", id)
	}
	// Asking for another identity in the CSR is refused.
	if _, err := caclient.Fetch(ctx, dial(nil), caclient.Request{Token: tok, SPIFFEID: "spiffe://cluster.local/ns/shop/sa/admin"}); err == nil {
		t.Fatal("CSR for another identity accepted")
	}
}
