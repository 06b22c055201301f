package health_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/vmesh/vmesh/agents/health"
	"github.com/vmesh/vmesh/agents/xdsproxy"
	"github.com/vmesh/vmesh/internal/testenv"
)

// probeUser is the account exec probes run as in these tests: nobody, as
// root (CI runs the tests as root, with every capability).
func probeUser(t *testing.T) *health.ExecUser {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (exec probes switch to another user)")
	}
	u, err := health.LookupExecUser("nobody")
	if err != nil {
		t.Fatalf("LookupExecUser(nobody): %v", err)
	}
	if u.UID == 0 || u.GID == 0 {
		t.Fatalf("nobody is %d:%d", u.UID, u.GID)
	}
	return u
}

// probeDir returns a directory the probe user can enter, and probeFile a
// file in it the probe user can write (t.TempDir's parents are 0700).
func probeDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vmesh-execprobe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func probeFile(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

// statusFields parses "Key:\tvalue" lines of /proc/PID/status.
func statusFields(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// TestExecProbe: an allowed exec probe passes when its command exits 0 and
// fails otherwise, with the exit status as the only reason.
func TestExecProbe(t *testing.T) {
	opts := health.CheckOptions{ExecUser: probeUser(t)}
	dir := probeDir(t)
	flag := filepath.Join(dir, "ready")
	p := health.Probe{Exec: &health.Exec{Command: []string{"/bin/sh", "-c", "test -f " + flag}}}
	err := p.Check(context.Background(), opts)
	if err == nil {
		t.Fatal("failing command counted as ready")
	}
	if err.Error() != "exec probe: exit status 1" {
		t.Fatalf("reason %q, want %q", err, "exec probe: exit status 1")
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(context.Background(), opts); err != nil {
		t.Fatalf("succeeding command: %v", err)
	}
	// A command without a slash is found in the probe's own PATH.
	if err := (health.Probe{Exec: &health.Exec{Command: []string{"true"}}}).Check(context.Background(), opts); err != nil {
		t.Fatalf("true: %v", err)
	}
}

// TestExecProbeRunsUnprivileged: a WorkloadGroup's exec probe, run by an
// agent that is root with capabilities, runs as the configured user: no
// UID or GID 0, no supplementary groups, empty effective, permitted and
// ambient capability sets, none of the agent's environment, in "/".
func TestExecProbeRunsUnprivileged(t *testing.T) {
	u := probeUser(t)
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if eff := statusFields(string(self))["CapEff"]; eff == "" || strings.Trim(eff, "0") == "" {
		t.Fatalf("the test process has no capabilities (CapEff %q): the test would prove nothing", eff)
	}
	t.Setenv("VMESH_AGENT_SECRET", "agent-secret-in-env")
	dir := probeDir(t)
	status, env := probeFile(t, dir, "status"), probeFile(t, dir, "env")
	p := health.Probe{Exec: &health.Exec{Command: []string{"sh", "-c",
		`grep -E "^(Uid|Gid|Groups|Cap(Inh|Eff|Prm|Amb)):" /proc/self/status > ` + status + `; { env; echo "cwd=$(pwd)"; } > ` + env}}}
	if err := p.Check(context.Background(), health.CheckOptions{ExecUser: u}); err != nil {
		t.Fatalf("probe: %v", err)
	}
	got, err := os.ReadFile(status)
	if err != nil {
		t.Fatal(err)
	}
	f := statusFields(string(got))
	t.Logf("probe's /proc/self/status:\n%s", got)
	for _, k := range []string{"Uid", "Gid"} {
		ids := strings.Fields(f[k])
		if len(ids) != 4 {
			t.Fatalf("%s: %q (the probe did not run?)", k, f[k])
		}
		want := strconv.Itoa(int(u.UID))
		if k == "Gid" {
			want = strconv.Itoa(int(u.GID))
		}
		for _, id := range ids { // real, effective, saved, filesystem
			if id == "0" || id != want {
				t.Errorf("%s: %q, want all %s", k, f[k], want)
			}
		}
	}
	if f["Groups"] != "" {
		t.Errorf("supplementary groups %q, want none", f["Groups"])
	}
	for _, k := range []string{"CapEff", "CapPrm", "CapAmb"} {
		if v, ok := f[k]; !ok || strings.Trim(v, "0") != "" {
			t.Errorf("%s = %q, want all zero", k, v)
		}
	}
	e, err := os.ReadFile(env)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(e), "agent-secret-in-env") {
		t.Errorf("the probe inherited the agent's environment:\n%s", e)
	}
	if !strings.Contains(string(e), "cwd=/\n") || !strings.Contains(string(e), "USER=nobody\n") {
		t.Errorf("probe environment:\n%s\nwant cwd=/ and USER=nobody", e)
	}
}

// TestExecProbeDisabledNeverRuns: without an exec probe user in the VM's
// own configuration, a WorkloadGroup's exec probe is not run (the file it
// would create never appears) and the workload is reported not ready with
// the stable reason, at once, even after it was ready on another probe.
func TestExecProbeDisabledNeverRuns(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	exe := &health.Probe{Exec: &health.Exec{Command: []string{"/bin/sh", "-c", "touch " + marker}}, Period: 20 * time.Millisecond, FailureThreshold: 5}
	if err := exe.Check(context.Background(), health.CheckOptions{}); !errors.Is(err, health.ErrExecDisabled) || err.Error() != health.ExecDisabledReason {
		t.Fatalf("Check without an exec user: %v, want %q", err, health.ExecDisabledReason)
	}

	a := newApp(t)
	a.ready.Store(true)
	pr, reports := runProber(t, &health.Probe{HTTP: &health.HTTPGet{Port: a.port(t), Path: "/ready"}, Period: 20 * time.Millisecond})
	if s := nextReport(t, reports); !s.Healthy {
		t.Fatalf("http probe: %+v", s)
	}
	if err := pr.SetProbe(exe); err != nil {
		t.Fatal(err)
	}
	// FailureThreshold 5 at 20 ms: a flaky probe would take 80 ms; the
	// VM's configuration is said on the first check.
	if s := nextReport(t, reports); s.Healthy || s.Message != health.ExecDisabledReason {
		t.Fatalf("exec probe without an exec user: %+v, want unhealthy with %q", s, health.ExecDisabledReason)
	}
	// Several periods later it has still not run, and nothing changed.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the disabled exec probe ran (%s: %v)", marker, err)
		}
		select {
		case s := <-reports:
			t.Fatalf("report without a change: %+v", s)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestExecProbeOutputNeverReported: what a failing exec probe prints (a
// secret it read) never reaches the control plane: the report carries the
// exit status only, and the health request the agent sends holds no byte
// of the output. The agent's own log keeps a bounded excerpt.
func TestExecProbeOutputNeverReported(t *testing.T) {
	u := probeUser(t)
	const secret = "SECRET-7f3a-do-not-leak"
	var logs bytes.Buffer
	reports := make(chan health.Status, 16)
	p := &health.Probe{Exec: &health.Exec{Command: []string{"sh", "-c",
		"echo " + secret + "; echo " + secret + " >&2; head -c 100000 /dev/zero | tr '\\0' x; exit 3"}}, Period: 20 * time.Millisecond}
	pr, err := health.NewProber(p, "127.0.0.1", health.ReporterFunc(func(_ context.Context, s health.Status) error {
		reports <- s
		return nil
	}), slog.New(slog.NewJSONHandler(&logs, nil)), nil, health.WithExecUser(u))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	s := nextReport(t, reports)
	cancel()
	<-done
	if s.Healthy || s.Message != "exec probe: exit status 3" {
		t.Fatalf("report %+v, want unhealthy with %q", s, "exec probe: exit status 3")
	}
	for name, m := range map[string]proto.Message{"sotw": xdsproxy.HealthRequest(s), "delta": xdsproxy.DeltaHealthRequest(s)} {
		wire, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(wire, []byte(secret)) || bytes.Contains(wire, []byte("xxxx")) {
			t.Errorf("the %s health request carries the probe's output: %q", name, wire)
		}
	}
	if l := pr.Last(); l == nil || strings.Contains(l.Message, secret) {
		t.Errorf("Last = %+v", l)
	}
	local := logs.String()
	if !strings.Contains(local, secret) {
		t.Errorf("the agent's log lacks the probe's output (the operator's only view of it):\n%s", local)
	}
	if n := len(local); n > health.MaxExecOutput+4096 {
		t.Errorf("the agent's log holds %d bytes for one probe failure: the output is not bounded", n)
	}
}

// TestExecProbeTimeoutKillsProcessGroup: a probe past its timeout is
// killed with everything it started (its process group), and the reason is
// "timed out", not its output.
func TestExecProbeTimeoutKillsProcessGroup(t *testing.T) {
	u := probeUser(t)
	dir := probeDir(t)
	pidFile := probeFile(t, dir, "pid")
	p := health.Probe{Exec: &health.Exec{Command: []string{"sh", "-c", "sleep 60 & echo $! > " + pidFile + "; echo waiting; wait"}}, Timeout: 300 * time.Millisecond}
	start := time.Now()
	err := p.Check(context.Background(), health.CheckOptions{ExecUser: u})
	if err == nil || err.Error() != "exec probe: timed out after 300ms" {
		t.Fatalf("Check = %v, want exec probe: timed out after 300ms", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Check took %s: the timeout did not stop the command", d)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("pid file %q: %v", data, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the probe's child %d outlived its timeout", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie waiting for its reaper does not).
func alive(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(st)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestExecProbeUserRefused: the account exec probes run as must exist and
// be unprivileged: root, an unknown user and an empty name are refused.
func TestExecProbeUserRefused(t *testing.T) {
	for _, name := range []string{"root", "", "vmesh-no-such-user"} {
		if u, err := health.LookupExecUser(name); err == nil {
			t.Errorf("LookupExecUser(%q) = %+v, want refused", name, u)
		}
	}
	marker := filepath.Join(t.TempDir(), "ran")
	for _, u := range []*health.ExecUser{{Name: "root"}, {Name: "wheel", UID: 1000}, {Name: "toor", GID: 1000}} {
		p := health.Probe{Exec: &health.Exec{Command: []string{"/bin/sh", "-c", "touch " + marker}}}
		if err := p.Check(context.Background(), health.CheckOptions{ExecUser: u}); err == nil {
			t.Errorf("exec probe ran as %+v", u)
		}
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("an exec probe ran with UID or GID 0 (%+v)", u)
		}
	}
	if os.Geteuid() != 0 {
		if _, err := health.LookupExecUser("nobody"); err == nil {
			t.Error("a non-root agent may run exec probes as another user: its ambient capabilities would follow")
		}
	}
}

// TestExecProbeUnderAgentUnitCapabilities runs the exec probe tests again
// in a process holding only what the packaged unit (vmesh-agent.service)
// gives the agent: its CapabilityBoundingSet as bounding, inheritable and
// ambient sets, and NoNewPrivileges. The probe must still switch user,
// lose every capability, and be killed with its process group on timeout
// (signals to another UID need CAP_KILL).
func TestExecProbeUnderAgentUnitCapabilities(t *testing.T) {
	probeUser(t)
	if os.Getenv("VMESH_EXECPROBE_UNDER_UNIT") != "" {
		t.Skip("already under the unit's capabilities")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Missing(t, "setpriv (util-linux)")
	}
	unit, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "tools/package/debian/vmesh-agent/vmesh-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	var caps []string
	for _, line := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
			for _, c := range strings.Fields(v) {
				caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
		}
	}
	if len(caps) == 0 {
		t.Fatal("the unit has no CapabilityBoundingSet")
	}
	set := "-all," + strings.Join(caps, ",")
	cmd := exec.Command(setpriv, "--bounding-set="+set, "--inh-caps="+set, "--ambient-caps="+set, "--no-new-privs", "--",
		os.Args[0], "-test.run=^(TestExecProbe|TestExecProbeRunsUnprivileged|TestExecProbeTimeoutKillsProcessGroup|TestExecProbeOutputNeverReported)$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "VMESH_EXECPROBE_UNDER_UNIT=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("exec probe tests with the unit's capabilities (%s): %v\n%s", set, err, out)
	}
	for _, name := range []string{"TestExecProbe", "TestExecProbeRunsUnprivileged", "TestExecProbeTimeoutKillsProcessGroup", "TestExecProbeOutputNeverReported"} {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass with the unit's capabilities:\n%s", name, out)
		}
	}
}
