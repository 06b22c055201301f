package filestore_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

// TestFaultGitPasswordNotInArgv: a repository URL with a password
// (https://user:pass@host/repo) authenticates, and while git talks to the
// server no process on this host has the password in its command line
// (/proc/PID/cmdline, which every local user reads): not git, not
// git-remote-http. Before, the URL went to `git fetch` as an argument.
func TestFaultGitPasswordNotInArgv(t *testing.T) {
	const password = "pw-9f3c1e7a-in-url"
	repo := newGitRepo(t)
	repo.commit("first", map[string]string{"a.yaml": weYAML("a", "1.1.1.1")})
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(repo.dir), "GIT_HTTP_EXPORT_ALL=1"},
	}
	var mu sync.Mutex
	var leaks []string
	scans := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// git and its remote helper are running while they wait for this
		// answer: read every process's command line now.
		mu.Lock()
		leaks = append(leaks, cmdlinesContaining(t, password)...)
		scans++
		mu.Unlock()
		user, pass, ok := r.BasicAuth()
		if !ok || user != "ci-bot" || pass != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	defer srv.Close()
	url := strings.Replace(srv.URL, "http://", "http://ci-bot:"+password+"@", 1) + "/" + filepath.Base(repo.dir)

	store := store.NewStore()
	src, err := filestore.NewGitSource(filestore.GitConfig{Repo: url, Ref: "main", WorkDir: filepath.Join(t.TempDir(), "clone")}, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Sync(context.Background()); err != nil {
		t.Fatalf("sync with the URL's credentials: %v", err)
	}
	if addressOf(store.Snapshot(), "a") != "1.1.1.1" {
		t.Fatal("config not loaded")
	}
	mu.Lock()
	defer mu.Unlock()
	if scans == 0 {
		t.Fatal("git never reached the server")
	}
	if len(leaks) > 0 {
		t.Errorf("the password is in the command line of: %v", leaks)
	}
	if strings.Contains(src.Source().Name, password) {
		t.Errorf("source name %q carries the password", src.Source().Name)
	}
}

// cmdlinesContaining returns the command lines of this host's processes
// that contain s, with their PIDs.
func cmdlinesContaining(t *testing.T, s string) []string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Error(err)
		return nil
	}
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended
		}
		if bytes.Contains(b, []byte(s)) {
			out = append(out, p+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return out
}
