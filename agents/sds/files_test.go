package sds_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/agents/internal/agenttest"
	"github.com/vmesh/vmesh/agents/sds"
)

// fileRig is an SDS server that may read certificate files in allowed,
// watching them, with the reports it sends (OnHeld).
type fileRig struct {
	credRig
	mu      sync.Mutex
	reports [][]string
}

func newFileRig(t *testing.T, allowed ...string) *fileRig {
	t.Helper()
	srv := sds.New(agenttest.Logger(t), prometheus.NewRegistry())
	r := &fileRig{}
	srv.OnHeld(func(held []string) {
		r.mu.Lock()
		r.reports = append(r.reports, held)
		r.mu.Unlock()
	})
	if err := srv.AllowFileDirs(allowed); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "sds.sock")
	lis, err := sds.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := grpc.NewServer()
	srv.Register(ctx, g)
	done := make(chan struct{}, 2)
	go func() { _ = g.Serve(lis); done <- struct{}{} }()
	go func() {
		if err := srv.WatchFiles(ctx); err != nil {
			t.Errorf("WatchFiles: %v", err)
		}
		done <- struct{}{}
	}()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		g.Stop()
		<-done
		<-done
	})
	r.srv, r.sdsc = srv, secretv3.NewSecretDiscoveryServiceClient(conn)
	return r
}

// lastReport is the last report the server sent.
func (r *fileRig) lastReport() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reports) == 0 {
		return nil
	}
	return r.reports[len(r.reports)-1]
}

// waitFiles polls the server's certificate file states until cond holds.
func waitFiles(t *testing.T, srv *sds.Server, what string, cond func(map[string]sds.FileState) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		states := map[string]sds.FileState{}
		for _, f := range srv.Files() {
			states[f.Name] = f
		}
		if cond(states) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, states)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
}

// TestCertificateFilesServedAndReloaded: Istio's file-cert and file-root
// names of files in an allowed directory are served with the files'
// contents (the key stays on the VM: it goes to Envoy over the local
// socket only), reported as held; replacing the files pushes the new pair
// without a restart; removing the certificate withdraws the pair and
// reports it refused.
func TestCertificateFilesServedAndReloaded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	r := newFileRig(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := agenttest.NewPair(t, "root", nil)
	first := agenttest.NewPair(t, "web.example.com", &ca)
	cert, key, roots := filepath.Join(dir, "web", "tls.crt"), filepath.Join(dir, "web", "tls.key"), filepath.Join(dir, "ca.crt")
	writeFile(t, cert, first.Cert)
	writeFile(t, key, first.Key)
	writeFile(t, roots, ca.Cert)

	pairName, rootName := "file-cert:"+cert+"~"+key, "file-root:"+roots
	pair := r.watch(t, ctx, pairName)
	rootsW := r.watch(t, ctx, rootName)
	got := secretOf(t, pair())
	if got.GetName() != pairName || string(got.GetTlsCertificate().GetCertificateChain().GetInlineBytes()) != string(first.Cert) ||
		string(got.GetTlsCertificate().GetPrivateKey().GetInlineBytes()) != string(first.Key) {
		t.Fatalf("%s = %v, want the files' pair", pairName, got.GetName())
	}
	if rs := secretOf(t, rootsW()); string(rs.GetValidationContext().GetTrustedCa().GetInlineBytes()) != string(ca.Cert) {
		t.Fatalf("%s = %v, want the file's roots", rootName, rs)
	}
	waitFiles(t, r.srv, "both reported", func(map[string]sds.FileState) bool {
		rep := r.lastReport()
		return slices.Contains(rep, pairName) && slices.Contains(rep, rootName)
	})

	// Rotation: new files, no restart.
	second := agenttest.NewPair(t, "web.example.com", &ca)
	writeFile(t, key, second.Key)
	writeFile(t, cert, second.Cert)
	for {
		s := secretOf(t, pair())
		if string(s.GetTlsCertificate().GetCertificateChain().GetInlineBytes()) == string(second.Cert) {
			if string(s.GetTlsCertificate().GetPrivateKey().GetInlineBytes()) != string(second.Key) {
				t.Fatal("the rotated certificate was pushed with another key")
			}
			break
		}
	}

	// Removed: withdrawn, reported refused.
	if err := os.Remove(cert); err != nil {
		t.Fatal(err)
	}
	if resp := pair(); !slices.Equal(resp.GetRemovedResources(), []string{pairName}) {
		t.Fatalf("after removal: %v removed, want %s", resp.GetRemovedResources(), pairName)
	}
	waitFiles(t, r.srv, "the pair refused", func(st map[string]sds.FileState) bool {
		return !st[pairName].Served && st[pairName].Error != "" &&
			slices.ContainsFunc(r.lastReport(), func(e string) bool { return strings.HasPrefix(e, sds.RefusedPrefix+pairName+"\t") })
	})
}

// TestCertificateFilesLeastPrivilege: the agent reads only files whose
// real path is in a directory it allows. A valid pair outside (the paths
// come from config authors: /etc/shadow or another service's key would be
// next), a link in the allowed directory to a file outside, a path with
// "..", and anything when no directory is allowed are refused: not served
// (the chain fails closed) and reported with the reason; a group-writable
// file and a file that is no certificate are refused too.
func TestCertificateFilesLeastPrivilege(t *testing.T) {
	base := t.TempDir()
	allowed, outside := filepath.Join(base, "certs"), filepath.Join(base, "private")
	r := newFileRig(t, allowed)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := agenttest.NewPair(t, "root", nil)
	p := agenttest.NewPair(t, "api", &ca)
	writeFile(t, filepath.Join(outside, "tls.crt"), p.Cert)
	writeFile(t, filepath.Join(outside, "tls.key"), p.Key)
	writeFile(t, filepath.Join(allowed, "ok.crt"), p.Cert)
	writeFile(t, filepath.Join(allowed, "ok.key"), p.Key)
	if err := os.Symlink(filepath.Join(outside, "tls.key"), filepath.Join(allowed, "link.key")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(allowed, "shared.key"), p.Key)
	if err := os.Chmod(filepath.Join(allowed, "shared.key"), 0o666); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(allowed, "notes.txt"), []byte("root:x:0:0::/root:/bin/sh\n"))

	cases := map[string]string{
		"file-cert:" + filepath.Join(outside, "tls.crt") + "~" + filepath.Join(outside, "tls.key"):   "outside the directories",
		"file-cert:" + filepath.Join(allowed, "ok.crt") + "~" + filepath.Join(allowed, "link.key"):   "outside the directories",
		"file-cert:" + filepath.Join(allowed, "ok.crt") + "~" + allowed + "/../private/tls.key":      "not an absolute, clean path",
		"file-cert:" + filepath.Join(allowed, "ok.crt") + "~" + filepath.Join(allowed, "shared.key"): "writable by group or others",
		"file-root:" + filepath.Join(allowed, "notes.txt"):                                           "no PEM certificate",
	}
	for name := range cases {
		_ = r.watch(t, ctx, name)
	}
	okName := "file-cert:" + filepath.Join(allowed, "ok.crt") + "~" + filepath.Join(allowed, "ok.key")
	if s := secretOf(t, r.watch(t, ctx, okName)()); s.GetName() != okName {
		t.Fatalf("the allowed pair: %v", s.GetName())
	}
	waitFiles(t, r.srv, "every refusal", func(st map[string]sds.FileState) bool {
		for name := range cases {
			if st[name].Error == "" {
				return false
			}
		}
		return st[okName].Served
	})
	st := map[string]sds.FileState{}
	for _, f := range r.srv.Files() {
		st[f.Name] = f
	}
	for name, want := range cases {
		if st[name].Served || !strings.Contains(st[name].Error, want) {
			t.Errorf("%s: %+v, want refused saying %q", name, st[name], want)
		}
		if !slices.ContainsFunc(r.srv.Report(), func(e string) bool { return strings.HasPrefix(e, sds.RefusedPrefix+name+"\t") }) {
			t.Errorf("%s: not reported refused in %q", name, r.srv.Report())
		}
	}

	// No allowed directory: nothing is read.
	none := newFileRig(t)
	_ = none.watch(t, ctx, okName)
	waitFiles(t, none.srv, "refused without directories", func(st map[string]sds.FileState) bool {
		return strings.Contains(st[okName].Error, "allows no certificate file directory")
	})
}
