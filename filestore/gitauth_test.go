package filestore_test

import (
	"context"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

// TestGitSourceHTTPTokenAuth serves a repository over git's smart HTTP
// protocol (git http-backend behind a handler that demands a token) and
// checks the source authenticates with it, and fails clearly without it.
func TestGitSourceHTTPTokenAuth(t *testing.T) {
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
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || user != "ci-bot" || pass != "s3cret-token" {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	defer srv.Close()
	url := srv.URL + "/" + filepath.Base(repo.dir)

	for _, c := range []struct {
		name, user, token string
		ok                bool
	}{
		{name: "token", user: "ci-bot", token: "s3cret-token", ok: true},
		{name: "wrong token", user: "ci-bot", token: "nope"},
		{name: "no token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := store.NewStore()
			src, err := filestore.NewGitSource(filestore.GitConfig{Repo: url, Ref: "main", Username: c.user, Token: c.token,
				WorkDir: filepath.Join(t.TempDir(), "clone")}, store, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = src.Sync(context.Background())
			if c.ok != (err == nil) {
				t.Fatalf("sync: %v", err)
			}
			if c.ok && addressOf(store.Snapshot(), "a") != "1.1.1.1" {
				t.Fatal("config not loaded over HTTP")
			}
			if !c.ok && len(gitStatus(store.Snapshot()).Errors) == 0 {
				t.Fatal("auth failure not reported on the source")
			}
		})
	}
}
