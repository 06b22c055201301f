package controlplane_test

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/filestore"
)

// startIn is start with the caller's DataDir, and a stop function that
// waits for Run to end (a restart reuses the same folder).
func startIn(t *testing.T, cfg controlplane.Config) (*controlplane.ControlPlane, func()) {
	t.Helper()
	cfg.HTTPAddr, cfg.XDSAddr, cfg.SecureAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	return runUntilCleanup(t, cfg, nil)
}

// gitRepoDir makes a repository with one commit of a.yaml and returns its
// folder and a function committing more files.
func gitRepoDir(t *testing.T) (string, func(name, addr string) string) {
	t.Helper()
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "--quiet", "--initial-branch=main")
	git("config", "user.email", "t@vmesh.io")
	git("config", "user.name", "t")
	commit := func(name, addr string) string {
		doc := "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: " + name + "}\nspec: {address: " + addr + "}\n"
		if err := os.WriteFile(filepath.Join(repo, name+".yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "-A")
		git("commit", "--quiet", "-m", name)
		return git("rev-parse", "HEAD")
	}
	commit("a", "1.1.1.1")
	return repo, commit
}

// TestServeRestartDuringGitOutage: vmesh restarted with the same data dir
// while the repository is unreachable is ready within 5 s, serving the last
// good commit, the fetch error in /debug/config.
func TestServeRestartDuringGitOutage(t *testing.T) {
	repo, commit := gitRepoDir(t)
	good := commit("b", "2.2.2.2")
	cfg := controlplane.DefaultConfig()
	cfg.Git.Repo, cfg.Git.Ref, cfg.Git.Interval = repo, "main", time.Hour
	cfg.DataDir = t.TempDir()
	cp, stop := startIn(t, cfg)
	waitReady(t, cp)
	stop()

	if err := os.Rename(repo, repo+".away"); err != nil {
		t.Fatal(err)
	}
	cp, _ = startIn(t, cfg)
	waitUntil(t, 5*time.Second, "/ready after a restart during the git outage", func() bool {
		code, _ := get(t, "http://"+cp.HTTPAddr()+"/ready")
		return code == http.StatusOK
	})
	if snap := cp.Store().Snapshot(); snap.Commit() != good || snap.Len() != 2 {
		t.Fatalf("serving commit %q with %d objects, want the last good %s with 2", snap.Commit(), snap.Len(), good[:12])
	}
	waitUntil(t, 10*time.Second, "the fetch error in /debug/config", func() bool {
		_, body := get(t, "http://"+cp.HTTPAddr()+"/debug/config")
		var dc filestore.DebugConfig
		if err := json.Unmarshal([]byte(body), &dc); err != nil {
			t.Fatal(err)
		}
		return len(dc.Sources) == 1 && len(dc.Sources[0].Errors) > 0 && strings.Contains(dc.Sources[0].Errors[0].Message, "fetch ")
	})
}

// TestServeStartsWithBadEntries: a symlink loop, a FIFO and a link to
// /dev/zero in the config folder at start do not stop vmesh serve: it is
// ready, serves the rest and reports each entry.
func TestServeStartsWithBadEntries(t *testing.T) {
	dir := t.TempDir()
	doc := "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: a}\nspec: {address: 1.1.1.1}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		os.Symlink("loop.yaml", filepath.Join(dir, "loop.yaml")),
		syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644),
		os.Symlink("/dev/zero", filepath.Join(dir, "zero.yaml")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg := controlplane.DefaultConfig()
	cfg.ConfigDir = dir
	cp := start(t, cfg)
	waitReady(t, cp)
	snap := cp.Store().Snapshot()
	if snap.Len() != 1 {
		t.Fatalf("%d objects, want a.yaml's", snap.Len())
	}
	var files []string
	for _, e := range snap.Sources[0].Errors {
		files = append(files, e.File)
	}
	if strings.Join(files, ",") != "loop.yaml,pipe.yaml,zero.yaml" {
		t.Fatalf("problems reported for %v, want the loop, the FIFO and the device link", files)
	}
}

// zeros is a body source that allocates nothing.
var zeros = make([]byte, 64<<10)

// rawPost sends a POST /webhook/git on its own connection, declaring size
// bytes (or chunked when size < 0) and sending up to total bytes of body
// while it waits for the answer; it returns the status code.
func rawPost(t *testing.T, addr string, size, total int64) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer conn.Close()
	head := "POST /webhook/git HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
	if size >= 0 {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
	} else {
		head += "Transfer-Encoding: chunked\r\n\r\n"
	}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Error(err)
		return 0
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		for sent := int64(0); sent < total; sent += int64(len(zeros)) {
			if size < 0 {
				if _, err := fmt.Fprintf(conn, "%x\r\n", len(zeros)); err != nil {
					return
				}
			}
			if _, err := conn.Write(zeros); err != nil {
				return // the server answered and closed
			}
			if size < 0 {
				if _, err := io.WriteString(conn, "\r\n"); err != nil {
					return
				}
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	conn.Close()
	<-written
	if err != nil {
		t.Errorf("webhook answer: %v", err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func signedPost(t *testing.T, cp *controlplane.ControlPlane, secret, body string) int {
	t.Helper()
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	req, _ := http.NewRequest(http.MethodPost, "http://"+cp.HTTPAddr()+"/webhook/git", strings.NewReader(body))
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestWebhookFloodBounded: 20 concurrent unsigned 25 MiB bodies are
// refused with 413 and add less than 64 MiB; a chunked one is refused after
// the limit; a signed call still triggers a fetch.
func TestWebhookFloodBounded(t *testing.T) {
	repo, commit := gitRepoDir(t)
	cfg := controlplane.DefaultConfig()
	cfg.Git.Repo, cfg.Git.Ref, cfg.Git.Interval, cfg.Git.WebhookSecret = repo, "main", time.Hour, "s3cret"
	cp := start(t, cfg)
	waitReady(t, cp)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	codes := make([]int, 20)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() { codes[i] = rawPost(t, cp.HTTPAddr(), 25<<20, 25<<20) })
	}
	wg.Wait()
	chunked := rawPost(t, cp.HTTPAddr(), -1, 25<<20)
	runtime.ReadMemStats(&after)
	for i, c := range codes {
		if c != http.StatusRequestEntityTooLarge {
			t.Errorf("call %d: %d, want 413", i, c)
		}
	}
	if chunked != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked 25 MiB body: %d, want 413", chunked)
	}
	if added := after.TotalAlloc - before.TotalAlloc; added > 64<<20 {
		t.Errorf("the flood allocated %d MiB, want < 64 MiB", added>>20)
	}

	commit("b", "2.2.2.2")
	if code := signedPost(t, cp, "s3cret", `{"ref":"refs/heads/main"}`); code != http.StatusAccepted {
		t.Fatalf("signed webhook after the flood: %d", code)
	}
	waitUntil(t, 10*time.Second, "the signed webhook to bring the new commit", func() bool { return cp.Store().Snapshot().Len() == 2 })
}

// TestWebhookConcurrencyLimited: calls whose bodies are still arriving hold
// the webhook's few slots; another call meanwhile gets 429, and once they
// are gone a signed call is taken (202, or 503 while an earlier fetch runs).
func TestWebhookConcurrencyLimited(t *testing.T) {
	repo, _ := gitRepoDir(t)
	cfg := controlplane.DefaultConfig()
	cfg.Git.Repo, cfg.Git.Ref, cfg.Git.Interval, cfg.Git.WebhookSecret = repo, "main", time.Hour, "s3cret"
	cp := start(t, cfg)
	waitReady(t, cp)

	var slow []net.Conn
	for range 8 { // more than the slots: some may be refused, the rest hold one each
		conn, err := net.Dial("tcp", cp.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		slow = append(slow, conn)
		if _, err := io.WriteString(conn, "POST /webhook/git HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 10*time.Second, "a 429 while slow calls hold the webhook", func() bool {
		return signedPost(t, cp, "s3cret", `{}`) == http.StatusTooManyRequests
	})
	for _, c := range slow {
		c.Close()
	}
	// Accepted: 202, or 503 when a fetch an earlier call triggered is still
	// running (that answer, too, says the push is fetched once it ends).
	// Only 202 would let polling keep a fetch running forever on a slow
	// machine: each call that finds one running queues another.
	waitUntil(t, 10*time.Second, "a signed call accepted after the slow calls ended", func() bool {
		code := signedPost(t, cp, "s3cret", `{}`)
		return code == http.StatusAccepted || code == http.StatusServiceUnavailable
	})
}
