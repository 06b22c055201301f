package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/buildinfo"
	"github.com/vmesh/vmesh/internal/testenv"
)

// TestVersionMakeBuild builds vmesh with the Makefile's ldflags (what
// `make build` and `make package` stamp), serves with it, and checks that
// `vmesh version --server` prints the same revision for the client and the
// server, the one git names for HEAD.
func TestVersionMakeBuild(t *testing.T) {
	root := testenv.RepoRoot(t)
	ldflags, err := exec.Command("make", "-s", "--no-print-directory", "-C", root, "print-ldflags").Output()
	if err != nil {
		t.Fatalf("make print-ldflags: %v", err)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	rev := buildinfo.ShortRevision(strings.TrimSpace(string(head)))
	bin := filepath.Join(t.TempDir(), "vmesh")
	build := exec.Command("go", "build", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	serve := exec.CommandContext(ctx, bin, "serve", "--config-dir", filepath.Join(root, "examples/quickstart"),
		"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0", "--secure-addr", "127.0.0.1:0")
	stderr, err := serve.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = serve.Wait() }()
	// The "vmesh serving" line names the HTTP address; the line before it the build.
	var httpAddr string
	var logged struct {
		Msg      string `json:"msg"`
		HTTP     string `json:"http"`
		Revision string `json:"revision"`
	}
	loggedRev := ""
	lines := bufio.NewScanner(stderr)
	for httpAddr == "" && lines.Scan() {
		if json.Unmarshal(lines.Bytes(), &logged) != nil {
			continue
		}
		switch logged.Msg {
		case "vmesh version":
			loggedRev = logged.Revision
		case "vmesh serving":
			httpAddr = logged.HTTP
		}
	}
	if httpAddr == "" {
		t.Fatalf("no vmesh serving line: %v", lines.Err())
	}
	go func() { // keep the pipe drained
		for lines.Scan() {
		}
	}()
	if buildinfo.ShortRevision(loggedRev) != rev {
		t.Errorf("logged revision %q, want %s", loggedRev, rev)
	}

	out, err := exec.Command(bin, "version", "--server", httpAddr).CombinedOutput()
	if err != nil {
		t.Fatalf("vmesh version --server: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != 2 || !strings.HasPrefix(got[0], "client: vmesh ") || !strings.HasPrefix(got[1], "server "+httpAddr+": vmesh ") {
		t.Fatalf("vmesh version --server printed:\n%s", out)
	}
	for _, line := range got {
		if !strings.Contains(line, "("+rev+", ") {
			t.Errorf("%q does not name revision %s", line, rev)
		}
	}
	client, _ := strings.CutPrefix(got[0], "client: ")
	server, _ := strings.CutPrefix(got[1], "server "+httpAddr+": ")
	if client != server {
		t.Errorf("client %q and server %q differ", client, server)
	}
}
