package filestore_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

// runGit runs a git source until the test ends, and checks that Run
// returns within 5 s of being stopped (a stalled fetch must not hold it).
func runGit(t *testing.T, cfg filestore.GitConfig) (*filestore.GitSource, *store.Store, context.CancelFunc) {
	t.Helper()
	cs := store.NewStore()
	src, err := filestore.NewGitSource(cfg, cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("git source: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("the git source did not stop within 5 s")
		}
	}
	t.Cleanup(stop)
	return src, cs, stop
}

func gitErrorWith(text string) func(*store.Snapshot) bool {
	return func(s *store.Snapshot) bool {
		return slices.ContainsFunc(gitStatus(s).Errors, func(e store.ConfigError) bool { return strings.Contains(e.Message, text) })
	}
}

// TestGitSourceRestartDuringOutage: a source restarted on the same clone
// while the remote is gone is ready within 5 s, serving the last good
// commit, with the fetch error shown; when the remote is back the error
// clears, and new commits apply.
func TestGitSourceRestartDuringOutage(t *testing.T) {
	repo := newGitRepo(t)
	c1 := repo.commit("first", map[string]string{"a.yaml": weYAML("a", "1.1.1.1")})
	cfg := filestore.GitConfig{Repo: repo.dir, Ref: "main", Interval: time.Hour, WorkDir: filepath.Join(t.TempDir(), "clone")}
	first, _, stop := runGit(t, cfg)
	select {
	case <-first.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("first run never ready")
	}
	stop()

	away := repo.dir + ".away"
	must(t, os.Rename(repo.dir, away))
	start := time.Now()
	src, cs, _ := runGit(t, cfg)
	select {
	case <-src.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("a restart during the outage was not ready within 5 s")
	}
	t.Logf("ready after %s", time.Since(start).Round(time.Millisecond))
	if snap := cs.Snapshot(); snap.Commit() != c1 || addressOf(snap, "a") != "1.1.1.1" {
		t.Fatalf("restart serves commit %q, %d objects; want the last good %s", snap.Commit(), snap.Len(), c1[:12])
	}
	eventually(t, "the fetch error shown", gitErrorWith("fetch "), cs)
	if st := gitStatus(cs.Snapshot()); st.Revision != c1 || !strings.Contains(st.Errors[0].Message, "serving "+c1[:12]) {
		t.Fatalf("status during the outage: %+v", st)
	}

	must(t, os.Rename(away, repo.dir))
	src.Trigger()
	eventually(t, "the error clears once the remote is back", func(s *store.Snapshot) bool {
		return len(gitStatus(s).Errors) == 0 && s.Commit() == c1
	}, cs)
	repo.commit("second", map[string]string{"a.yaml": weYAML("a", "1.1.1.2")})
	src.Trigger()
	eventually(t, "the next commit applies", func(s *store.Snapshot) bool { return addressOf(s, "a") == "1.1.1.2" }, cs)
}

// stalledListener accepts connections and never answers; each accepted
// connection is signalled on the returned channel.
func stalledListener(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 16)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String(), accepted
}

// TestGitSourceStalledRemote: a remote that accepts the connection and
// never answers fails the fetch after the timeout, is reported, retried
// with backoff, and does not hold the source's shutdown.
func TestGitSourceStalledRemote(t *testing.T) {
	t.Setenv("http_proxy", "")
	t.Setenv("HTTP_PROXY", "")
	addr, accepted := stalledListener(t)
	cfg := filestore.GitConfig{Repo: "http://" + addr + "/mesh.git", Ref: "main", Interval: time.Hour,
		Timeout: 500 * time.Millisecond, WorkDir: filepath.Join(t.TempDir(), "clone")}

	// One Sync returns once the timeout has passed, with the reason.
	src, err := filestore.NewGitSource(cfg, store.NewStore(), nil)
	must(t, err)
	start := time.Now()
	err = src.Sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no answer within 500ms") {
		t.Fatalf("sync from a stalled remote: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("sync from a stalled remote took %s", took)
	}

	_, cs, stop := runGit(t, cfg)
	eventually(t, "the stall reported", gitErrorWith("no answer within 500ms (a stalled remote?)"), cs)
	// The listener saw the direct Sync, the first fetch of Run, and
	// then the retry that the backoff (1 s) brings.
	for i := range 3 {
		select {
		case <-accepted:
		case <-time.After(10 * time.Second):
			t.Fatalf("fetch %d never reached the stalled remote: no retry", i+1)
		}
	}
	stop() // within 5 s, mid-fetch or not
}

// TestGitSourceEmptyCommitHeld: a commit that deletes every file is held
// and reported, also after a restart; with AllowEmpty it applies.
func TestGitSourceEmptyCommitHeld(t *testing.T) {
	ctx := context.Background()
	repo := newGitRepo(t)
	c1 := repo.commit("first", map[string]string{"a.yaml": weYAML("a", "1.1.1.1"), "b.yaml": weYAML("b", "2.2.2.2")})
	workDir := filepath.Join(t.TempDir(), "clone")
	cs := store.NewStore()
	src, err := filestore.NewGitSource(filestore.GitConfig{Repo: repo.dir, Ref: "main", WorkDir: workDir}, cs, nil)
	must(t, err)
	allowStore := store.NewStore()
	allow, err := filestore.NewGitSource(filestore.GitConfig{Repo: repo.dir, Ref: "main", WorkDir: filepath.Join(t.TempDir(), "clone"), AllowEmpty: true}, allowStore, nil)
	must(t, err)
	must(t, src.Sync(ctx))
	must(t, allow.Sync(ctx))

	empty := repo.commit("delete everything", map[string]string{"a.yaml": "", "b.yaml": ""})
	must(t, src.Sync(ctx))
	snap := cs.Snapshot()
	if snap.Len() != 2 || snap.Commit() != c1 || !gitErrorWith("allowEmpty")(snap) || gitStatus(snap).Errors[0].Commit != empty {
		t.Fatalf("empty commit: %d objects at %s, status %+v; want it held", snap.Len(), snap.Commit(), gitStatus(snap))
	}
	must(t, allow.Sync(ctx))
	if snap := allowStore.Snapshot(); snap.Len() != 0 || snap.Commit() != empty {
		t.Fatalf("allowEmpty: %d objects at %s, want the empty commit applied", snap.Len(), snap.Commit())
	}

	// A restart on the same clone serves the last good commit and holds
	// the empty one again.
	restarted, rstore, _ := runGit(t, filestore.GitConfig{Repo: repo.dir, Ref: "main", Interval: time.Hour, WorkDir: workDir})
	select {
	case <-restarted.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("restart not ready")
	}
	eventually(t, "the empty commit held after a restart", gitErrorWith("allowEmpty"), rstore)
	if snap := rstore.Snapshot(); snap.Len() != 2 || snap.Commit() != c1 {
		t.Fatalf("after a restart: %d objects at %s", snap.Len(), snap.Commit())
	}
}

// TestGitSourceBlobLimits: a blob over maxFileBytes is refused from the
// tree listing, a symbolic link is refused, a file of 100,000 invalid
// documents reports a bounded list: each commit is rejected whole.
func TestGitSourceBlobLimits(t *testing.T) {
	ctx := context.Background()
	repo := newGitRepo(t)
	c1 := repo.commit("first", map[string]string{"a.yaml": weYAML("a", "1.1.1.1")})
	cs := store.NewStore()
	src, err := filestore.NewGitSource(filestore.GitConfig{Repo: repo.dir, Ref: "main", WorkDir: filepath.Join(t.TempDir(), "clone"),
		Limits: filestore.Limits{MaxFileBytes: 64 << 10}}, cs, nil)
	must(t, err)
	must(t, src.Sync(ctx))

	big := repo.commit("big", map[string]string{"big.yaml": weYAML("big", "2.2.2.2") + "# " + strings.Repeat("x", 100<<10) + "\n"})
	must(t, src.Sync(ctx))
	st := gitStatus(cs.Snapshot())
	if st.Revision != c1 || len(st.Errors) != 1 || st.Errors[0].File != "big.yaml" || st.Errors[0].Commit != big ||
		!strings.Contains(st.Errors[0].Message, "more than maxFileBytes (65,536)") {
		t.Fatalf("big blob: %+v", st)
	}

	repo.commit("link", map[string]string{"big.yaml": ""})
	must(t, os.Symlink("a.yaml", filepath.Join(repo.dir, "link.yaml")))
	repo.commit("link", nil)
	must(t, src.Sync(ctx))
	if snap := cs.Snapshot(); snap.Commit() != c1 || !gitErrorWith("a symbolic link in the repository")(snap) {
		t.Fatalf("symlink: %+v", gitStatus(snap))
	}

	must(t, os.Remove(filepath.Join(repo.dir, "link.yaml")))
	repo.commit("docs", map[string]string{"docs.yaml": strings.Repeat("--- {kind: Nope}\n", 3000)})
	must(t, src.Sync(ctx))
	st = gitStatus(cs.Snapshot())
	if st.Revision != c1 || len(st.Errors) > filestore.DefaultMaxProblems+2 || !gitErrorWith("more problems in this file")(cs.Snapshot()) {
		t.Fatalf("3,000 invalid documents: %d problems, revision %s", len(st.Errors), st.Revision)
	}
}

// slowRemote serves a repository over git's smart HTTP protocol (git
// http-backend), and can stall or throttle its answers.
type slowRemote struct {
	url string
	// stall, while set, makes each git-upload-pack answer stop after its
	// first bytes and hold the connection until the client goes; stalled
	// receives one value per answer so held.
	stall   atomic.Bool
	stalled chan struct{}
	// rate, when > 0, is the bytes per second every answer is sent at.
	rate int
}

func newSlowRemote(t *testing.T, repoDir string, rate int) *slowRemote {
	t.Helper()
	t.Setenv("http_proxy", "")
	t.Setenv("HTTP_PROXY", "")
	execPath, err := exec.Command("git", "--exec-path").Output()
	must(t, err)
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(repoDir), "GIT_HTTP_EXPORT_ALL=1"},
	}
	s := &slowRemote{stalled: make(chan struct{}, 16), rate: rate}
	closed := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &slowWriter{ResponseWriter: w, rate: s.rate, done: r.Context().Done(), closed: closed}
		if s.stall.Load() && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			sw.stallAfter, sw.stalled = 16, s.stalled
		}
		backend.ServeHTTP(sw, r)
	}))
	t.Cleanup(func() { close(closed); srv.Close() })
	s.url = srv.URL + "/" + filepath.Base(repoDir)
	return s
}

// slowWriter sends a response at rate bytes a second (0: at once) and,
// with stallAfter set, stops after that many bytes of the body until the
// client goes away.
type slowWriter struct {
	http.ResponseWriter
	rate         int
	stallAfter   int
	stalled      chan<- struct{}
	sent         int
	done, closed <-chan struct{}
}

func (w *slowWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := len(p)
		if w.rate > 0 {
			k = min(k, max(1, w.rate/8))
			select { // the throttle: an eighth of the rate every 125 ms
			case <-time.After(125 * time.Millisecond):
			case <-w.done:
				return n, http.ErrAbortHandler
			}
		}
		if w.stalled != nil {
			if w.sent >= w.stallAfter {
				w.stalled <- struct{}{}
				w.stalled = nil
				select { // holds the connection, sends nothing more
				case <-w.done:
				case <-w.closed:
				}
				return n, http.ErrAbortHandler
			}
			k = min(k, w.stallAfter-w.sent)
		}
		m, err := w.ResponseWriter.Write(p[:k])
		n, w.sent, p = n+m, w.sent+m, p[m:]
		if err != nil {
			return n, err
		}
		w.ResponseWriter.(http.Flusher).Flush()
	}
	return n, nil
}

// TestGitSourceStallCutAndRetried: with the default settings, a remote
// whose answer stops after its first bytes is cut within seconds, the
// stall is shown on the source while it lasts (and in FetchStatus), and
// a commit pushed after the stall began is applied within 15 s once the
// remote answers again; the report clears.
func TestGitSourceStallCutAndRetried(t *testing.T) {
	repo := newGitRepo(t)
	c1 := repo.commit("first", map[string]string{"a.yaml": weYAML("a", "1.1.1.1")})
	remote := newSlowRemote(t, repo.dir, 0)
	src, cs, _ := runGit(t, filestore.GitConfig{Repo: remote.url, Ref: "main", WorkDir: filepath.Join(t.TempDir(), "clone")})
	select {
	case <-src.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("never ready")
	}
	if st := src.FetchStatus(); st.StallTimeout != filestore.DefaultGitStallTimeout || st.Timeout != filestore.DefaultGitTimeout {
		t.Fatalf("defaults: %+v", st)
	}

	remote.stall.Store(true)
	src.Trigger()
	select {
	case <-remote.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the fetch never reached the stalled remote")
	}
	pushed := time.Now()
	c2 := repo.commit("second", map[string]string{"a.yaml": weYAML("a", "1.1.1.2")})

	want := "fetch stalled: no data from " + remote.url + " for 10s, retrying in 1s; serving " + c1[:12]
	deadline := time.Now().Add(14 * time.Second)
	for !gitErrorWith(want)(cs.Snapshot()) {
		if time.Now().After(deadline) {
			t.Fatalf("the stall is not shown on the source: %+v", gitStatus(cs.Snapshot()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	shown := time.Since(pushed)
	if st := src.FetchStatus(); !st.Stalled || st.Stalls != 1 || !strings.Contains(st.LastError, "fetch stalled") {
		t.Errorf("FetchStatus during the stall: %+v", st)
	}
	if got := cs.Snapshot().Commit(); got != c1 {
		t.Errorf("serving %q during the stall, want %s", got, c1)
	}
	remote.stall.Store(false) // the remote answers again

	eventually(t, "the commit pushed during the stall applied", func(s *store.Snapshot) bool {
		return s.Commit() == c2 && addressOf(s, "a") == "1.1.1.2"
	}, cs)
	took := time.Since(pushed)
	t.Logf("stall shown %s after the push, commit applied after %s", shown.Round(time.Millisecond), took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("the commit pushed during the stall took %s to apply, want <= 15s", took.Round(time.Millisecond))
	}
	if st := gitStatus(cs.Snapshot()); len(st.Errors) != 0 {
		t.Errorf("the stall still reported after a good fetch: %+v", st.Errors)
	}
	if st := src.FetchStatus(); st.Stalled || st.LastError != "" || st.Stalls != 1 {
		t.Errorf("FetchStatus after the recovery: %+v", st)
	}
}

// TestGitSourceSlowCloneCompletes: a first clone from a remote that sends
// 1 KiB a second, for several times the stall timeout (2 s here), runs to
// its end: data that keeps arriving, also inside one large pkt-line that
// git shows no progress for, is progress.
func TestGitSourceSlowCloneCompletes(t *testing.T) {
	repo := newGitRepo(t)
	files := map[string]string{}
	for i := range 4 { // ~7 KiB of pack that does not compress
		noise := make([]byte, 1300)
		_, err := rand.Read(noise)
		must(t, err)
		files[fmt.Sprintf("we-%d.yaml", i)] = weYAML(fmt.Sprintf("we-%d", i), fmt.Sprintf("10.0.0.%d", i+1)) + "# " + base64.StdEncoding.EncodeToString(noise) + "\n"
	}
	c1 := repo.commit("first", files)
	remote := newSlowRemote(t, repo.dir, 1024)
	const stall = 2 * time.Second
	cs := store.NewStore()
	src, err := filestore.NewGitSource(filestore.GitConfig{Repo: remote.url, Ref: "main", StallTimeout: stall,
		WorkDir: filepath.Join(t.TempDir(), "clone")}, cs, nil)
	must(t, err)
	start := time.Now()
	if err := src.Sync(context.Background()); err != nil {
		t.Fatalf("a slow but progressing clone was cut after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	took := time.Since(start)
	t.Logf("clone at 1 KiB/s took %s", took.Round(time.Millisecond))
	if took < 3*stall {
		t.Errorf("the clone took %s, not several stall timeouts (%s): the test does not show progress resetting the watchdog", took, stall)
	}
	if snap := cs.Snapshot(); snap.Commit() != c1 || addressOf(snap, "we-3") != "10.0.0.4" {
		t.Errorf("serving %q after the clone, want %s", snap.Commit(), c1)
	}
	if st := src.FetchStatus(); st.Stalls != 0 || st.Failures != 0 {
		t.Errorf("FetchStatus after the slow clone: %+v", st)
	}
}
