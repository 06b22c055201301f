// Package testenv starts the real components vmesh's integration tests run
// against (ZooKeeper, a Consul dev agent) on free loopback ports, and finds
// the repository root. It is imported by tests only.
//
// A missing component skips the test, unless the environment variable CI is
// "true": then it fails it, so CI never passes by skipping.
package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot returns the root of the vmesh repository: the nearest directory
// above the working directory holding the go.mod of module
// github.com/vmesh/vmesh.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := findRepoRoot()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return root
}

func findRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && isVmeshModule(data) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of module github.com/vmesh/vmesh above the working directory")
		}
		dir = parent
	}
}

func isVmeshModule(gomod []byte) bool {
	const want = "module github.com/vmesh/vmesh\n"
	return len(gomod) >= len(want) && string(gomod[:len(want)]) == want
}

// Missing reports a component that is not installed: a skip on a
// developer's machine, a failure when CI is "true".
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + " (install with: make test-deps)"
	if os.Getenv("CI") == "true" {
		t.Fatal("testenv: CI=true and " + msg)
	}
	t.Skip("testenv: " + msg)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// freeUDPAndTCPPort returns a port free for both TCP and UDP on 127.0.0.1
// (Consul's DNS and serf ports use both).
func freeUDPAndTCPPort(t testing.TB) int {
	t.Helper()
	for range 50 {
		p := FreePort(t)
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		u.Close()
		return p
	}
	t.Fatal("testenv: no port free for both TCP and UDP")
	return 0
}
