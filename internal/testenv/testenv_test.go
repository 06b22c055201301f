package testenv_test

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/testenv"
)

func TestRepoRoot(t *testing.T) {
	root := testenv.RepoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "filestore")); err != nil {
		t.Fatalf("RepoRoot() = %s, which has no filestore/: %v", root, err)
	}
}

func TestZooKeeperRestartKeepsPort(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	dial := func() error {
		c, err := net.DialTimeout("tcp", z.Addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(); err != nil {
		t.Fatalf("dial running server: %v", err)
	}
	z.Stop()
	if err := dial(); err == nil {
		t.Fatal("stopped server still accepts connections")
	}
	z.Start()
	if err := dial(); err != nil {
		t.Fatalf("dial restarted server on the same address %s: %v", z.Addr, err)
	}
}

func TestProxyCut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); buf := make([]byte, 16); n, _ := c.Read(buf); c.Write(buf[:n]) }()
		}
	}()
	p := testenv.StartProxy(t, ln.Addr().String())
	echo := func() string {
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err != nil {
			return ""
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte("ping"))
		buf := make([]byte, 16)
		n, _ := c.Read(buf)
		return string(buf[:n])
	}
	if got := echo(); got != "ping" {
		t.Fatalf("through proxy got %q, want ping", got)
	}
	p.Cut()
	if got := echo(); got != "" {
		t.Fatalf("cut proxy forwarded %q", got)
	}
	p.Restore()
	if got := echo(); got != "ping" {
		t.Fatalf("restored proxy got %q, want ping", got)
	}
}

func TestConsulRestartKeepsServices(t *testing.T) {
	c := testenv.StartConsul(t)
	services := func() string {
		resp, err := http.Get("http://" + c.HTTPAddr + "/v1/catalog/service/echo")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	req, _ := http.NewRequest(http.MethodPut, "http://"+c.HTTPAddr+"/v1/agent/service/register", strings.NewReader(`{"ID":"echo-1","Name":"echo","Port":1234}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !strings.Contains(services(), `"echo-1"`) {
		t.Fatal("registered service not in the catalogue")
	}
	c.Stop()
	if got := services(); got != "" {
		t.Fatalf("stopped agent still answers: %s", got)
	}
	c.Start()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(services(), `"echo-1"`) {
		if time.Now().After(deadline) {
			t.Fatalf("restarted agent on %s does not list the service it kept: %s", c.HTTPAddr, services())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
