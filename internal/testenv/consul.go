package testenv

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Consul is a Consul dev agent (`consul agent -dev`) on loopback ports.
type Consul struct {
	// HTTPAddr is host:port of the HTTP API, e.g. 127.0.0.1:40123.
	HTTPAddr string
	// Datacenter is the agent's datacenter.
	Datacenter string
	// GRPCPort and DNSPort are the agent's other client ports.
	GRPCPort, DNSPort int

	t       testing.TB
	bin     string
	args    []string
	logPath string
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	// token is the management token of an agent with ACLs ("" without).
	token string
}

// ConsulBinary returns the consul binary tests use: <repo>/.bin/consul
// (built by `make test-deps`), else `consul` on PATH, else "".
func ConsulBinary(t testing.TB) string {
	t.Helper()
	if root, err := findRepoRoot(); err == nil {
		p := filepath.Join(root, ".bin", "consul")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p
	}
	return ""
}

// StartConsul starts `consul agent -dev` bound to 127.0.0.1 with every port
// (HTTP, DNS, serf LAN/WAN, server RPC, gRPC) free, waits until it has a
// leader, and stops it when the test ends.
func StartConsul(t testing.TB) *Consul {
	t.Helper()
	return startConsul(t, "", "")
}

// StartConsulACL starts a dev agent with ACLs enabled, default policy
// deny, and management token token.
func StartConsulACL(t testing.TB, token string) *Consul {
	t.Helper()
	return startConsul(t, fmt.Sprintf(`acl { enabled = true default_policy = "deny" tokens { initial_management = %q agent = %q } }`, token, token), token)
}

func startConsul(t testing.TB, extraHCL, token string) *Consul {
	t.Helper()
	bin := ConsulBinary(t)
	if bin == "" {
		Missing(t, "consul binary not found in .bin/consul or PATH")
	}
	dir := t.TempDir()
	// The ports are found free, then released for the agent to bind: another
	// process may take one in between. An agent that cannot bind is started
	// again on other ports.
	for attempt := 1; ; attempt++ {
		c := consulOn(t, bin, dir, freePorts(t, 6, 3), extraHCL)
		c.token = token
		err := c.start()
		if err == nil {
			t.Cleanup(c.shutdown)
			return c
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			t.Fatal(err)
		}
		t.Logf("testenv: %v; starting consul again on other ports", err)
	}
}

// errPortTaken is start's error when a port was taken before the agent
// bound it.
var errPortTaken = errors.New("a port was taken before consul bound it")

// consulOn is an agent (not started) on ports: DNS, serf LAN, serf WAN (TCP
// and UDP), then HTTP, gRPC, server RPC.
func consulOn(t testing.TB, bin, dir string, ports []int, extraHCL string) *Consul {
	c := &Consul{Datacenter: "dc1", GRPCPort: ports[4], DNSPort: ports[0]}
	httpPort := ports[3]
	c.HTTPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))
	// ports{} in HCL covers the ports without a flag (gRPC TLS, HTTPS) and
	// switches off the sidecar/expose ranges, which only allocate on use.
	const hcl = `ports { grpc_tls = -1 https = -1 }`
	args := []string{"agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-advertise", "127.0.0.1", "-datacenter", c.Datacenter, "-node", "vmesh-test",
		"-http-port", strconv.Itoa(httpPort), "-dns-port", strconv.Itoa(c.DNSPort),
		"-serf-lan-port", strconv.Itoa(ports[1]),
		"-serf-wan-port", strconv.Itoa(ports[2]),
		"-server-port", strconv.Itoa(ports[5]),
		"-grpc-port", strconv.Itoa(c.GRPCPort),
		"-hcl", hcl, "-log-level", "warn"}
	if extraHCL != "" {
		args = append(args, "-hcl", extraHCL)
	}
	// The agent keeps the services registered through its API in its data
	// directory and registers them again when it starts (Start after Stop),
	// as a real agent does; the dev server's catalogue itself is in memory.
	args = append(args, "-data-dir", filepath.Join(dir, "data"))
	c.t, c.bin, c.args, c.logPath = t, bin, args, filepath.Join(dir, "consul.log")
	return c
}

// Start starts the agent again on the same ports and data directory after
// Stop, and waits until it has a leader.
func (c *Consul) Start() {
	c.t.Helper()
	if err := c.start(); err != nil {
		c.t.Fatal(err)
	}
}

// start starts the agent and waits until it has a leader.
func (c *Consul) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return nil
	}
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testenv: consul log: %w", err)
	}
	cmd := exec.Command(c.bin, c.args...)
	cmd.Dir = filepath.Dir(c.logPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("testenv: start consul: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	c.cmd, c.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if resp, err := client.Get("http://" + c.HTTPAddr + "/v1/status/leader"); err == nil {
			var buf [64]byte
			n, _ := resp.Body.Read(buf[:])
			resp.Body.Close()
			// A leader, and this agent's node in the catalogue: sessions
			// (locks, shared state) refuse a node not registered yet
			// ("Missing node registration").
			if resp.StatusCode == http.StatusOK && n > 2 && c.nodeRegistered(client) { // a quoted, non-empty address
				return nil
			}
		}
		select {
		case <-done:
			c.cmd = nil
			out, _ := os.ReadFile(c.logPath)
			if strings.Contains(string(out), "address already in use") {
				// The log is appended to across starts: start the next
				// attempt's afresh.
				_ = os.Remove(c.logPath)
				return fmt.Errorf("testenv: consul exited during start: %w:\n%s", errPortTaken, tail(out, 1000))
			}
			return fmt.Errorf("testenv: consul exited during start:\n%s", tail(out, 4000))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stopLocked(syscall.SIGKILL)
			out, _ := os.ReadFile(c.logPath)
			return fmt.Errorf("testenv: consul had no leader within 60s:\n%s", tail(out, 4000))
		}
	}
}

// nodeRegistered reports whether the agent's node is in the catalogue.
func (c *Consul) nodeRegistered(client *http.Client) bool {
	req, err := http.NewRequest(http.MethodGet, "http://"+c.HTTPAddr+"/v1/catalog/node/vmesh-test", nil)
	if err != nil {
		return false
	}
	if c.token != "" {
		req.Header.Set("X-Consul-Token", c.token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var buf [16]byte
	n, _ := io.ReadFull(resp.Body, buf[:])
	return resp.StatusCode == http.StatusOK && n > 0 && !strings.HasPrefix(string(buf[:n]), "null")
}

// Stop kills the agent (as a crash or a machine loss would) and waits for
// it to exit. Start brings it back.
func (c *Consul) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked(syscall.SIGKILL)
}

// shutdown stops the agent gracefully at the end of the test.
func (c *Consul) shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked(syscall.SIGTERM)
}

func (c *Consul) stopLocked(sig syscall.Signal) {
	if c.cmd == nil {
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
	c.cmd = nil
}
