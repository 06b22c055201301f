package filestore_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

// gitRepo is a real git repository in a temporary folder.
type gitRepo struct {
	t   *testing.T
	dir string
}

func newGitRepo(t *testing.T) *gitRepo {
	t.Helper()
	r := &gitRepo{t: t, dir: t.TempDir()}
	r.run("init", "--quiet", "--initial-branch=main")
	r.run("config", "user.email", "test@vmesh.io")
	r.run("config", "user.name", "vmesh test")
	return r
}

func (r *gitRepo) run(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files (path -> content; "" deletes) and commits them.
func (r *gitRepo) commit(msg string, files map[string]string) string {
	r.t.Helper()
	for p, content := range files {
		full := filepath.Join(r.dir, p)
		if content == "" {
			_ = os.Remove(full)
			continue
		}
		writeFile(r.t, full, content)
	}
	r.run("add", "-A")
	r.run("commit", "--quiet", "--allow-empty", "-m", msg)
	return r.run("rev-parse", "HEAD")
}

func newGitSource(t *testing.T, repo, ref, path string) (*filestore.GitSource, *store.Store) {
	t.Helper()
	cs := store.NewStore()
	src, err := filestore.NewGitSource(filestore.GitConfig{Repo: repo, Ref: ref, Path: path, WorkDir: filepath.Join(t.TempDir(), "clone")}, cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src, cs
}

func gitStatus(s *store.Snapshot) store.SourceStatus {
	for _, st := range s.Sources {
		if strings.HasPrefix(st.Source, "git:") {
			return st
		}
	}
	return store.SourceStatus{}
}

func TestGitSourceBadCommitThenGoodThenForcePush(t *testing.T) {
	ctx := context.Background()
	repo := newGitRepo(t)
	c1 := repo.commit("first", map[string]string{"mesh/a.yaml": weYAML("a", "1.1.1.1"), "README.md": "not config"})
	src, cs := newGitSource(t, repo.dir, "main", "mesh")
	must(t, src.Sync(ctx))
	snap := cs.Snapshot()
	if addressOf(snap, "a") != "1.1.1.1" || snap.Commit() != c1 {
		t.Fatalf("first commit not applied: %q %q", addressOf(snap, "a"), snap.Commit())
	}
	o := snap.Get(store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: "a"})
	// The path in the repository, the git path included (issue 45).
	if o.Origin.Commit != c1 || o.Origin.File != "mesh/a.yaml" {
		t.Fatalf("origin: %+v", o.Origin)
	}

	// A commit with one good and one bad file is rejected whole.
	bad := repo.commit("bad", map[string]string{
		"mesh/a.yaml": weYAML("a", "1.1.1.2"),
		"mesh/b.yaml": weYAML("b", "2.2.2.2") + "  weight: heavy\n",
	})
	must(t, src.Sync(ctx))
	snap = cs.Snapshot()
	if addressOf(snap, "a") != "1.1.1.1" || addressOf(snap, "b") != "" {
		t.Fatalf("bad commit partially applied")
	}
	st := gitStatus(snap)
	if st.Revision != c1 || len(st.Errors) == 0 {
		t.Fatalf("status after bad commit: %+v", st)
	}
	if e := st.Errors[0]; e.Commit != bad || e.File != "mesh/b.yaml" || e.Line != 7 || e.Field != "weight" {
		t.Fatalf("bad commit error: %+v", e)
	}
	if !strings.Contains(st.Errors[0].Error(), bad[:12]) {
		t.Fatalf("error does not name the SHA: %s", st.Errors[0].Error())
	}

	// The fix applies whole.
	c3 := repo.commit("fix", map[string]string{"mesh/b.yaml": weYAML("b", "2.2.2.2")})
	must(t, src.Sync(ctx))
	snap = cs.Snapshot()
	if addressOf(snap, "a") != "1.1.1.2" || addressOf(snap, "b") != "2.2.2.2" || snap.Commit() != c3 || len(gitStatus(snap).Errors) != 0 {
		t.Fatalf("fix not applied: %q %q %s %+v", addressOf(snap, "a"), addressOf(snap, "b"), snap.Commit(), gitStatus(snap).Errors)
	}

	// Force-push: history rewritten to a sibling of the first commit.
	repo.run("reset", "--quiet", "--hard", c1)
	c4 := repo.commit("rewritten", map[string]string{"mesh/c.yaml": weYAML("c", "3.3.3.3")})
	must(t, src.Sync(ctx))
	snap = cs.Snapshot()
	if snap.Commit() != c4 || addressOf(snap, "b") != "" || addressOf(snap, "c") != "3.3.3.3" || addressOf(snap, "a") != "1.1.1.1" {
		t.Fatalf("force-push not followed: commit %s", snap.Commit())
	}
}

func TestGitSourceTagAndTrigger(t *testing.T) {
	repo := newGitRepo(t)
	repo.commit("first", map[string]string{"a.yaml": weYAML("a", "1.1.1.1")})
	repo.run("tag", "v1")
	repo.commit("second", map[string]string{"a.yaml": weYAML("a", "1.1.1.2")})

	src, cs := newGitSource(t, repo.dir, "v1", "")
	must(t, src.Sync(context.Background()))
	if addressOf(cs.Snapshot(), "a") != "1.1.1.1" {
		t.Fatal("tag not followed")
	}

	src2, store2 := newGitSource(t, repo.dir, "refs/heads/main", "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src2.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-src2.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	if addressOf(store2.Snapshot(), "a") != "1.1.1.2" {
		t.Fatal("branch not followed")
	}
	repo.commit("third", map[string]string{"a.yaml": weYAML("a", "1.1.1.3")})
	src2.Trigger() // the 30 s poll interval would be too slow: the trigger must fetch at once
	eventually(t, "trigger fetched the new commit", func(s *store.Snapshot) bool { return addressOf(s, "a") == "1.1.1.3" }, store2)
}

func TestGitSourceUnreachableKeepsServing(t *testing.T) {
	repo := newGitRepo(t)
	repo.commit("first", map[string]string{"a.yaml": weYAML("a", "1.1.1.1")})
	src, cs := newGitSource(t, repo.dir, "main", "")
	must(t, src.Sync(context.Background()))
	must(t, os.RemoveAll(repo.dir))
	if err := src.Sync(context.Background()); err == nil {
		t.Fatal("fetch from a removed repository succeeded")
	}
	snap := cs.Snapshot()
	if addressOf(snap, "a") != "1.1.1.1" || len(gitStatus(snap).Errors) == 0 {
		t.Fatal("lost config or error not reported when the remote vanished")
	}
}

// TestGitSourceReadsChangedFilesOnly checks that a commit is applied from
// the files it changed: objects of untouched files are the ones read at
// an earlier commit (same objects, their commit), a deleted file's objects
// go, and a commit that defines a key in a second file is rejected whole,
// leaving the last good commit serving, until a fix applies.
func TestGitSourceReadsChangedFilesOnly(t *testing.T) {
	ctx := context.Background()
	repo := newGitRepo(t)
	c1 := repo.commit("first", map[string]string{"a.yaml": weYAML("a", "1.1.1.1"), "b.yaml": weYAML("b", "2.2.2.2"), "c.yaml": weYAML("c", "3.3.3.3")})
	src, cs := newGitSource(t, repo.dir, "main", "")
	must(t, src.Sync(ctx))
	key := func(name string) store.Key {
		return store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: name}
	}
	b1 := cs.Snapshot().Get(key("b"))

	c2 := repo.commit("move a, drop c", map[string]string{"a.yaml": weYAML("a", "1.1.1.9"), "c.yaml": ""})
	must(t, src.Sync(ctx))
	snap := cs.Snapshot()
	if a := snap.Get(key("a")); a == nil || a.Origin.Commit != c2 || addressOf(snap, "a") != "1.1.1.9" {
		t.Fatalf("changed file: %+v", a)
	}
	if b := snap.Get(key("b")); b != b1 || b.Origin.Commit != c1 {
		t.Fatalf("untouched file read again: %+v (was %+v)", b, b1)
	}
	if snap.Get(key("c")) != nil || snap.Commit() != c2 || snap.Len() != 2 {
		t.Fatalf("deleted file's object kept, or commit %s not served", snap.Commit())
	}

	// d.yaml defines b again: the commit is rejected whole.
	bad := repo.commit("dup", map[string]string{"d.yaml": weYAML("b", "4.4.4.4") + "---\n" + weYAML("d", "5.5.5.5")})
	must(t, src.Sync(ctx))
	snap = cs.Snapshot()
	st := gitStatus(snap)
	if addressOf(snap, "d") != "" || addressOf(snap, "b") != "2.2.2.2" || st.Revision != c2 {
		t.Fatalf("commit with a duplicate key partly applied: d %q b %q revision %s", addressOf(snap, "d"), addressOf(snap, "b"), st.Revision)
	}
	// One mistake, one error; that the commit is rejected is the source's
	// Held line, not a second error (issue 45).
	if len(st.Errors) != 1 || st.Errors[0].Commit != bad || st.Errors[0].File != "d.yaml" || !strings.Contains(st.Errors[0].Message, "defined twice") {
		t.Fatalf("duplicate not reported against the commit: %+v", st.Errors)
	}
	if want := filestore.RejectedCommitNote(bad, c2); st.Held != want {
		t.Errorf("held %q, want %q", st.Held, want)
	}

	// The fix applies, from the state of the last good commit.
	c4 := repo.commit("fix", map[string]string{"d.yaml": weYAML("d", "5.5.5.5")})
	must(t, src.Sync(ctx))
	snap = cs.Snapshot()
	if addressOf(snap, "d") != "5.5.5.5" || addressOf(snap, "b") != "2.2.2.2" || snap.Commit() != c4 || len(gitStatus(snap).Errors) != 0 || snap.Len() != 3 {
		t.Fatalf("fix not applied: d %q b %q commit %s errors %+v", addressOf(snap, "d"), addressOf(snap, "b"), snap.Commit(), gitStatus(snap).Errors)
	}
}

// TestGitSourceRejectedEditLeavesNoTrace checks that a rejected commit that
// edited an existing file leaves the source as the last good commit had
// it: reverting the file is a good commit, not another duplicate.
func TestGitSourceRejectedEditLeavesNoTrace(t *testing.T) {
	ctx := context.Background()
	repo := newGitRepo(t)
	repo.commit("first", map[string]string{"a.yaml": weYAML("a", "1.1.1.1"), "b.yaml": weYAML("b", "2.2.2.2")})
	src, cs := newGitSource(t, repo.dir, "main", "")
	must(t, src.Sync(ctx))
	repo.commit("b defines a too", map[string]string{"b.yaml": weYAML("b", "2.2.2.2") + "---\n" + weYAML("a", "9.9.9.9")})
	must(t, src.Sync(ctx))
	if st := gitStatus(cs.Snapshot()); len(st.Errors) == 0 {
		t.Fatal("a commit defining a key twice was accepted")
	}
	c3 := repo.commit("revert b", map[string]string{"b.yaml": weYAML("b", "2.2.2.2")})
	must(t, src.Sync(ctx))
	snap := cs.Snapshot()
	if st := gitStatus(snap); len(st.Errors) != 0 || snap.Commit() != c3 || addressOf(snap, "a") != "1.1.1.1" || addressOf(snap, "b") != "2.2.2.2" {
		t.Fatalf("after reverting the rejected edit: commit %s, errors %+v, a %q, b %q", snap.Commit(), st.Errors, addressOf(snap, "a"), addressOf(snap, "b"))
	}
}
