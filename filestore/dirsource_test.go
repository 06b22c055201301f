package filestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

func weYAML(name, addr string) string {
	return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata:\n  name: %s\nspec:\n  address: %s\n", name, addr)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startDir runs a DirSource on dir until the test ends.
func startDir(t *testing.T, dir string) *store.Store {
	t.Helper()
	cs := store.NewStore()
	src := filestore.NewDirSource(dir, cs, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := src.Run(ctx); err != nil {
			t.Errorf("dir source: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-src.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("dir source never became ready")
	}
	return cs
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func(*store.Snapshot) bool, cs *store.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cond(cs.Snapshot()) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for: %s", what)
}

func addressOf(s *store.Snapshot, name string) string {
	o := s.Get(store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: name})
	if o == nil {
		return ""
	}
	return o.Spec.(*networking.WorkloadEntry).Address
}

func errorsOf(s *store.Snapshot) []store.ConfigError {
	var out []store.ConfigError
	for _, st := range s.Sources {
		out = append(out, st.Errors...)
	}
	return out
}

func TestDirSourceEditRenameDeleteFix(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("a", "1.1.1.1"))
	writeFile(t, filepath.Join(dir, "sub", "b.yml"), weYAML("b", "2.2.2.2"))
	writeFile(t, filepath.Join(dir, "ignored.txt"), weYAML("c", "3.3.3.3"))
	cs := startDir(t, dir)
	snap := cs.Snapshot()
	if addressOf(snap, "a") != "1.1.1.1" || addressOf(snap, "b") != "2.2.2.2" || addressOf(snap, "c") != "" {
		t.Fatalf("initial load wrong: %d objects", snap.Len())
	}
	if o := snap.Get(store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: "b"}); o.Origin.File != filepath.Join("sub", "b.yml") || o.Origin.Line != 1 {
		t.Fatalf("origin: %+v", o.Origin)
	}

	// Plain edit.
	writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("a", "1.1.1.2"))
	eventually(t, "edit applied", func(s *store.Snapshot) bool { return addressOf(s, "a") == "1.1.1.2" }, cs)

	// Editor pattern: write a temp file, rename over the original.
	writeFile(t, filepath.Join(dir, ".a.yaml.tmp"), weYAML("a", "1.1.1.3"))
	if err := os.Rename(filepath.Join(dir, ".a.yaml.tmp"), filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "rename applied", func(s *store.Snapshot) bool { return addressOf(s, "a") == "1.1.1.3" }, cs)

	// Editor pattern: truncate, then write.
	f, err := os.OpenFile(filepath.Join(dir, "a.yaml"), os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if _, err := f.WriteString(weYAML("a", "1.1.1.4")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	eventually(t, "truncate+write applied", func(s *store.Snapshot) bool { return addressOf(s, "a") == "1.1.1.4" }, cs)

	// New sub-folder.
	writeFile(t, filepath.Join(dir, "new", "deeper", "d.yaml"), weYAML("d", "4.4.4.4"))
	eventually(t, "new folder picked up", func(s *store.Snapshot) bool { return addressOf(s, "d") == "4.4.4.4" }, cs)
	writeFile(t, filepath.Join(dir, "new", "deeper", "d.yaml"), weYAML("d", "4.4.4.5"))
	eventually(t, "file in new folder watched", func(s *store.Snapshot) bool { return addressOf(s, "d") == "4.4.4.5" }, cs)

	// A bad edit keeps the last good objects and reports file:line:field.
	writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("a", "1.1.1.5")+"  bogus: true\n")
	eventually(t, "error reported", func(s *store.Snapshot) bool { return len(errorsOf(s)) > 0 }, cs)
	snap = cs.Snapshot()
	if addressOf(snap, "a") != "1.1.1.4" {
		t.Fatalf("bad edit lost the last good object: %q", addressOf(snap, "a"))
	}
	errs := errorsOf(snap)
	if e := errs[0]; e.File != "a.yaml" || e.Line != 7 || e.Field != "bogus" {
		t.Fatalf("error: %+v", errs)
	}
	// Fix it: the error clears and the fix applies.
	writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("a", "1.1.1.6"))
	eventually(t, "fix applied and error cleared", func(s *store.Snapshot) bool {
		return addressOf(s, "a") == "1.1.1.6" && len(errorsOf(s)) == 0
	}, cs)

	// Delete a file and a whole folder.
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "new")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deletes applied", func(s *store.Snapshot) bool {
		return addressOf(s, "a") == "" && addressOf(s, "d") == "" && addressOf(s, "b") == "2.2.2.2"
	}, cs)
}

func TestDirSourceDuplicateAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("x", "1.1.1.1"))
	writeFile(t, filepath.Join(dir, "b.yaml"), weYAML("x", "2.2.2.2"))
	cs := startDir(t, dir)
	snap := cs.Snapshot()
	if addressOf(snap, "x") != "1.1.1.1" {
		t.Fatalf("first file in path order must win")
	}
	errs := errorsOf(snap)
	if len(errs) != 1 || errs[0].File != "b.yaml" || !strings.Contains(errs[0].Message, "a.yaml:1") {
		t.Fatalf("duplicate not reported with both places: %+v", errs)
	}
	// The winning file goes: the other definition takes over, and the
	// duplicate is no longer reported.
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b.yaml's definition after a.yaml is removed", func(s *store.Snapshot) bool {
		return addressOf(s, "x") == "2.2.2.2" && len(errorsOf(s)) == 0
	}, cs)
	// It comes back and wins again; b.yaml's other object is untouched.
	writeFile(t, filepath.Join(dir, "b.yaml"), weYAML("x", "2.2.2.2")+"---\n"+weYAML("y", "3.3.3.3"))
	writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("x", "1.1.1.1"))
	eventually(t, "a.yaml's definition again", func(s *store.Snapshot) bool {
		return addressOf(s, "x") == "1.1.1.1" && addressOf(s, "y") == "3.3.3.3" && len(errorsOf(s)) == 1
	}, cs)
	// Removing the duplicate from b.yaml clears the error and keeps x.
	writeFile(t, filepath.Join(dir, "b.yaml"), weYAML("y", "3.3.3.3"))
	eventually(t, "the duplicate gone", func(s *store.Snapshot) bool {
		return addressOf(s, "x") == "1.1.1.1" && addressOf(s, "y") == "3.3.3.3" && len(errorsOf(s)) == 0
	}, cs)
	// And a.yaml's removal now removes x.
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "x removed with its only file", func(s *store.Snapshot) bool {
		return addressOf(s, "x") == "" && addressOf(s, "y") == "3.3.3.3" && s.Len() == 1
	}, cs)
}

// TestDirSourceAtomicSymlinkSwap follows the layout Kubernetes uses for
// mounted ConfigMaps: files link through "..data", which is swapped atomically.
func TestDirSourceAtomicSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "..v1", "a.yaml"), weYAML("a", "1.1.1.1"))
	must(t, os.Symlink("..v1", filepath.Join(dir, "..data")))
	must(t, os.Symlink(filepath.Join("..data", "a.yaml"), filepath.Join(dir, "a.yaml")))
	cs := startDir(t, dir)
	if addressOf(cs.Snapshot(), "a") != "1.1.1.1" {
		t.Fatal("initial load through ..data failed")
	}
	writeFile(t, filepath.Join(dir, "..v2", "a.yaml"), weYAML("a", "2.2.2.2"))
	must(t, os.Symlink("..v2", filepath.Join(dir, "..data_tmp")))
	must(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	must(t, os.RemoveAll(filepath.Join(dir, "..v1")))
	eventually(t, "swap applied", func(s *store.Snapshot) bool { return addressOf(s, "a") == "2.2.2.2" }, cs)
	if n := cs.Snapshot().Len(); n != 1 {
		t.Fatalf("hidden ..v2 folder was read too: %d objects", n)
	}
}

// TestDirSourceSymlinkedFolderSwap swaps a symlinked sub-folder atomically.
func TestDirSourceSymlinkedFolderSwap(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	writeFile(t, filepath.Join(base, "v1", "a.yaml"), weYAML("a", "1.1.1.1"))
	writeFile(t, filepath.Join(base, "v2", "a.yaml"), weYAML("a", "2.2.2.2"))
	must(t, os.MkdirAll(root, 0o755))
	must(t, os.Symlink(filepath.Join(base, "v1"), filepath.Join(root, "current")))
	cs := startDir(t, root)
	if addressOf(cs.Snapshot(), "a") != "1.1.1.1" {
		t.Fatal("initial load through symlinked folder failed")
	}
	must(t, os.Symlink(filepath.Join(base, "v2"), filepath.Join(root, ".current.new")))
	must(t, os.Rename(filepath.Join(root, ".current.new"), filepath.Join(root, "current")))
	eventually(t, "folder swap applied", func(s *store.Snapshot) bool { return addressOf(s, "a") == "2.2.2.2" }, cs)
	// Edits inside the new target are watched too.
	writeFile(t, filepath.Join(base, "v2", "a.yaml"), weYAML("a", "2.2.2.3"))
	eventually(t, "edit in swapped folder applied", func(s *store.Snapshot) bool { return addressOf(s, "a") == "2.2.2.3" }, cs)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestDirSourceFileEventsInPlace: creating, renaming and removing files in
// a watched folder is picked up without a rescan of the tree.
func TestDirSourceFileEventsInPlace(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "sub", "a.yaml"), weYAML("a", "1.1.1.1"))
	writeFile(t, filepath.Join(dir, "keep.yaml"), weYAML("keep", "9.9.9.9")) // the folder never comes to define nothing: that is held
	cs := startDir(t, dir)
	writeFile(t, filepath.Join(dir, "sub", "b.yaml"), weYAML("b", "2.2.2.2"))
	eventually(t, "new file in a watched folder", func(s *store.Snapshot) bool { return addressOf(s, "b") == "2.2.2.2" }, cs)
	must(t, os.Rename(filepath.Join(dir, "sub", "b.yaml"), filepath.Join(dir, "sub", "c.yml")))
	eventually(t, "renamed file keeps its objects under the new name", func(s *store.Snapshot) bool {
		o := s.Get(store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: "b"})
		return o != nil && o.Origin.File == filepath.Join("sub", "c.yml")
	}, cs)
	must(t, os.Rename(filepath.Join(dir, "sub", "c.yml"), filepath.Join(dir, "sub", "c.yml.bak")))
	eventually(t, "file renamed to a non-YAML name dropped", func(s *store.Snapshot) bool { return addressOf(s, "b") == "" }, cs)
	must(t, os.Remove(filepath.Join(dir, "sub", "a.yaml")))
	eventually(t, "removed file dropped", func(s *store.Snapshot) bool { return addressOf(s, "a") == "" && s.Len() == 1 }, cs)
}

// TestDirSourceChunkedWriteAppliedWhole: a file written in place in several
// chunks (an event each) is read once, whole, when its events stop: the
// Store changes once, never holding the first chunk's objects alone. The
// writer pauses between chunks for less than the settle window.
func TestDirSourceChunkedWriteAppliedWhole(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "keep.yaml"), weYAML("keep", "9.9.9.9"))
	cs := store.NewStore()
	src := filestore.NewDirSource(dir, cs, nil, filestore.WithSettle(time.Second, 10*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-src.Ready()
	before := cs.Snapshot().Revision

	f, err := os.Create(filepath.Join(dir, "two.yaml"))
	must(t, err)
	for i, doc := range []string{weYAML("one", "1.1.1.1") + "---\n", weYAML("two", "2.2.2.2")} {
		if i > 0 {
			time.Sleep(100 * time.Millisecond) // a slow writer: well inside the settle window
		}
		_, err := f.WriteString(doc)
		must(t, err)
	}
	must(t, f.Close())
	eventually(t, "both objects of the chunked file", func(s *store.Snapshot) bool {
		return addressOf(s, "one") == "1.1.1.1" && addressOf(s, "two") == "2.2.2.2"
	}, cs)
	if got := cs.Snapshot().Revision - before; got != 1 {
		t.Errorf("the Store changed %d times for one file write, want once", got)
	}
}
