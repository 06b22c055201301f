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
	"io"
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

// freePorts returns n distinct ports free on 127.0.0.1 for TCP, the
// first udp of them for UDP too (Consul's DNS and serf ports use both).
// Every port is held until all are chosen, so the kernel cannot hand one
// out twice (picked one at a time, two of a Consul agent's ports could be
// the same: "HTTP address 127.0.0.1:44253 already configured for DNS").
func freePorts(t testing.TB, n, udp int) []int {
	t.Helper()
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 50*n {
			t.Fatalf("testenv: found %d of %d free ports", len(out), n)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testenv: free port: %v", err)
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if len(out) < udp {
			u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				continue
			}
			held = append(held, u)
		}
		out = append(out, p)
	}
	return out
}
