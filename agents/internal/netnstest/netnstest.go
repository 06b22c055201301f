// Package netnstest gives the agents' tests real network namespaces (root
// only, as in CI): hosts joined by veth pairs with link-local addresses
// (169.254/16, no default route), code run inside a namespace, and the
// original destination of a redirected connection (SO_ORIGINAL_DST), as
// Envoy reads it. Namespaces are deleted at the end of the test, on failure
// too, with every process still in them killed. Only tests import it.
package netnstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmesh/vmesh/internal/testenv"
)

// Require skips the test (fails it with CI=true, testenv.Missing) unless
// it runs as root with ip on PATH and each of bins present.
func Require(t testing.TB, bins ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (network namespaces)")
	}
	for _, b := range append([]string{"ip"}, bins...) {
		if _, err := exec.LookPath(b); err != nil {
			testenv.Missing(t, "%s", b)
		}
	}
}

// NS is one network namespace.
type NS struct {
	Name string
	t    testing.TB
}

// New creates a namespace with loopback up, deleted when the test ends.
func New(t testing.TB, role string) *NS {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	ns := &NS{Name: "vmt-" + role + "-" + hex.EncodeToString(b), t: t}
	Run(t, "ip", "netns", "add", ns.Name)
	t.Cleanup(ns.delete)
	Run(t, "ip", "-n", ns.Name, "link", "set", "lo", "up")
	return ns
}

func (ns *NS) delete() {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "pids", ns.Name).Output()
		pids := slices.DeleteFunc(strings.Fields(string(out)), func(p string) bool { return p == strconv.Itoa(os.Getpid()) })
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			ns.t.Errorf("processes %v of namespace %s survived SIGKILL", pids, ns.Name)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := exec.Command("ip", "netns", "delete", ns.Name).CombinedOutput(); err != nil {
		ns.t.Errorf("ip netns delete %s: %v\n%s", ns.Name, err, out)
	}
}

// Run runs a command and fails the test when it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Link joins a and b with a veth pair, addresses aAddr and bAddr
// (169.254.x.y) in a /16, both up, and returns the two devices' names.
func Link(t testing.TB, a *NS, aAddr string, b *NS, bAddr string) (aDev, bDev string) {
	t.Helper()
	an, bn := "veth"+a.Name[len(a.Name)-6:], "veth"+b.Name[len(b.Name)-6:]
	Run(t, "ip", "-n", a.Name, "link", "add", an, "type", "veth", "peer", "name", bn, "netns", b.Name)
	Run(t, "ip", "-n", a.Name, "addr", "add", aAddr+"/16", "dev", an)
	Run(t, "ip", "-n", b.Name, "addr", "add", bAddr+"/16", "dev", bn)
	Run(t, "ip", "-n", a.Name, "link", "set", an, "up")
	Run(t, "ip", "-n", b.Name, "link", "set", bn, "up")
	return an, bn
}

// Do runs f on an OS thread inside the namespace: sockets f opens belong to
// it (and stay there when used from other goroutines), and processes f
// starts run in it. The thread goes back to its own namespace afterwards
// (or, if that fails, ends with the goroutine).
func (ns *NS) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open own netns: %w", err)
			return
		}
		defer unix.Close(home)
		fd, err := unix.Open("/run/netns/"+ns.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open netns %s: %w", ns.Name, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", ns.Name, err)
			return
		}
		err = f()
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Listen opens a TCP listener inside the namespace.
func (ns *NS) Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	if err := ns.Do(func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// ListenUDP opens a UDP socket inside the namespace.
func (ns *NS) ListenUDP(t testing.TB, addr string) net.PacketConn {
	t.Helper()
	var c net.PacketConn
	if err := ns.Do(func() (err error) { c, err = net.ListenPacket("udp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Dial connects from inside the namespace.
func (ns *NS) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) { c, err = net.DialTimeout(network, addr, timeout); return err })
	return c, err
}

// Command returns cmd run inside the namespace (ip netns exec).
func (ns *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Output runs a command inside the namespace and returns its combined
// output.
func (ns *NS) Output(t testing.TB, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var buf bytes.Buffer
	cmd := ns.Command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		t.Fatalf("in %s: %s %s: %v\n%s", ns.Name, name, strings.Join(args, " "), err, buf.String())
	}
	return buf.String()
}

// OriginalDst returns the destination a connection had before a REDIRECT
// (getsockopt SO_ORIGINAL_DST), as Envoy's original_dst listener filter
// reads it. IPv4 only.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("not a TCP connection: %T", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var out netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		// struct sockaddr_in fits the 16 bytes IPv6Mreq reads.
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		b := m.Multiaddr
		port := binary.BigEndian.Uint16(b[2:4])
		out = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), port)
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	return out, serr
}

// Ruleset returns what nft list ruleset and iptables-save/ip6tables-save
// show inside the namespace (those of the binaries present).
func (ns *NS) Ruleset(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	for _, c := range [][]string{{"nft", "list", "ruleset"}, {"iptables-save"}, {"ip6tables-save"}} {
		if _, err := exec.LookPath(c[0]); err != nil {
			continue
		}
		fmt.Fprintf(&b, "# %s\n%s", strings.Join(c, " "), ns.Output(t, c[0], c[1:]...))
	}
	return b.String()
}
