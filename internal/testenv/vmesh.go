package testenv

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// VMesh is a `vmesh serve` process of the repository's own build.
type VMesh struct {
	// HTTPAddr, XDSAddr and SecureAddr are where it listens (ports the
	// kernel picked).
	HTTPAddr, XDSAddr, SecureAddr string
}

// StartVMesh builds cmd/vmesh and runs `vmesh serve` with args on ports the
// kernel picks, until the test ends; it returns once the control plane says
// it serves (its "vmesh serving" log line).
func StartVMesh(t testing.TB, args ...string) *VMesh {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "vmesh")
	build := exec.Command("go", "build", "-o", bin, "./cmd/vmesh")
	build.Dir = RepoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("testenv: go build ./cmd/vmesh: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--http-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0", "--secure-addr", "127.0.0.1:0",
		"--data-dir", t.TempDir()}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start vmesh: %v", err)
	}
	v := &VMesh{}
	var mu sync.Mutex
	var logged strings.Builder
	printed := func() string {
		mu.Lock()
		defer mu.Unlock()
		return logged.String()
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	serving := make(chan struct{})
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	go func() {
		defer close(exited)
		for line := range lines {
			mu.Lock()
			logged.WriteString(line + "\n")
			mu.Unlock()
			var entry struct {
				Msg, HTTP, XDS, Secure string
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "vmesh serving" {
				v.HTTPAddr, v.XDSAddr, v.SecureAddr = entry.HTTP, entry.XDS, entry.Secure
				close(serving)
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case <-serving:
		return v
	case <-exited:
		t.Fatalf("testenv: vmesh serve exited before serving:\n%s", printed())
	case <-time.After(2 * time.Minute):
		t.Fatalf("testenv: vmesh serve did not serve within 2 minutes:\n%s", printed())
	}
	return nil
}
