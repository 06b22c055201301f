package controlplane_test

import (
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
)

// TestGitStallReported: a git remote (git http-backend over HTTP) that
// starts accepting connections and never answering is reported, once the
// fetch times out, in /ready (still 200: the last good commit serves) with
// the reason, in the vmesh_git_fetch_* metrics, and by the webhook, which
// answers 503 with the reason while a fetch cannot start; the remote's
// recovery clears it all.
func TestGitStallReported(t *testing.T) {
	repo, commit := gitRepoDir(t)
	good := commit("b", "2.2.2.2")
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(repo), "GIT_HTTP_EXPORT_ALL=1"},
	}
	var stalled atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stalled.Load() {
			<-r.Context().Done() // accepts, never answers
			return
		}
		backend.ServeHTTP(w, r)
	}))
	defer srv.Close()

	cfg := controlplane.DefaultConfig()
	cfg.Git.Repo, cfg.Git.Ref, cfg.Git.Interval, cfg.Git.Timeout = srv.URL+"/"+filepath.Base(repo), "main", time.Hour, time.Second
	cp := start(t, cfg)
	waitReady(t, cp)
	base := "http://" + cp.HTTPAddr()
	post := func() (int, string) {
		t.Helper()
		resp, err := http.Post(base+"/webhook/git", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	stalled.Store(true)
	if code, body := post(); code != http.StatusAccepted {
		t.Fatalf("webhook before the stall: %d %s", code, body)
	}
	waitUntil(t, 10*time.Second, "the webhook to refuse while the fetch stalls", func() bool {
		code, body := post()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "a git fetch has been running for")
	})
	waitUntil(t, 20*time.Second, "/ready to report the failed fetch", func() bool {
		code, body := get(t, base+"/ready")
		return code == http.StatusOK && strings.Contains(body, "warning: git fetches failing since") && strings.Contains(body, "serving "+good)
	})
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(metrics, "vmesh_git_fetch_failing 1") || strings.Contains(metrics, "vmesh_git_fetch_failures_total 0") {
		t.Errorf("metrics during the stall:\n%s", grepLines(metrics, "vmesh_git_"))
	}
	if got := cp.Store().Snapshot().Commit(); got != good {
		t.Errorf("serving %q during the stall, want the last good %s", got, good)
	}
	// The reason is in /debug/config (the git source's error) and on the
	// console's overview, next to the commit still served.
	_, dc := get(t, base+"/debug/config?kind=none")
	if !strings.Contains(dc, "no answer within") || !strings.Contains(dc, "serving "+good[:12]) {
		t.Errorf("/debug/config during the stall lacks the fetch error:\n%.2000s", dc)
	}
	_, ui := get(t, base+"/ui/")
	if !strings.Contains(ui, "no answer within") {
		t.Errorf("the console's overview during the stall lacks the fetch error:\n%.3000s", ui)
	}

	stalled.Store(false)
	waitUntil(t, 20*time.Second, "the recovery to clear /ready and the metric", func() bool {
		post()
		_, body := get(t, base+"/ready")
		_, m := get(t, base+"/metrics")
		return !strings.Contains(body, "warning") && strings.Contains(m, "vmesh_git_fetch_failing 0")
	})
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestGitStallShownWhileItLasts: a git remote whose answers stop after
// their first bytes is cut after --git-stall-timeout and the stall is
// shown, while it lasts, with the remote (no credentials) in
// /debug/config (so `vmesh status`), on the console, in /ready and in the
// vmesh_git_fetch_stalled and vmesh_git_fetch_stalls_total metrics; once
// the remote answers again a commit pushed during the stall is applied
// and all of it clears.
func TestGitStallShownWhileItLasts(t *testing.T) {
	t.Setenv("http_proxy", "")
	t.Setenv("HTTP_PROXY", "")
	repo, commit := gitRepoDir(t)
	good := commit("b", "2.2.2.2")
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(repo), "GIT_HTTP_EXPORT_ALL=1"},
	}
	var stall atomic.Bool
	entered := make(chan struct{}, 64)
	closed := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stall.Load() && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			w = &stallingWriter{ResponseWriter: w, after: 16, entered: entered, done: r.Context().Done(), closed: closed}
		}
		backend.ServeHTTP(w, r)
	}))
	defer srv.Close()
	defer close(closed)
	remote := srv.URL + "/" + filepath.Base(repo)

	cfg := controlplane.DefaultConfig()
	cfg.Git.Repo, cfg.Git.Ref, cfg.Git.Interval, cfg.Git.StallTimeout = "http://ci-bot:s3cret@"+strings.TrimPrefix(remote, "http://"), "main", time.Hour, time.Second
	cp := start(t, cfg)
	waitReady(t, cp)
	base := "http://" + cp.HTTPAddr()
	trigger := func() {
		resp, err := http.Post(base+"/webhook/git", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	stall.Store(true)
	trigger()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no fetch reached the stalled remote")
	}
	next := commit("c", "3.3.3.3")
	want := "fetch stalled: no data from " + remote + " for 1s, retrying in "
	waitUntil(t, 10*time.Second, "/debug/config to show the stall", func() bool {
		_, dc := get(t, base+"/debug/config?kind=none")
		return strings.Contains(dc, want) && strings.Contains(dc, "serving "+good[:12])
	})
	_, dc := get(t, base+"/debug/config?kind=none")
	if strings.Contains(dc, "s3cret") {
		t.Error("/debug/config shows the remote's credentials")
	}
	_, ui := get(t, base+"/ui/")
	if !strings.Contains(ui, "fetch stalled: no data from "+remote) {
		t.Errorf("the console's overview during the stall lacks it:\n%.3000s", ui)
	}
	if code, body := get(t, base+"/ready"); code != http.StatusOK || !strings.Contains(body, "fetch stalled") {
		t.Errorf("/ready during the stall: %d %s", code, body)
	}
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(metrics, "vmesh_git_fetch_stalled 1") || strings.Contains(metrics, "vmesh_git_fetch_stalls_total 0") {
		t.Errorf("metrics during the stall:\n%s", grepLines(metrics, "vmesh_git_"))
	}
	// It lasts as long as the remote stalls: the retries are cut too.
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled fetch was not retried")
	}
	waitUntil(t, 10*time.Second, "the retry's stall counted", func() bool {
		_, m := get(t, base+"/metrics")
		return !strings.Contains(m, "vmesh_git_fetch_stalls_total 1\n") && strings.Contains(m, "vmesh_git_fetch_stalled 1")
	})
	if got := cp.Store().Snapshot().Commit(); got != good {
		t.Errorf("serving %q during the stall, want the last good %s", got, good)
	}

	stall.Store(false) // the remote answers again
	waitUntil(t, 20*time.Second, "the commit pushed during the stall applied and the stall cleared", func() bool {
		trigger()
		_, m := get(t, base+"/metrics")
		_, dc := get(t, base+"/debug/config?kind=none")
		return cp.Store().Snapshot().Commit() == next && strings.Contains(m, "vmesh_git_fetch_stalled 0") && !strings.Contains(dc, "fetch stalled")
	})
}

// stallingWriter passes the first after bytes of a response, then holds
// the connection without sending more until the client goes away.
type stallingWriter struct {
	http.ResponseWriter
	after, sent  int
	entered      chan<- struct{}
	done, closed <-chan struct{}
}

func (w *stallingWriter) Write(p []byte) (int, error) {
	if w.sent < w.after {
		n, err := w.ResponseWriter.Write(p[:min(len(p), w.after-w.sent)])
		w.sent += n
		w.ResponseWriter.(http.Flusher).Flush()
		if err != nil || n == len(p) {
			return n, err
		}
	}
	w.entered <- struct{}{}
	select {
	case <-w.done:
	case <-w.closed:
	}
	return 0, http.ErrAbortHandler
}
