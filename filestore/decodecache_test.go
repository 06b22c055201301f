package filestore_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

// cacheInputs are files with objects, field lines, errors and warnings.
func cacheInputs(t *testing.T) map[string][]byte {
	t.Helper()
	in := map[string][]byte{
		"bad.yaml": []byte(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: bad, namespace: demo}
spec:
  hosts: [greeter.demo.svc]
  http:
  - route:
    - destination: {host: greeter.demo.svc}
      weight: -3
`),
		"warned.yaml": []byte(`apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: t, namespace: demo}
spec: {url: oci://example.internal/f:1}
`),
		"mesh.yaml": []byte("trustDomain: example.org\n"),
	}
	files, err := filepath.Glob("testdata/valid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		in[filepath.Base(f)] = data
	}
	return in
}

// sameDecoded fails unless got is what want is, object by object.
func sameDecoded(t *testing.T, file string, got, want filestore.Decoded) {
	t.Helper()
	if !reflect.DeepEqual(got.Errors, want.Errors) || !reflect.DeepEqual(got.Warnings, want.Warnings) {
		t.Errorf("%s: problems differ:\ngot  %v %v\nwant %v %v", file, got.Errors, got.Warnings, want.Errors, want.Warnings)
	}
	if len(got.Objects) != len(want.Objects) {
		t.Fatalf("%s: %d objects, want %d", file, len(got.Objects), len(want.Objects))
	}
	for i, g := range got.Objects {
		w := want.Objects[i]
		if g.Key != w.Key || g.APIVersion != w.APIVersion || g.Origin != w.Origin ||
			!reflect.DeepEqual(g.Labels, w.Labels) || !reflect.DeepEqual(g.Annotations, w.Annotations) ||
			!reflect.DeepEqual(g.FieldLines(), w.FieldLines()) || !proto.Equal(g.Spec, w.Spec) {
			t.Errorf("%s: object %d differs:\ngot  %+v %v\nwant %+v %v", file, i, g, g.FieldLines(), w, w.FieldLines())
		}
	}
}

func TestDecodeCacheServesWhatDecodingGives(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "decode-cache", "dir")
	in := cacheInputs(t)
	lim := filestore.DefaultLimits()
	c := filestore.OpenDecodeCache(path)
	for name, data := range in {
		sameDecoded(t, name, c.Decode(name, "", data, lim), filestore.DecodeSourceFile(name, "", data, lim))
	}
	if hits, misses := c.Counts(); hits != 0 || misses != len(in) {
		t.Fatalf("a new cache: %d hits, %d misses; want 0, %d", hits, misses, len(in))
	}
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("saved cache: %v %v, want mode 0600", info, err)
	}

	c = filestore.OpenDecodeCache(path)
	for name, data := range in {
		got := c.Decode(name, "", data, lim)
		sameDecoded(t, name, got, filestore.DecodeSourceFile(name, "", data, lim))
		for _, o := range got.Objects { // the caller's to change: the cache keeps its own copy
			for k := range o.Labels {
				o.Labels[k] = "changed"
			}
			for k := range o.FieldLines() {
				o.FieldLines()[k] = -1
			}
		}
	}
	if hits, misses := c.Counts(); hits != len(in) || misses != 0 {
		t.Fatalf("a reopened cache: %d hits, %d misses; want %d, 0", hits, misses, len(in))
	}
	// Served twice, the same answer: nothing the first caller changed leaked.
	for name, data := range in {
		sameDecoded(t, name, c.Decode(name, "", data, lim), filestore.DecodeSourceFile(name, "", data, lim))
	}

	// A changed file, another name, other limits: each decodes afresh.
	c = filestore.OpenDecodeCache(path)
	routing := in["routing.yaml"]
	changed := append([]byte("# a comment moves every line\n"), routing...)
	sameDecoded(t, "routing.yaml", c.Decode("routing.yaml", "", changed, lim), filestore.DecodeSourceFile("routing.yaml", "", changed, lim))
	sameDecoded(t, "other.yaml", c.Decode("other.yaml", "", routing, lim), filestore.DecodeSourceFile("other.yaml", "", routing, lim))
	small := lim
	small.MaxProblems = 1
	sameDecoded(t, "bad.yaml", c.Decode("bad.yaml", "", in["bad.yaml"], small), filestore.DecodeSourceFile("bad.yaml", "", in["bad.yaml"], small))
	if hits, misses := c.Counts(); hits != 0 || misses != 3 {
		t.Fatalf("changed inputs: %d hits, %d misses; want 0, 3", hits, misses)
	}
}

func TestDecodeCacheIgnoresAnUnreadableFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decode-cache")
	if err := os.WriteFile(path, []byte("not a cache"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := filestore.OpenDecodeCache(path)
	in := cacheInputs(t)
	for name, data := range in {
		sameDecoded(t, name, c.Decode(name, "", data, filestore.DefaultLimits()), filestore.DecodeSourceFile(name, "", data, filestore.DefaultLimits()))
	}
	if hits, misses := c.Counts(); hits != 0 || misses != len(in) {
		t.Fatalf("%d hits, %d misses; want 0, %d", hits, misses, len(in))
	}
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	if c = filestore.OpenDecodeCache(path); c.Decode("bad.yaml", "", in["bad.yaml"], filestore.DefaultLimits()).Errors == nil {
		t.Fatal("bad.yaml decoded without its error")
	}
	if hits, _ := c.Counts(); hits != 1 {
		t.Fatalf("the rewritten cache served %d, want 1", hits)
	}
}

// TestDirSourceStartsFromTheDecodeCache: a restart on an unchanged tree
// serves the same objects without decoding, and a file changed while the
// control plane was down is decoded afresh.
func TestDirSourceStartsFromTheDecodeCache(t *testing.T) {
	root, data := t.TempDir(), t.TempDir()
	in := cacheInputs(t)
	for name, b := range in {
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cachePath := filepath.Join(data, "decode-cache")
	start := func() (*store.Store, *filestore.DecodeCache) {
		t.Helper()
		st := store.NewStore()
		c := filestore.OpenDecodeCache(cachePath)
		src := filestore.NewDirSource(root, st, slog.New(slog.DiscardHandler), filestore.WithDecodeCache(c))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- src.Run(ctx) }()
		select {
		case <-src.Ready():
		case err := <-done:
			t.Fatalf("source ended: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("source not ready")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := c.Save(); err != nil {
			t.Fatal(err)
		}
		return st, c
	}
	first, c := start()
	if hits, misses := c.Counts(); hits != 0 || misses != len(in) {
		t.Fatalf("first start: %d hits, %d misses; want 0, %d", hits, misses, len(in))
	}
	second, c := start()
	if hits, misses := c.Counts(); hits != len(in) || misses != 0 {
		t.Fatalf("restart: %d hits, %d misses; want %d, 0", hits, misses, len(in))
	}
	a, b := first.Snapshot(), second.Snapshot()
	if a.Len() == 0 || a.Len() != b.Len() {
		t.Fatalf("restart serves %d objects, first start %d", b.Len(), a.Len())
	}
	for _, o := range a.List(store.KindVirtualService) {
		if got := b.Get(o.Key); got == nil || !proto.Equal(got.Spec, o.Spec) || got.Origin != o.Origin {
			t.Errorf("restart serves %v for %v", got, o)
		}
	}
	problems := func(s *store.Snapshot) (errs, warns []store.ConfigError) {
		for _, st := range s.Sources {
			errs, warns = append(errs, st.Errors...), append(warns, st.Warnings...)
		}
		return errs, warns
	}
	errsA, warnsA := problems(a)
	errsB, warnsB := problems(b)
	if len(errsA) == 0 || len(warnsA) == 0 || !reflect.DeepEqual(errsA, errsB) || !reflect.DeepEqual(warnsA, warnsB) {
		t.Fatalf("restart's problems differ:\n%v %v\n%v %v", errsB, warnsB, errsA, warnsA)
	}

	if err := os.WriteFile(filepath.Join(root, "warned.yaml"), []byte("kind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	third, c := start()
	if hits, misses := c.Counts(); hits != len(in)-1 || misses != 1 {
		t.Fatalf("restart after a change: %d hits, %d misses; want %d, 1", hits, misses, len(in)-1)
	}
	if errsC, _ := problems(third.Snapshot()); len(errsC) <= len(errsA) {
		t.Fatalf("the file broken while down decoded without its error: %v", errsC)
	}
}

// TestGitSourceStartsFromTheDecodeCache: a restart on the same commit
// decodes no file; the objects keep their commit and the cache is not used
// past the first applied commit.
func TestGitSourceStartsFromTheDecodeCache(t *testing.T) {
	ctx := context.Background()
	repo := newGitRepo(t)
	c1 := repo.commit("first", map[string]string{"a.yaml": weYAML("a", "1.1.1.1"), "b.yaml": weYAML("b", "2.2.2.2"), "sub/c.yaml": weYAML("c", "3.3.3.3")})
	cachePath := filepath.Join(t.TempDir(), "decode-cache", "git")
	start := func() (*filestore.GitSource, *store.Store, *filestore.DecodeCache) {
		t.Helper()
		cs := store.NewStore()
		c := filestore.OpenDecodeCache(cachePath)
		src, err := filestore.NewGitSource(filestore.GitConfig{Repo: repo.dir, Ref: "main", WorkDir: filepath.Join(t.TempDir(), "clone"), DecodeCache: c}, cs, nil)
		if err != nil {
			t.Fatal(err)
		}
		must(t, src.Sync(ctx))
		must(t, c.Save())
		return src, cs, c
	}
	_, _, c := start()
	if hits, misses := c.Counts(); hits != 0 || misses != 3 {
		t.Fatalf("first start: %d hits, %d misses; want 0, 3", hits, misses)
	}
	src, cs, c := start()
	if hits, misses := c.Counts(); hits != 3 || misses != 0 {
		t.Fatalf("restart: %d hits, %d misses; want 3, 0", hits, misses)
	}
	snap := cs.Snapshot()
	if a := snap.Get(store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: "a"}); a == nil || a.Origin.Commit != c1 || addressOf(snap, "c") != "3.3.3.3" {
		t.Fatalf("restart serves %+v", a)
	}
	repo.commit("move a", map[string]string{"a.yaml": weYAML("a", "1.1.1.9")})
	must(t, src.Sync(ctx))
	if hits, misses := c.Counts(); hits != 3 || misses != 0 {
		t.Fatalf("the cache served a later commit: %d hits, %d misses", hits, misses)
	}
	if got := addressOf(cs.Snapshot(), "a"); got != "1.1.1.9" {
		t.Fatalf("later commit: a at %q", got)
	}
}
