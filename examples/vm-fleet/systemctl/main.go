// Command systemctl is the vm-fleet guide test's one substitution
// (docs/vm-fleet.md, vmfleet_test.go): a minimal stand-in for systemd's
// systemctl on hosts where systemd is not PID 1 (CI, containers, the
// network-namespace hosts of the test). The test puts it first on each
// host's PATH, so the guide's `systemctl enable --now vmesh` runs the
// installed unit file's own ExecStart= line.
//
// What it does with a unit (/etc/systemd/system, /usr/lib/systemd/system or
// /lib/systemd/system): enable links it into multi-user.target.wants; start
// checks ConditionPathExists=, makes StateDirectory= and RuntimeDirectory=,
// reads Environment= and EnvironmentFile= (a leading "-" makes the file
// optional), expands $VAR (split into words) and ${VAR} in ExecStart=, and
// runs it in the background in its own session, as User=/Group= when set,
// with stdout and stderr in /run/systemctl/UNIT.log and its pid in
// /run/systemctl/UNIT.pid. For Type=notify it provides NOTIFY_SOCKET and
// returns once the service sent READY=1 (failing, with the log's tail,
// when the service exits first or within 2 minutes sends nothing). stop
// sends SIGTERM and waits (SIGKILL after 30 s). Everything else systemd does
// (sandboxing, restarts, dependencies, cgroups) is not done.
//
// Commands: daemon-reload, enable [--now], preset (as enable: what
// deb-systemd-helper runs at a first install), disable [--now], start,
// stop, restart, try-restart, is-active, is-enabled, status. Flags
// --system, --global, --root=/, --preset-mode=, --quiet/-q and --no-block
// are accepted and ignored.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stateDir holds each started unit's pid file, log and notify socket.
const stateDir = "/run/systemctl"

var unitDirs = []string{"/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "systemctl (vm-fleet stand-in):", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var verb string
	var units []string
	now := false
	for _, a := range args {
		switch {
		case a == "--now":
			now = true
		case a == "--system" || a == "--global" || a == "--quiet" || a == "-q" || a == "--no-block" ||
			a == "--root=/" || strings.HasPrefix(a, "--preset-mode="):
		case strings.HasPrefix(a, "-"):
			return fmt.Errorf("unsupported flag %s", a)
		case verb == "":
			verb = a
		default:
			if !strings.Contains(a, ".") {
				a += ".service"
			}
			units = append(units, a)
		}
	}
	if verb == "daemon-reload" {
		return nil
	}
	if verb == "" || len(units) == 0 {
		return errors.New("usage: systemctl enable|disable [--now] | preset|start|stop|restart|try-restart|is-active|is-enabled|status UNIT [UNIT]")
	}
	for _, u := range units {
		var err error
		switch verb {
		case "enable", "preset":
			// Debian's preset policy for services is enable.
			err = enable(u)
			if err == nil && now {
				err = start(u)
			}
		case "disable":
			err = os.Remove(wantsLink(u))
			if errors.Is(err, os.ErrNotExist) {
				err = nil
			}
			if err == nil && now {
				err = stop(u)
			}
		case "start":
			err = start(u)
		case "stop":
			err = stop(u)
		case "restart":
			if err = stop(u); err == nil {
				err = start(u)
			}
		case "try-restart":
			if _, ok := running(u); ok {
				if err = stop(u); err == nil {
					err = start(u)
				}
			}
		case "is-active":
			if _, ok := running(u); !ok {
				fmt.Println("inactive")
				os.Exit(3)
			}
			fmt.Println("active")
		case "is-enabled":
			if _, err := os.Lstat(wantsLink(u)); err != nil {
				fmt.Println("disabled")
				os.Exit(1)
			}
			fmt.Println("enabled")
		case "status":
			err = status(u)
		default:
			err = fmt.Errorf("unsupported command %s", verb)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", verb, u, err)
		}
	}
	return nil
}

// unit is the part of a unit file the stand-in uses.
type unit struct {
	name, path string
	conditions []string
	service    map[string][]string // [Service] key -> values, in order
}

func (u *unit) last(key string) string {
	v := u.service[key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func findUnit(name string) (string, error) {
	for _, d := range unitDirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("unit %s not found in %s", name, strings.Join(unitDirs, ", "))
}

func load(name string) (*unit, error) {
	path, err := findUnit(name)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	u := &unit{name: name, path: path, service: map[string][]string{}}
	section := ""
	// Continuation lines (trailing backslash) are joined.
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			section = strings.Trim(line, "[]")
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch section {
		case "Unit":
			if k == "ConditionPathExists" {
				u.conditions = append(u.conditions, v)
			}
		case "Service":
			u.service[k] = append(u.service[k], v)
		}
	}
	if u.last("ExecStart") == "" {
		return nil, fmt.Errorf("%s has no ExecStart=", path)
	}
	return u, nil
}

func wantsLink(name string) string {
	return filepath.Join("/etc/systemd/system/multi-user.target.wants", name)
}

func enable(name string) error {
	path, err := findUnit(name)
	if err != nil {
		return err
	}
	link := wantsLink(name)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	if _, err := os.Lstat(link); err == nil {
		return nil
	}
	return os.Symlink(path, link)
}

func pidFile(name string) string { return filepath.Join(stateDir, name+".pid") }
func logFile(name string) string { return filepath.Join(stateDir, name+".log") }

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

func running(name string) (int, bool) {
	b, err := os.ReadFile(pidFile(name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	return pid, alive(pid)
}

// envFile reads KEY=VALUE lines (comments, blank lines, "export" and
// surrounding quotes allowed), as systemd's EnvironmentFile= does.
func envFile(path string, env map[string]string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		env[strings.TrimSpace(k)] = unquote(strings.TrimSpace(v))
	}
	return nil
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		return v[1 : len(v)-1]
	}
	return v
}

// words splits a command line into words; double or single quotes group.
func words(s string) []string {
	var out []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '"' || c == '\''):
			quote, in = c, true
		case quote == 0 && (c == ' ' || c == '\t'):
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// expand applies systemd's rules: a word that is exactly $VAR becomes the
// variable's whitespace-separated words (none when empty); ${VAR} anywhere
// is replaced by the value as it is.
func expand(argv []string, env map[string]string) []string {
	var out []string
	for _, w := range argv {
		if len(w) > 1 && w[0] == '$' && w[1] != '{' {
			out = append(out, strings.Fields(env[w[1:]])...)
			continue
		}
		for {
			i := strings.Index(w, "${")
			if i < 0 {
				break
			}
			j := strings.IndexByte(w[i:], '}')
			if j < 0 {
				break
			}
			w = w[:i] + env[w[i+2:i+j]] + w[i+j+1:]
		}
		out = append(out, w)
	}
	return out
}

func start(name string) error {
	if _, ok := running(name); ok {
		return nil
	}
	u, err := load(name)
	if err != nil {
		return err
	}
	for _, c := range u.conditions {
		c = strings.TrimPrefix(c, "|")
		neg := strings.HasPrefix(c, "!")
		_, err := os.Stat(strings.TrimPrefix(c, "!"))
		if (err == nil) == neg {
			fmt.Printf("%s: condition ConditionPathExists=%s not met, not started\n", name, c)
			return nil
		}
	}
	env := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
	for _, e := range u.service["Environment"] {
		for _, w := range words(e) {
			if k, v, ok := strings.Cut(w, "="); ok {
				env[k] = v
			}
		}
	}
	for _, f := range u.service["EnvironmentFile"] {
		optional := strings.HasPrefix(f, "-")
		if err := envFile(strings.TrimPrefix(f, "-"), env); err != nil && !(optional && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("environment file %s: %w", f, err)
		}
	}
	exe := strings.TrimLeft(u.last("ExecStart"), "-@+!:")
	argv := expand(words(exe), env)
	if len(argv) == 0 {
		return fmt.Errorf("%s: empty ExecStart=", u.path)
	}

	var cred *syscall.Credential
	uid, gid := 0, 0
	if name := u.last("User"); name != "" {
		usr, err := user.Lookup(name)
		if err != nil {
			return fmt.Errorf("user %s (User=): %w", name, err)
		}
		uid, _ = strconv.Atoi(usr.Uid)
		gid, _ = strconv.Atoi(usr.Gid)
		if g := u.last("Group"); g != "" {
			grp, err := user.LookupGroup(g)
			if err != nil {
				return fmt.Errorf("group %s (Group=): %w", g, err)
			}
			gid, _ = strconv.Atoi(grp.Gid)
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		env["USER"], env["LOGNAME"], env["HOME"] = usr.Username, usr.Username, usr.HomeDir
	}
	for key, base := range map[string]string{"StateDirectory": "/var/lib", "RuntimeDirectory": "/run"} {
		mode := os.FileMode(0o755)
		if m, err := strconv.ParseUint(u.last(key+"Mode"), 8, 32); err == nil {
			mode = os.FileMode(m)
		}
		for _, v := range u.service[key] {
			for _, d := range strings.Fields(v) {
				p := filepath.Join(base, d)
				if err := os.MkdirAll(p, mode); err != nil {
					return err
				}
				if err := os.Chown(p, uid, gid); err != nil {
					return err
				}
			}
		}
	}

	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(logFile(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	var notify *net.UnixConn
	if u.last("Type") == "notify" {
		sock := filepath.Join(stateDir, name+".notify")
		_ = os.Remove(sock)
		notify, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
		if err != nil {
			return err
		}
		defer notify.Close()
		defer os.Remove(sock)
		if err := os.Chown(sock, uid, gid); err != nil {
			return err
		}
		env["NOTIFY_SOCKET"] = sock
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	if wd := u.last("WorkingDirectory"); wd != "" {
		cmd.Dir = strings.TrimPrefix(wd, "-")
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: cred}
	fmt.Fprintf(logf, "--- systemctl stand-in: starting %s: %s\n", name, strings.Join(argv, " "))
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := os.WriteFile(pidFile(name), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if notify == nil {
		fmt.Printf("started %s (pid %d)\n", name, cmd.Process.Pid)
		return nil
	}
	ready := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := notify.Read(buf)
			if err != nil {
				return
			}
			for _, l := range strings.Split(string(buf[:n]), "\n") {
				if l == "READY=1" {
					close(ready)
					return
				}
			}
		}
	}()
	select {
	case <-ready:
		fmt.Printf("started %s (pid %d): READY=1\n", name, cmd.Process.Pid)
		return nil
	case err := <-exited:
		return fmt.Errorf("exited before READY=1 (%v):\n%s", err, tail(logFile(name), 30))
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		return fmt.Errorf("no READY=1 within 2 minutes:\n%s", tail(logFile(name), 30))
	}
}

func stop(name string) error {
	pid, ok := running(name)
	if !ok {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(time.Hour)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return os.Remove(pidFile(name))
}

func status(name string) error {
	state := "inactive (dead)"
	if pid, ok := running(name); ok {
		state = fmt.Sprintf("active (running), pid %d", pid)
	}
	fmt.Printf("%s: %s\n%s", name, state, tail(logFile(name), 10))
	return nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}
