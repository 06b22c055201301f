package grpc_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/xds/grpc"
)

// grpcNodeDir returns tools/grpc-node with its npm packages installed, or
// reports them missing (a failure when CI=true).
func grpcNodeDir(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node (Debian's nodejs) for the grpc-node tests: %v", err)
	}
	dir = filepath.Join(testenv.RepoRoot(t), "tools", "grpc-node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@grpc", "grpc-js-xds", "package.json")); err != nil {
		testenv.Missing(t, "grpc-node packages (npm ci in tools/grpc-node): %v", err)
	}
	return node, dir
}

// grpcNodeBootstrap writes the bootstrap a grpc-node application needs for
// vmesh's plaintext xDS port and returns its path: grpc-js-xds requires
// node.locality (empty is fine) and accepts only the insecure and
// google_default channel credentials.
func grpcNodeBootstrap(t *testing.T, xdsAddr, id string, labels map[string]string) string {
	t.Helper()
	b, err := json.MarshalIndent(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      xdsAddr,
			"channel_creds":   []any{map[string]any{"type": "insecure"}},
			"server_features": []string{"xds_v3"},
		}},
		"node": map[string]any{
			"id":       id,
			"locality": map[string]any{},
			"metadata": map[string]any{"GENERATOR": "grpc", "NAMESPACE": "default", "LABELS": labels},
		},
		"server_listener_resource_name_template": grpc.InboundListenerPrefix + "%s",
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), id+"-bootstrap.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// nodeProc is a node process of tools/grpc-node whose stdout lines arrive
// on lines; its stderr is kept for failure messages.
type nodeProc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  *os.File
	lines  chan string
	exited chan struct{}
	mu     sync.Mutex
	stderr strings.Builder
}

func (p *nodeProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *nodeProc) errOutput() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stderr.String()
	if len(s) > 4000 {
		s = "..." + s[len(s)-4000:]
	}
	return s
}

// startNode runs `node script args...` in tools/grpc-node with bootstrap
// as GRPC_XDS_BOOTSTRAP (and env), until the test ends.
func startNode(t *testing.T, name, bootstrap, script string, env []string, args ...string) *nodeProc {
	t.Helper()
	node, dir := grpcNodeDir(t)
	cmd := exec.Command(node, append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+bootstrap), env...)
	p := &nodeProc{t: t, name: name, cmd: cmd, lines: make(chan string, 16), exited: make(chan struct{})}
	cmd.Stderr = p
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = r
	p.stdin = w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	r.Close()
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		w.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// next returns the process's next stdout line, failing the test when the
// process exits first or nothing comes within d.
func (p *nodeProc) next(d time.Duration) string {
	p.t.Helper()
	select {
	case l := <-p.lines:
		return l
	case <-p.exited:
		select {
		case l := <-p.lines:
			return l
		default:
		}
		p.t.Fatalf("%s exited (%v); stderr:\n%s", p.name, p.cmd.ProcessState, p.errOutput())
	case <-time.After(d):
		p.t.Fatalf("%s said nothing within %v; stderr:\n%s", p.name, d, p.errOutput())
	}
	return ""
}

// nodeServer is a grpc-node XdsServer (tools/grpc-node/server.js).
type nodeServer struct {
	*nodeProc
	id   string
	port int
}

// startNodeServer starts server.js as id on a loopback port and waits until
// it reports SERVING (vmesh accepted its inbound listener).
func startNodeServer(t *testing.T, xdsAddr, id string, labels map[string]string, env []string, mode ...string) *nodeServer {
	t.Helper()
	port := testenv.FreePort(t)
	boot := grpcNodeBootstrap(t, xdsAddr, id, labels)
	p := startNode(t, id, boot, "server.js", env, append([]string{id, fmt.Sprintf("127.0.0.1:%d", port)}, mode...)...)
	for deadline := time.Now().Add(30 * time.Second); ; {
		var st struct {
			Serving bool
			Details string
			Error   string
		}
		l := p.next(time.Until(deadline))
		if err := json.Unmarshal([]byte(l), &st); err != nil {
			t.Fatalf("%s: %q: %v", id, l, err)
		}
		if st.Error != "" {
			t.Fatalf("%s: %s; stderr:\n%s", id, st.Error, p.errOutput())
		}
		if st.Serving {
			return &nodeServer{nodeProc: p, id: id, port: port}
		}
		t.Logf("%s not serving yet: %s", id, st.Details)
	}
}

// nodeClient is a grpc-node xDS client (tools/grpc-node/client.js).
type nodeClient struct{ *nodeProc }

// call is one command of client.js: n calls of method (Call when empty)
// to target with metadata md, parallel at a time, the parallel ones
// starting staggerMs apart.
type call struct {
	Target     string            `json:"target"`
	N          int               `json:"n"`
	Method     string            `json:"method,omitempty"`
	MD         map[string]string `json:"md,omitempty"`
	Parallel   int               `json:"parallel,omitempty"`
	StaggerMs  int               `json:"staggerMs,omitempty"`
	DeadlineMs int               `json:"deadlineMs,omitempty"`
}

// run sends one command and returns the answers counted by server id or
// status code name.
func (c *nodeClient) run(cmd call) map[string]int {
	c.t.Helper()
	b, err := json.Marshal(cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		c.t.Fatalf("client: %v; stderr:\n%s", err, c.errOutput())
	}
	l := c.next(2 * time.Minute)
	var out struct {
		Counts map[string]int
		Error  string
	}
	if err := json.Unmarshal([]byte(l), &out); err != nil || out.Error != "" {
		c.t.Fatalf("client answered %q (%v)", l, err)
	}
	return out.Counts
}

// eventually polls cond every 50ms for up to 20s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// configDir writes files into the folder `vmesh serve` watches, each
// atomically (a rename); "" removes one.
type configDir struct {
	t   *testing.T
	dir string
}

func (d configDir) write(files map[string]string) {
	d.t.Helper()
	for name, content := range files {
		full := filepath.Join(d.dir, name)
		if content == "" {
			if err := os.Remove(full); err != nil {
				d.t.Fatal(err)
			}
			continue
		}
		tmp := filepath.Join(d.dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			d.t.Fatal(err)
		}
		if err := os.Rename(tmp, full); err != nil {
			d.t.Fatal(err)
		}
	}
}
