package testenv

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// NotifySocket stands in for systemd's notification socket: it listens on a
// real unixgram socket, points $NOTIFY_SOCKET at it for the test (so the
// test must not be parallel), and returns the socket's datagrams.
func NotifySocket(t testing.TB) *Notifications {
	t.Helper()
	// A short path: a Unix socket's name is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "sdnotify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &Notifications{c: make(chan string, 16)}
	go func() {
		defer close(n.c)
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.c <- string(buf[:k])
		}
	}()
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return n
}

// Notifications are the datagrams a NotifySocket received, in order.
type Notifications struct{ c chan string }

// Next returns the next datagram, failing the test after timeout.
func (n *Notifications) Next(t testing.TB, timeout time.Duration) string {
	t.Helper()
	select {
	case m, ok := <-n.c:
		if !ok {
			t.Fatal("notify socket closed")
		}
		return m
	case <-time.After(timeout):
		t.Fatalf("no sd_notify message within %s", timeout)
		return ""
	}
}
