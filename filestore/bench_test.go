package filestore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model/analysis"
	"github.com/vmesh/vmesh/store"
)

// writeTree writes n objects (ServiceEntries, WorkloadEntries, VirtualServices,
// DestinationRules in equal parts) into 100-object files under dir.
func writeTree(b *testing.B, dir string, n int) {
	b.Helper()
	var sb strings.Builder
	for i := 0; i < n; i++ {
		svc := i / 4
		switch i % 4 {
		case 0:
			fmt.Fprintf(&sb, "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: svc-%d, namespace: ns-%d}\nspec:\n  hosts: [svc-%d.example.internal]\n  ports: [{number: 8080, name: grpc, protocol: GRPC}]\n  resolution: STATIC\n  workloadSelector: {labels: {app: svc-%d}}\n---\n", svc, svc%10, svc, svc)
		case 1:
			fmt.Fprintf(&sb, "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: svc-%d-1, namespace: ns-%d}\nspec:\n  address: 10.%d.%d.1\n  labels: {app: svc-%d, version: v1}\n  ports: {grpc: 8080}\n---\n", svc, svc%10, svc/250, svc%250, svc)
		case 2:
			fmt.Fprintf(&sb, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: svc-%d, namespace: ns-%d}\nspec:\n  hosts: [svc-%d.example.internal]\n  http:\n  - match: [{headers: {x-canary: {exact: \"1\"}}}]\n    route: [{destination: {host: svc-%d.example.internal, subset: v2}}]\n  - route:\n    - {destination: {host: svc-%d.example.internal, subset: v1}, weight: 90}\n    - {destination: {host: svc-%d.example.internal, subset: v2}, weight: 10}\n    timeout: 2s\n---\n", svc, svc%10, svc, svc, svc, svc)
		case 3:
			fmt.Fprintf(&sb, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: svc-%d, namespace: ns-%d}\nspec:\n  host: svc-%d.example.internal\n  trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}, outlierDetection: {consecutive5xxErrors: 5, interval: 10s}}\n  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]\n---\n", svc, svc%10, svc)
		}
		if (i+1)%100 == 0 || i == n-1 {
			p := filepath.Join(dir, fmt.Sprintf("d%02d", i/1000), fmt.Sprintf("f%05d.yaml", i))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
				b.Fatal(err)
			}
			sb.Reset()
		}
	}
}

// BenchmarkDirLoad10k measures loading a 10,000-object directory into the
// Store, from start until the first snapshot is published.
func BenchmarkDirLoad10k(b *testing.B) {
	dir := b.TempDir()
	writeTree(b, dir, 10000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		store := store.NewStore()
		src := filestore.NewDirSource(dir, store, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- src.Run(ctx) }()
		<-src.Ready()
		b.StopTimer()
		if n := store.Snapshot().Len(); n != 10000 {
			b.Fatalf("loaded %d objects", n)
		}
		cancel()
		<-done
		b.StartTimer()
	}
}

// BenchmarkDirSingleFileChange10k measures one edited file in a 10,000-object
// directory reaching a Store subscriber (including the 100 ms debounce).
func BenchmarkDirSingleFileChange10k(b *testing.B) {
	dir := b.TempDir()
	writeTree(b, dir, 10000)
	store := store.NewStore()
	src := filestore.NewDirSource(dir, store, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-src.Ready()
	sub := store.Subscribe()
	defer sub.Close()
	path := filepath.Join(dir, "d00", "f00099.yaml")
	orig, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		edited := strings.Replace(string(orig), "address: 10.0.0.1", fmt.Sprintf("address: 10.200.%d.%d", i/250%250, i%250), 1)
		if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
			b.Fatal(err)
		}
		select {
		case <-sub.C():
		case <-time.After(10 * time.Second):
			b.Fatal("change never reached the subscriber")
		}
		if ch := sub.Take(); len(ch.Keys) != 1 {
			b.Fatalf("changed keys: %d", len(ch.Keys))
		}
	}
}

// BenchmarkDecode measures decoding one VirtualService document.
func BenchmarkDecode(b *testing.B) {
	data, err := os.ReadFile("testdata/valid/routing.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		if _, errs := filestore.Decode("routing.yaml", data); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
}

// BenchmarkGitSingleFileCommit10k measures applying a commit that edits one
// file of a 10,000-object repository: fetch, list the tree, read and decode
// the changed file, update the Store. The commit itself is made outside the
// timer.
func BenchmarkGitSingleFileCommit10k(b *testing.B) {
	dir := b.TempDir()
	writeTree(b, dir, 10000)
	git := func(args ...string) {
		b.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "--quiet", "--initial-branch=main")
	git("-c", "user.email=b@vmesh.io", "-c", "user.name=bench", "add", ".")
	git("-c", "user.email=b@vmesh.io", "-c", "user.name=bench", "commit", "--quiet", "-m", "config")
	store := store.NewStore()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := filestore.NewGitSource(filestore.GitConfig{Repo: dir, Ref: "main", WorkDir: filepath.Join(b.TempDir(), "clone")}, store, quiet)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := src.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "d00", "f00099.yaml")
	orig, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		edited := strings.Replace(string(orig), "address: 10.0.0.1", fmt.Sprintf("address: 10.200.%d.%d", i/250%250, i%250), 1)
		if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
			b.Fatal(err)
		}
		git("-c", "user.email=b@vmesh.io", "-c", "user.name=bench", "commit", "--quiet", "-am", fmt.Sprint(i))
		rev := store.Snapshot().Revision
		b.StartTimer()
		if err := src.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		if store.Snapshot().Revision != rev+1 {
			b.Fatal("the commit did not change the Store")
		}
	}
}

// BenchmarkAnalyze10k measures the analysis of a 10,000-object config (run
// once per config revision in the control plane), its model build included.
func BenchmarkAnalyze10k(b *testing.B) {
	dir := b.TempDir()
	writeTree(b, dir, 10_000)
	l, err := filestore.Load(dir)
	if err != nil || len(l.Errors) > 0 || len(l.Objects) != 10_000 {
		b.Fatalf("load: %v %v (%d objects)", err, l.Errors, len(l.Objects))
	}
	b.ReportAllocs()
	for b.Loop() {
		ws, err := analysis.Objects(l.Objects, nil, true)
		if err != nil {
			b.Fatal(err)
		}
		if len(ws) != 0 {
			b.Fatalf("warnings: %v", ws[:1])
		}
	}
}
