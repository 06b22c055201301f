package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// zooKeeperJars lists where Debian's zookeeper package puts the server jar.
// Its manifest Class-Path names every dependency.
var zooKeeperJars = []string{"/usr/share/java/zookeeper.jar", "/usr/share/zookeeper/zookeeper.jar"}

// ZooKeeper is a standalone ZooKeeper server (Debian's zookeeperd jars,
// org.apache.zookeeper.server.ZooKeeperServerMain) on a loopback port.
type ZooKeeper struct {
	// Addr is host:port of the client port, e.g. 127.0.0.1:40123.
	Addr string
	// TickTime is the server tick; sessions expire after at least 2 ticks.
	TickTime time.Duration

	t       testing.TB
	java    string
	jar     string
	dir     string
	port    int
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	started int
}

// StartZooKeeper starts a ZooKeeper server with its data in t.TempDir() and
// stops it when the test ends. Sessions may be as short as 400ms (tickTime
// 200ms), so tests can expire them quickly.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		Missing(t, "java not found (Debian package zookeeperd)")
	}
	var jar string
	for _, j := range zooKeeperJars {
		if _, err := os.Stat(j); err == nil {
			jar = j
			break
		}
	}
	if jar == "" {
		Missing(t, "ZooKeeper jar not found in %v (Debian package zookeeperd)", zooKeeperJars)
	}
	z := &ZooKeeper{t: t, java: java, jar: jar, dir: t.TempDir(), port: FreePort(t), TickTime: 200 * time.Millisecond}
	z.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(z.port))
	z.Start()
	t.Cleanup(z.Stop)
	return z
}

// Start starts the server again on the same port and data directory after
// Stop (a restart keeps the data and sessions, as a real restart does). It
// waits until the server answers.
func (z *ZooKeeper) Start() {
	z.t.Helper()
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cmd != nil {
		return
	}
	z.started++
	data := filepath.Join(z.dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		z.t.Fatalf("testenv: zookeeper data dir: %v", err)
	}
	cfg := fmt.Sprintf(`tickTime=%d
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
maxClientCnxns=0
minSessionTimeout=%d
admin.enableServer=false
4lw.commands.whitelist=ruok,stat,srvr,mntr
`, z.TickTime.Milliseconds(), data, z.port, 2*z.TickTime.Milliseconds())
	cfgFile := filepath.Join(z.dir, "zoo.cfg")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		z.t.Fatalf("testenv: zookeeper config: %v", err)
	}
	logFile, err := os.Create(filepath.Join(z.dir, fmt.Sprintf("zookeeper-%d.log", z.started)))
	if err != nil {
		z.t.Fatalf("testenv: zookeeper log: %v", err)
	}
	cmd := exec.Command(z.java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.log.dir="+z.dir, "-Dzookeeper.admin.enableServer=false",
		"-cp", z.jar, "org.apache.zookeeper.server.ZooKeeperServerMain", cfgFile)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		z.t.Fatalf("testenv: start zookeeper: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	z.cmd, z.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for {
		if z.ruok() {
			return
		}
		select {
		case <-done:
			z.cmd = nil
			out, _ := os.ReadFile(logFile.Name())
			z.t.Fatalf("testenv: zookeeper exited during start:\n%s", tail(out, 4000))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			z.stopLocked()
			out, _ := os.ReadFile(logFile.Name())
			z.t.Fatalf("testenv: zookeeper did not answer within 60s:\n%s", tail(out, 4000))
		}
	}
}

// ruok sends ZooKeeper's "ruok" four-letter word and expects "imok".
func (z *ZooKeeper) ruok() bool {
	c, err := net.DialTimeout("tcp", z.Addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ruok")); err != nil {
		return false
	}
	buf := make([]byte, 4)
	n, _ := c.Read(buf)
	return string(buf[:n]) == "imok"
}

// Stop kills the server (as a crash or a machine loss would) and waits for
// it to exit. Start brings it back.
func (z *ZooKeeper) Stop() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.stopLocked()
}

func (z *ZooKeeper) stopLocked() {
	if z.cmd == nil {
		return
	}
	_ = syscall.Kill(-z.cmd.Process.Pid, syscall.SIGKILL)
	<-z.done
	z.cmd = nil
}

// Restart stops and starts the server on the same port.
func (z *ZooKeeper) Restart() {
	z.t.Helper()
	z.Stop()
	z.Start()
}

func tail(b []byte, n int) []byte {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
