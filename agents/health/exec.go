package health

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ExecDisabledReason is what the control plane is told, as the workload's
// unhealthy reason, when the WorkloadGroup's probe is an exec probe and the
// VM's own configuration does not allow exec probes. The VM is then not
// ready (fail closed): the probe that would decide is not run.
const ExecDisabledReason = "exec probes are disabled on this VM: set --exec-probe-user on its agent (VMESH_AGENT_ARGS in /etc/default/vmesh-agent)"

// ErrExecDisabled is Check's error for an exec probe without an ExecUser;
// its message is ExecDisabledReason.
var ErrExecDisabled = errors.New(ExecDisabledReason)

// MaxExecOutput bounds how much of an exec probe's output (stdout and
// stderr together) is kept, for the agent's own log; the rest is dropped.
const MaxExecOutput = 1024

// execPath is the PATH exec probes run with, and where a command without
// a slash is looked up.
const execPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ExecUser is the local, unprivileged account exec probes run as. It comes
// from the VM's own configuration (`vmesh agent --exec-probe-user NAME`),
// never from the control plane; without one, exec probes are not run.
// Make it with LookupExecUser; one with UID or GID 0 never runs a probe.
type ExecUser struct {
	Name     string
	UID, GID uint32
	// Home is the account's home directory (HOME of the probe); "/" when
	// the account has none.
	Home string
}

// LookupExecUser resolves the account exec probes run as. It refuses an
// account that does not exist, root or any account with UID 0 or primary
// GID 0, and an agent that is not itself root: the probe's switch from
// UID 0 to the account's UID is what makes the kernel clear its
// capabilities (capabilities(7)); a non-root agent holding capabilities
// would hand its ambient ones to the probe.
func LookupExecUser(name string) (*ExecUser, error) {
	if name == "" {
		return nil, errors.New("health: exec probe user: empty name")
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("health: exec probe user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("health: exec probe user %q: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("health: exec probe user %q: gid %q: %w", name, u.Gid, err)
	}
	if name == "root" || uid == 0 {
		return nil, fmt.Errorf("health: exec probe user %q has UID 0: exec probes must run as an unprivileged user", name)
	}
	if gid == 0 {
		return nil, fmt.Errorf("health: exec probe user %q has primary group 0 (root): exec probes must run as an unprivileged user", name)
	}
	if euid := os.Geteuid(); euid != 0 {
		return nil, fmt.Errorf("health: exec probe user %q: the agent runs as UID %d, not root: only a switch from UID 0 clears the probe's capabilities", name, euid)
	}
	home := u.HomeDir
	if home == "" {
		home = "/"
	}
	return &ExecUser{Name: name, UID: uint32(uid), GID: uint32(gid), Home: home}, nil
}

// env is the whole environment of a probe: nothing of the agent's.
func (u *ExecUser) env() []string {
	return []string{"PATH=" + execPath, "HOME=" + u.Home, "USER=" + u.Name, "LOGNAME=" + u.Name, "LANG=C.UTF-8"}
}

// ExecError is an exec probe's failure. Error returns Reason alone (the
// exit status, the signal, "timed out after 1s", or why the command could
// not start), which is what the control plane is told; Output, the first
// MaxExecOutput bytes the command wrote, is for the agent's own log only.
type ExecError struct {
	Reason string
	Output []byte
}

func (e *ExecError) Error() string { return "exec probe: " + e.Reason }

// runExec runs an exec probe as u, in its own process group, with a
// minimal environment, "/" as working directory and no supplementary
// groups; ctx's end (its deadline is the probe's timeout) kills the whole
// group.
func runExec(ctx context.Context, e *Exec, u *ExecUser, timeout time.Duration) error {
	if u == nil {
		return ErrExecDisabled
	}
	if u.UID == 0 || u.GID == 0 {
		// Not made by LookupExecUser: never run a probe as root.
		return &ExecError{Reason: "not run: its user " + strconv.Quote(u.Name) + " has UID or GID 0"}
	}
	path, err := lookPath(e.Command[0])
	if err != nil {
		return &ExecError{Reason: "could not start: " + err.Error()}
	}
	cmd := exec.CommandContext(ctx, path)
	cmd.Args = slices.Clone(e.Command)
	cmd.Env = u.env()
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// Groups empty (not nil) clears the supplementary groups; the
		// change from UID 0 clears the permitted, effective and ambient
		// capabilities.
		Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}},
	}
	out := &boundedBuffer{max: MaxExecOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	runErr := cmd.Run()
	if cmd.Process != nil {
		// What the command left behind in its group (a background child)
		// goes too; the group's ID stays allocated while it has members.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if runErr == nil || (errors.Is(runErr, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success()) {
		return nil
	}
	fail := &ExecError{Output: out.bytes()}
	var ee *exec.ExitError
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		fail.Reason = "timed out after " + timeout.String()
	case ctx.Err() != nil:
		fail.Reason = "canceled"
	case errors.As(runErr, &ee):
		fail.Reason = ee.ProcessState.String() // "exit status 3", "signal: killed"
	case cmd.ProcessState == nil:
		fail.Reason = "could not start: " + runErr.Error()
	default:
		fail.Reason = cmd.ProcessState.String()
	}
	return fail
}

// lookPath finds a command without a slash in execPath, as the probe's
// own PATH would, not the agent's.
func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(execPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in %s", name, execPath)
}

// boundedBuffer keeps the first max bytes written to it and drops the
// rest, never failing a write (the command is not stopped by it).
type boundedBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *boundedBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.buf)
}
