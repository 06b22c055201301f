package filestore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/model/analysis"
	"github.com/vmesh/vmesh/store"
)

// runDir runs a DirSource on dir until the test ends, and checks that Run
// returns within 5 s of being stopped (a FIFO or a loop must not hold it).
func runDir(t *testing.T, dir string, logger *slog.Logger, opts ...filestore.DirOption) *store.Store {
	t.Helper()
	st := store.NewStore()
	src := filestore.NewDirSource(dir, st, logger, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("dir source: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("the dir source did not stop within 5 s")
		}
	})
	select {
	case <-src.Ready():
	case err := <-done:
		t.Fatalf("dir source ended before it was ready: %v", err)
	case <-time.After(60 * time.Second): // a hang guard: the first scan of a pathological tree on a loaded machine takes seconds
		t.Fatal("dir source never became ready")
	}
	return st
}

// problemsOf returns the reported problems of one file.
func problemsOf(s *store.Snapshot, file string) []store.ConfigError {
	var out []store.ConfigError
	for _, e := range errorsOf(s) {
		if e.File == file {
			out = append(out, e)
		}
	}
	return out
}

// reported reports whether a file has a problem whose message holds text.
func reported(s *store.Snapshot, file, text string) bool {
	return slices.ContainsFunc(problemsOf(s, file), func(e store.ConfigError) bool { return strings.Contains(e.Message, text) })
}

func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// checkLive shows the rest of the folder is live: a file written now is
// served and a file deleted now is withdrawn.
func checkLive(t *testing.T, st *store.Store, dir, add, remove string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, add+".yaml"), weYAML(add, "10.1.1.1"))
	must(t, os.Remove(filepath.Join(dir, remove+".yaml")))
	eventually(t, add+" served and "+remove+" withdrawn", func(s *store.Snapshot) bool {
		return addressOf(s, add) == "10.1.1.1" && addressOf(s, remove) == ""
	}, st)
}

// TestDirSourceDeviceLinkAndHugeFileAreNotRead: a link to /dev/zero and a
// 1 GiB (sparse) file are refused before anything is read from them, at
// start and while running; the link to a regular file outside the folder is
// followed; the rest of the folder is served.
func TestDirSourceDeviceLinkAndHugeFileAreNotRead(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("a", "1.1.1.1"))
	writeFile(t, filepath.Join(dir, "gone.yaml"), weYAML("gone", "1.1.1.2"))
	writeFile(t, filepath.Join(outside, "ext.yaml"), weYAML("ext", "1.1.1.3"))
	must(t, os.Symlink(filepath.Join(outside, "ext.yaml"), filepath.Join(dir, "ext.yaml")))
	must(t, os.Symlink("/dev/zero", filepath.Join(dir, "zero.yaml")))
	huge, err := os.Create(filepath.Join(dir, "huge.yaml"))
	must(t, err)
	must(t, huge.Truncate(1<<30))
	must(t, huge.Close())

	before := totalAlloc()
	st := runDir(t, dir, nil)
	if added := totalAlloc() - before; added > 64<<20 {
		t.Errorf("loading a folder with a /dev/zero link and a 1 GiB file allocated %d MiB, want < 64 MiB", added>>20)
	}
	snap := st.Snapshot()
	if addressOf(snap, "a") != "1.1.1.1" || addressOf(snap, "ext") != "1.1.1.3" || snap.Len() != 3 {
		t.Fatalf("the folder's regular files (and the link to one outside it) not served: %d objects", snap.Len())
	}
	if !reported(snap, "zero.yaml", "not a regular file (a character device)") {
		t.Errorf("zero.yaml: %+v, want a problem naming the device", problemsOf(snap, "zero.yaml"))
	}
	if !reported(snap, "huge.yaml", "more than maxFileBytes") {
		t.Errorf("huge.yaml: %+v, want the size limit", problemsOf(snap, "huge.yaml"))
	}

	// A device link added while running is refused the same way.
	before = totalAlloc()
	must(t, os.Symlink("/dev/zero", filepath.Join(dir, "zero2.yaml")))
	eventually(t, "zero2.yaml reported", func(s *store.Snapshot) bool {
		return reported(s, "zero2.yaml", "not a regular file")
	}, st)
	if added := totalAlloc() - before; added > 64<<20 {
		t.Errorf("a /dev/zero link added while running allocated %d MiB, want < 64 MiB", added>>20)
	}
	checkLive(t, st, dir, "b", "gone")
}

// TestDirSourceFIFOLeavesFolderLive: a FIFO with no writer, at start and
// added while running, is reported and skipped; files written and deleted
// afterwards are served and withdrawn, and the source stops promptly.
func TestDirSourceFIFOLeavesFolderLive(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("a", "1.1.1.1"))
	writeFile(t, filepath.Join(dir, "gone.yaml"), weYAML("gone", "1.1.1.2"))
	writeFile(t, filepath.Join(dir, "gone2.yaml"), weYAML("gone2", "1.1.1.3"))
	must(t, syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644))
	st := runDir(t, dir, nil)
	if !reported(st.Snapshot(), "pipe.yaml", "not a regular file (a FIFO)") {
		t.Errorf("pipe.yaml: %+v, want a problem naming the FIFO", problemsOf(st.Snapshot(), "pipe.yaml"))
	}
	checkLive(t, st, dir, "b", "gone")

	must(t, syscall.Mkfifo(filepath.Join(dir, "pipe2.yaml"), 0o644))
	eventually(t, "pipe2.yaml reported", func(s *store.Snapshot) bool { return reported(s, "pipe2.yaml", "a FIFO") }, st)
	checkLive(t, st, dir, "c", "gone2")
	if addressOf(st.Snapshot(), "a") != "1.1.1.1" {
		t.Fatal("a.yaml's object lost")
	}
}

// TestDirSourceSymlinkLoopLeavesFolderLive: a symlink loop at start does not
// stop the source; one added while running is reported; new files are
// loaded and deleted ones withdrawn while the loops exist and after they are
// removed, and their problems go with them.
func TestDirSourceSymlinkLoopLeavesFolderLive(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "g1", "g2", "g3"} {
		writeFile(t, filepath.Join(dir, n+".yaml"), weYAML(n, "1.1.1.1"))
	}
	must(t, os.Symlink("self.yaml", filepath.Join(dir, "self.yaml")))
	must(t, os.Symlink("loopdir", filepath.Join(dir, "loopdir")))
	st := runDir(t, dir, nil)
	snap := st.Snapshot()
	if snap.Len() != 4 || !reported(snap, "self.yaml", "too many levels of symbolic links") || !reported(snap, "loopdir", "cannot follow") {
		t.Fatalf("start with loops: %d objects, problems %+v", snap.Len(), errorsOf(snap))
	}
	checkLive(t, st, dir, "b", "g1")

	must(t, os.Symlink("loop2.yaml", filepath.Join(dir, "loop2.yaml")))
	eventually(t, "loop added while running reported", func(s *store.Snapshot) bool {
		return reported(s, "loop2.yaml", "too many levels of symbolic links")
	}, st)
	checkLive(t, st, dir, "c", "g2")

	for _, l := range []string{"self.yaml", "loopdir", "loop2.yaml"} {
		must(t, os.Remove(filepath.Join(dir, l)))
	}
	eventually(t, "loops' problems gone", func(s *store.Snapshot) bool { return len(errorsOf(s)) == 0 }, st)
	checkLive(t, st, dir, "d", "g3")
	if snap := st.Snapshot(); snap.Len() != 4 || addressOf(snap, "a") == "" {
		t.Fatalf("after the loops: %d objects", snap.Len())
	}
}

// aliasBomb is an 11 KiB document whose aliases expand to about 100,000
// invalid values (a map of 1,000 bad ports shared by 100 endpoints).
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: bomb}\nspec:\n  hosts: [bomb.example]\n  endpoints:\n  - {address: 10.0.0.1, ports: &m {")
	for i := range 1000 {
		fmt.Fprintf(&b, "p%d: x, ", i)
	}
	b.WriteString("}}\n")
	for range 99 {
		b.WriteString("  - {address: 10.0.0.1, ports: *m}\n")
	}
	return b.String()
}

// TestDirSourceProblemsAndLogsBounded: an alias bomb, a file of 100,000
// invalid one-line documents and a 3 MiB host name each report at most
// maxProblems problems (the rest counted), quote the long value cut, log
// one line each, and an unrelated edit afterwards logs nothing.
func TestDirSourceProblemsAndLogsBounded(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ok.yaml"), weYAML("ok", "1.1.1.1"))
	writeFile(t, filepath.Join(dir, "bomb.yaml"), aliasBomb())
	writeFile(t, filepath.Join(dir, "docs.yaml"), strings.Repeat("--- {kind: Nope}\n", 100_000))
	writeFile(t, filepath.Join(dir, "host.yaml"), "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: long}\nspec:\n  hosts: ["+strings.Repeat("a", 3<<20)+"]\n")
	var logs testenv.LogBuffer
	st := runDir(t, dir, logs.Logger(slog.LevelInfo))
	max := filestore.DefaultMaxProblems

	snap := st.Snapshot()
	bomb := problemsOf(snap, "bomb.yaml")
	if len(bomb) > max+1 || !strings.Contains(bomb[len(bomb)-1].Message, "more problems in this file") {
		t.Errorf("alias bomb: %d problems, want at most %d and a line counting the rest; last %+v", len(bomb), max+1, bomb[len(bomb)-1])
	}
	docs := problemsOf(snap, "docs.yaml")
	if len(docs) > max+2 || !strings.Contains(docs[len(docs)-1].Message, "more than 5,000 YAML documents") {
		t.Errorf("100,000 documents: %d problems, want at most %d ending with the document limit; last %+v", len(docs), max+2, docs[len(docs)-1])
	}
	host := problemsOf(snap, "host.yaml")
	if len(host) == 0 || !strings.Contains(host[0].Message, "(3,145,728 bytes)") {
		t.Errorf("3 MiB host name: %+v, want it quoted cut with its length", host)
	}
	for _, e := range errorsOf(snap) {
		if n := len(e.Error()); n > 2048 {
			t.Errorf("a problem of %d bytes: %.200s", n, e.Error())
		}
	}
	rec := httptest.NewRecorder()
	filestore.DebugHandler(st, new(analysis.Cache).Warnings).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/config", nil))
	var dc filestore.DebugConfig
	must(t, json.Unmarshal(rec.Body.Bytes(), &dc))
	if rec.Body.Len() > 64<<10 {
		t.Errorf("/debug/config is %d bytes, want < 64 KiB", rec.Body.Len())
	}

	// One line per bad file, however many problems it has, none huge.
	if lines := logs.Lines("config errors"); len(lines) != 3 {
		t.Errorf("%d 'config errors' lines for 3 bad files, want 3", len(lines))
	}
	for _, l := range logs.Lines("") {
		if len(l) > 64<<10 {
			t.Errorf("a log line of %d bytes", len(l))
		}
	}
	total := len(logs.Lines(""))
	// Two unrelated edits, each seen applied: the first edit's publish
	// (and its logging) is over once the second is visible.
	for i, addr := range []string{"1.1.1.2", "1.1.1.3"} {
		writeFile(t, filepath.Join(dir, "ok.yaml"), weYAML("ok", addr))
		eventually(t, fmt.Sprintf("edit %d applied", i+1), func(s *store.Snapshot) bool { return addressOf(s, "ok") == addr }, st)
	}
	if after := logs.Lines(""); len(after) != total {
		t.Errorf("unrelated edits logged %d lines, want none:\n%s", len(after)-total, strings.Join(after[total:], "\n"))
	}
	// An edit to the bomb (one more endpoint: 1,000 more problems) logs one line.
	writeFile(t, filepath.Join(dir, "bomb.yaml"), aliasBomb()+"  - {address: 10.0.0.1, ports: *m}\n")
	eventually(t, "bomb edit reported", func(s *store.Snapshot) bool { return reported(s, "bomb.yaml", "and 100,980 more problems") }, st)
	writeFile(t, filepath.Join(dir, "ok.yaml"), weYAML("ok", "1.1.1.4"))
	eventually(t, "edit applied", func(s *store.Snapshot) bool { return addressOf(s, "ok") == "1.1.1.4" }, st)
	if n := len(logs.Lines("")) - total; n != 1 {
		t.Errorf("an edit to the alias bomb logged %d lines, want 1", n)
	}
}

// TestDecodeProblemsBoundedWithoutDocumentLimit: with the document limit
// out of the way, 20,000 invalid documents still keep maxProblems problems
// and count the rest.
func TestDecodeProblemsBoundedWithoutDocumentLimit(t *testing.T) {
	_, errs := filestore.DecodeLimited("docs.yaml", []byte(strings.Repeat("--- {kind: Nope}\n", 20_000)), filestore.Limits{MaxDocuments: 100_000, MaxProblems: 5})
	if len(errs) != 6 || errs[5].Message != "and 19,995 more problems in this file (the first 5 are kept: maxProblems)" {
		t.Fatalf("%d problems, last %+v", len(errs), errs[len(errs)-1])
	}
	if e := errs[0]; e.File != "docs.yaml" || e.Line != 1 || e.Message != "missing apiVersion or kind" {
		t.Errorf("first problem: %+v, want docs.yaml:1: missing apiVersion or kind", e)
	}
}

// TestDirSourceEmptyFolderHeld: a folder whose every file is deleted keeps
// serving what it had, reported, until a file defines something again;
// with allowEmpty the objects are withdrawn.
func TestDirSourceEmptyFolderHeld(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("a", "1.1.1.1"))
	writeFile(t, filepath.Join(dir, "sub", "b.yaml"), weYAML("b", "2.2.2.2"))
	st := runDir(t, dir, nil)
	must(t, os.Remove(filepath.Join(dir, "a.yaml")))
	must(t, os.RemoveAll(filepath.Join(dir, "sub")))
	eventually(t, "empty folder reported", func(s *store.Snapshot) bool {
		return slices.ContainsFunc(errorsOf(s), func(e store.ConfigError) bool { return strings.Contains(e.Message, "allowEmpty") })
	}, st)
	if snap := st.Snapshot(); snap.Len() != 2 || addressOf(snap, "a") != "1.1.1.1" {
		t.Fatalf("an emptied folder withdrew its objects: %d left", snap.Len())
	}
	writeFile(t, filepath.Join(dir, "c.yaml"), weYAML("c", "3.3.3.3"))
	eventually(t, "a file defines an object again: the folder applies", func(s *store.Snapshot) bool {
		return s.Len() == 1 && addressOf(s, "c") == "3.3.3.3" && len(errorsOf(s)) == 0
	}, st)

	allowed := t.TempDir()
	writeFile(t, filepath.Join(allowed, "a.yaml"), weYAML("a", "1.1.1.1"))
	st = runDir(t, allowed, nil, filestore.WithAllowEmpty(true))
	must(t, os.Remove(filepath.Join(allowed, "a.yaml")))
	eventually(t, "allowEmpty withdraws everything", func(s *store.Snapshot) bool { return s.Len() == 0 && len(errorsOf(s)) == 0 }, st)
}
