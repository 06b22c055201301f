package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// prepareOutDir creates the output directory when it is missing, mode
// 0750 (certificates and bootstraps are no business of other users). When
// Envoy runs as another user (cred), a directory the agent creates belongs
// to Envoy's group, so that Envoy can read its bootstrap there; the key
// stays 0600, readable by the agent alone (Envoy gets its certificate over
// SDS). An existing directory is left as the operator made it: the check
// before Envoy starts (checkEnvoyAccess) says what to change if Envoy
// cannot read it.
func prepareOutDir(dir string, cred *syscall.Credential, logger *slog.Logger) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("agent: output directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("agent: output directory: %w", err)
	}
	if cred == nil {
		return nil
	}
	if err := os.Chown(dir, -1, int(cred.Gid)); err != nil {
		// Without CAP_CHOWN; the check before Envoy starts says what to do.
		logger.Warn("cannot give the output directory to Envoy's group", "dir", dir, "gid", cred.Gid, "error", err)
		return nil
	}
	// Chown may clear set-ID bits; the mode is set again after it.
	if err := os.Chmod(dir, 0o750); err != nil {
		return fmt.Errorf("agent: output directory: %w", err)
	}
	return nil
}

// errNoSwitch is checkAccessAs's error when the agent cannot take Envoy's
// identity to check (it lacks CAP_SETUID/CAP_SETGID).
var errNoSwitch = errors.New("cannot take the user's identity to check")

// checkEnvoyAccess checks, as the user and group Envoy runs as, that Envoy
// can read its bootstrap and connect to the agent's xDS socket (the SDS
// socket is made alike, beside it). It fails with what to change: the
// first directory on the way that Envoy cannot search, or the file's
// mode. An agent that cannot take that identity to check (not root)
// skips the check with a log line.
func checkEnvoyAccess(cred *syscall.Credential, bootstrap, socket string, logger *slog.Logger) error {
	err := checkAccessAs(cred, func() error {
		if err := searchable(filepath.Dir(bootstrap)); err != nil {
			return err
		}
		f, err := os.Open(bootstrap)
		if err != nil {
			return fmt.Errorf("cannot read its bootstrap: %w; give it read access to %s (mode 0644, or group %d with 0640)", err, bootstrap, cred.Gid)
		}
		f.Close()
		if err := searchable(filepath.Dir(socket)); err != nil {
			return err
		}
		c, err := net.Dial("unix", socket)
		if err != nil {
			return fmt.Errorf("cannot connect to the agent's socket: %w", err)
		}
		c.Close()
		return nil
	})
	switch {
	case errors.Is(err, errNoSwitch):
		logger.Info("not checking that Envoy can read its bootstrap: the agent cannot take Envoy's user to check", "uid", cred.Uid, "gid", cred.Gid)
		return nil
	case err != nil:
		return fmt.Errorf("agent: Envoy runs as uid %d gid %d and %w (or choose other --out/--sockets directories)", cred.Uid, cred.Gid, err)
	}
	return nil
}

// searchable returns an error naming the first directory from / down to
// dir that the caller cannot search.
func searchable(dir string) error {
	p := string(filepath.Separator)
	for _, part := range splitPath(dir) {
		p = filepath.Join(p, part)
		if _, err := os.Stat(filepath.Join(p, ".")); err != nil {
			return fmt.Errorf("cannot enter %s: %w; let it in, e.g. chmod o+x %s, or chgrp to Envoy's group and chmod g+x", p, err, p)
		}
	}
	return nil
}

func splitPath(dir string) []string {
	var parts []string
	for d := filepath.Clean(dir); d != filepath.Dir(d); d = filepath.Dir(d) {
		parts = append([]string{filepath.Base(d)}, parts...)
	}
	return parts
}

// checkAccessAs runs f on an OS thread of its own whose file-system
// identity is uid/gid with no supplementary groups, as a process started
// with cred would have; the thread ends with f (it is never unlocked, so
// the runtime discards it and its identity). It returns errNoSwitch when
// the process may not take that identity.
func checkAccessAs(cred *syscall.Credential, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread exits with this goroutine.
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			done <- errNoSwitch
			return
		}
		unix.RawSyscall(unix.SYS_SETFSGID, uintptr(cred.Gid), 0, 0)
		unix.RawSyscall(unix.SYS_SETFSUID, uintptr(cred.Uid), 0, 0)
		// setfs[ug]id return the previous id and never fail: ask again.
		gid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, uintptr(cred.Gid), 0, 0)
		uid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, uintptr(cred.Uid), 0, 0)
		if uint32(uid) != cred.Uid || uint32(gid) != cred.Gid {
			done <- errNoSwitch
			return
		}
		done <- f()
	}()
	return <-done
}
