package capture_test

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmesh/vmesh/agents/capture"
	"github.com/vmesh/vmesh/agents/internal/agenttest"
	"github.com/vmesh/vmesh/agents/internal/netnstest"
	"github.com/vmesh/vmesh/internal/testenv"
)

func TestParse(t *testing.T) {
	ps, err := capture.ParsePrefixes("10.0.0.0/8, 192.168.1.7,fd00::/8")
	if err != nil || len(ps) != 3 || ps[1].String() != "192.168.1.7/32" {
		t.Fatalf("ParsePrefixes = %v, %v", ps, err)
	}
	if ps, err := capture.ParsePrefixes("*"); err != nil || ps != nil {
		t.Fatalf(`ParsePrefixes("*") = %v, %v; want nil (all)`, ps, err)
	}
	if ps, err := capture.ParsePrefixes(""); err != nil || ps == nil || len(ps) != 0 {
		t.Fatalf(`ParsePrefixes("") = %#v, %v; want empty (none)`, ps, err)
	}
	if _, err := capture.ParsePrefixes("10.0.0.0/33"); err == nil {
		t.Fatal("ParsePrefixes accepted /33")
	}
	if p, err := capture.ParsePorts("80, 443"); err != nil || len(p) != 2 || p[1] != 443 {
		t.Fatalf("ParsePorts = %v, %v", p, err)
	}
	if _, err := capture.ParsePorts("0"); err == nil {
		t.Fatal("ParsePorts accepted 0")
	}
}

// vmAddr and peerAddr are the VM's and a peer host's link-local addresses.
const (
	vmAddr   = "169.254.1.2"
	peerAddr = "169.254.1.1"
	vip      = "240.240.0.5"
	vmAddr6  = "::7"
)

// standIn accepts on l and sends each connection's original destination.
func standIn(t *testing.T, l net.Listener) <-chan netip.AddrPort {
	ch := make(chan netip.AddrPort, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			dst, err := netnstest.OriginalDst(c)
			if err != nil {
				t.Errorf("SO_ORIGINAL_DST: %v", err)
			}
			c.Close()
			ch <- dst
		}
	}()
	return ch
}

// accepted accepts on l and sends each connection's local address (the
// address and port it was accepted on).
func accepted(l net.Listener) <-chan string {
	return acceptEach(l, func(c net.Conn) string { return c.LocalAddr().String() })
}

// remotes accepts on l and sends each connection's source address.
func remotes(l net.Listener) <-chan string {
	return acceptEach(l, func(c net.Conn) string { return c.RemoteAddr().(*net.TCPAddr).IP.String() })
}

// acceptEach accepts on l and sends what of each connection says.
func acceptEach(l net.Listener, what func(net.Conn) string) <-chan string {
	ch := make(chan string, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ch <- what(c)
			c.Close()
		}
	}()
	return ch
}

func expect[T comparable](t *testing.T, what string, ch <-chan T, want T) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing arrived (want %v)", what, want)
	}
}

func dial(t *testing.T, ns *netnstest.NS, addr string) {
	t.Helper()
	c, err := ns.Dial("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, ns.Name, err)
	}
	c.Close()
}

// TestCaptureInNetns installs the capture for real in a namespace standing
// for a VM, with each backend, and checks every path: outbound TCP reaches
// the stand-in for Envoy on 15001 with its original destination; inbound
// TCP to a workload port reaches 15006; Envoy's UID, excluded ports and
// ranges, and marked sockets pass untouched; DNS over UDP and TCP goes to
// 15053; Remove, and Remove run afresh as `vmesh agent cleanup` does,
// leave no rule of vmesh's.
func TestCaptureInNetns(t *testing.T) {
	for _, mode := range []string{capture.ModeNFT, capture.ModeIPTables} {
		t.Run(mode, func(t *testing.T) {
			bin := map[string]string{capture.ModeNFT: "nft", capture.ModeIPTables: "iptables"}[mode]
			netnstest.Require(t, bin, "iptables-save", "bash", "setpriv")
			testCapture(t, mode)
		})
	}
}

func testCapture(t *testing.T, mode string) {
	vm, peer := netnstest.New(t, "vm"), netnstest.New(t, "peer")
	dev, _ := netnstest.Link(t, vm, vmAddr, peer, peerAddr)
	netnstest.Run(t, "ip", "-n", vm.Name, "route", "add", "240.240.0.0/16", "dev", dev)

	outbound := standIn(t, vm.Listen(t, "0.0.0.0:15001"))
	inbound := standIn(t, vm.Listen(t, "0.0.0.0:15006"))
	dnsTCP := accepted(vm.Listen(t, "127.0.0.1:15053"))
	dnsUDP := vm.ListenUDP(t, "127.0.0.1:15053")
	peerDirect := accepted(peer.Listen(t, "0.0.0.0:7000"))
	peerExcluded := accepted(peer.Listen(t, "0.0.0.0:7001"))
	peerCP := accepted(peer.Listen(t, "0.0.0.0:15012"))
	vm.Listen(t, vmAddr+":9090")                 // a workload port excluded from inbound capture
	app := remotes(vm.Listen(t, vmAddr+":7070")) // the workload, on the VM's address
	// An IPv6 address of the VM's own (on lo: no packet can leave), and the
	// workload on it.
	netnstest.Run(t, "ip", "-n", vm.Name, "-6", "addr", "add", vmAddr6+"/128", "dev", "lo", "nodad")
	app6 := remotes(vm.Listen(t, "["+vmAddr6+"]:7071"))

	cfg := capture.Defaults()
	cfg.Mode = mode
	cfg.ExcludeOutboundPorts = []uint16{7001}
	cfg.ExcludeOutboundIPRanges = []netip.Prefix{netip.MustParsePrefix(peerAddr + "/32")}
	cfg.ExcludeInboundPorts = []uint16{9090}
	ctx := agenttest.Context(t, time.Minute)
	var c *capture.Capture
	if err := vm.Do(func() (err error) { c, err = capture.Install(ctx, cfg, agenttest.Logger(t)); return err }); err != nil {
		t.Fatal(err)
	}
	if c.Mode() != mode {
		t.Fatalf("mode %s, want %s", c.Mode(), mode)
	}
	rules := vm.Ruleset(t)
	if !strings.Contains(strings.ToLower(rules), "vmesh") {
		t.Fatalf("no vmesh rules installed:\n%s", rules)
	}

	// Outbound to a VIP: captured, original destination kept.
	dial(t, vm, vip+":9080")
	expect(t, "outbound to the VIP", outbound, netip.MustParseAddrPort(vip+":9080"))
	// The control plane's address (an excluded range) is not captured.
	dial(t, vm, peerAddr+":15012")
	expect(t, "to the control plane", peerCP, peerAddr+":15012")

	// Inbound to a workload port: to 15006; an excluded port: untouched.
	dial(t, peer, vmAddr+":8080")
	expect(t, "inbound to the workload port", inbound, netip.MustParseAddrPort(vmAddr+":8080"))
	dial(t, peer, vmAddr+":9090")
	select {
	case d := <-inbound:
		t.Fatalf("excluded inbound port 9090 captured (%v)", d)
	case <-time.After(200 * time.Millisecond):
	}

	// The sidecar's own connections to the VM's address (its inbound
	// clusters forward there, to the connection's original destination):
	// from 127.0.0.6 they reach the workload, as with istio-iptables; from
	// any other source they are captured back to 15006 (Istio's rule for
	// a workload calling its own address through its sidecar).
	dialAsProxy(t, vm, "127.0.0.6", vmAddr+":7070")
	expect(t, "the sidecar's connection from 127.0.0.6 to the VM's address", app, "127.0.0.6")
	dialAsProxy(t, vm, "", vmAddr+":7070")
	expect(t, "the sidecar's connection from the VM's address to itself", inbound, netip.MustParseAddrPort(vmAddr+":7070"))
	// IPv6: the capture puts ::6 on lo, so that Envoy can bind it.
	dialAsProxy(t, vm, "::6", "["+vmAddr6+"]:7071")
	expect(t, "the sidecar's connection from ::6 to the VM's IPv6 address", app6, "::6")

	// Without the exclusion, the peer's address is captured...
	cfg.ExcludeOutboundIPRanges = nil
	if err := vm.Do(func() (err error) { c, err = capture.Install(ctx, cfg, agenttest.Logger(t)); return err }); err != nil {
		t.Fatal(err)
	}
	dial(t, vm, peerAddr+":7000")
	expect(t, "outbound to the peer", outbound, netip.MustParseAddrPort(peerAddr+":7000"))
	// ...but not an excluded port,
	dial(t, vm, peerAddr+":7001")
	expect(t, "excluded outbound port", peerExcluded, peerAddr+":7001")
	// nor Envoy's own traffic (UID 1337),
	out, err := vm.Command(ctx, "setpriv", "--reuid", "1337", "--regid", "1337", "--clear-groups",
		"bash", "-c", "exec 3<>/dev/tcp/"+peerAddr+"/7000").CombinedOutput()
	if err != nil {
		t.Fatalf("connecting as UID 1337: %v\n%s", err, out)
	}
	expect(t, "Envoy's UID", peerDirect, peerAddr+":7000")
	// nor a socket carrying the mark.
	if err := vm.Do(func() error {
		d := net.Dialer{Timeout: 3 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, capture.DefaultMark)
			})
			if err != nil {
				return err
			}
			return serr
		}}
		conn, err := d.Dial("tcp", peerAddr+":7000")
		if err == nil {
			conn.Close()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	expect(t, "marked socket", peerDirect, peerAddr+":7000")

	// DNS, UDP and TCP, to the DNS proxy's port.
	if err := vm.Do(func() error {
		u, err := net.Dial("udp", peerAddr+":53")
		if err != nil {
			return err
		}
		defer u.Close()
		_, err = u.Write([]byte("query"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_ = dnsUDP.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, _, err := dnsUDP.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "query" {
		t.Fatalf("UDP DNS not captured: %q, %v", buf[:n], err)
	}
	dial(t, vm, peerAddr+":53")
	expect(t, "TCP DNS", dnsTCP, "127.0.0.1:15053")

	// Removal, then a cleanup after a "crash" (install, forget, remove).
	if err := vm.Do(func() error { return c.Remove(ctx) }); err != nil {
		t.Fatal(err)
	}
	assertClean(t, vm)
	if addrs := vm.Output(t, "ip", "-6", "addr", "show", "dev", "lo"); strings.Contains(addrs, capture.PassthroughV6) {
		t.Fatalf("%s left on lo after removal:\n%s", capture.PassthroughV6, addrs)
	}
	if err := vm.Do(func() (err error) { _, err = capture.Install(ctx, cfg, nil); return err }); err != nil {
		t.Fatal(err)
	}
	if err := vm.Do(func() error { return capture.Remove(ctx, nil) }); err != nil {
		t.Fatal(err)
	}
	assertClean(t, vm)
	// And again: cleanup with nothing to clean succeeds.
	if err := vm.Do(func() error { return capture.Remove(ctx, nil) }); err != nil {
		t.Fatal(err)
	}
	dial(t, vm, peerAddr+":7000")
	expect(t, "after removal", peerDirect, peerAddr+":7000")

	// Include lists instead of "*": only the listed ranges, ports and
	// resolvers are captured.
	cfg.IncludeOutboundIPRanges = []netip.Prefix{netip.MustParsePrefix("240.240.0.0/16"), netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00::/8")}
	cfg.IncludeInboundPorts = []uint16{8080, 8080, 8081}
	cfg.DNSServers = []netip.Addr{netip.MustParseAddr(peerAddr), netip.MustParseAddr("fd00::53")}
	if err := vm.Do(func() (err error) { c, err = capture.Install(ctx, cfg, nil); return err }); err != nil {
		t.Fatal(err)
	}
	dial(t, vm, vip+":9080")
	expect(t, "outbound to an included range", outbound, netip.MustParseAddrPort(vip+":9080"))
	dial(t, vm, peerAddr+":7000")
	expect(t, "outside the included ranges", peerDirect, peerAddr+":7000")
	dial(t, peer, vmAddr+":8081")
	expect(t, "inbound to an included port", inbound, netip.MustParseAddrPort(vmAddr+":8081"))
	dial(t, vm, peerAddr+":53")
	expect(t, "TCP DNS to a listed resolver", dnsTCP, "127.0.0.1:15053")
	if err := vm.Do(func() error { return c.Remove(ctx) }); err != nil {
		t.Fatal(err)
	}
	assertClean(t, vm)
}

func assertClean(t *testing.T, ns *netnstest.NS) {
	t.Helper()
	rules := ns.Ruleset(t)
	if strings.Contains(strings.ToLower(rules), "vmesh") || strings.Contains(rules, "redirect") || strings.Contains(rules, "REDIRECT") {
		t.Fatalf("rules left after removal:\n%s", rules)
	}
}

func TestPermitted(t *testing.T) {
	if os.Geteuid() != 0 {
		if err := capture.Permitted(false); err == nil {
			t.Error("a non-root test process has CAP_NET_ADMIN?")
		}
		testenv.Missing(t, "root (capture rules)")
	}
	if err := capture.Permitted(true); err != nil {
		t.Errorf("root: %v", err)
	}
	// Without the capabilities: setpriv drops them, the helper reports it.
	out, err := exec.Command("setpriv", "--inh-caps=-all", "--bounding-set=-all", os.Args[0], "-test.v", "-test.run=^TestPermittedHelper$").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CAP_NET_ADMIN, CAP_SETUID, CAP_SETGID") {
		t.Errorf("without capabilities: %v\n%s", err, out)
	}
}

// dialAsProxy connects to addr from inside ns as the sidecar's user (UID
// and GID 1337), from source address from when it is set: this test
// binary, run again as TestDialAsProxyHelper, changes its user and dials.
func dialAsProxy(t *testing.T, ns *netnstest.NS, from, addr string) {
	t.Helper()
	cmd := ns.Command(agenttest.Context(t, time.Minute), os.Args[0], "-test.run=^TestDialAsProxyHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "VMESH_TEST_DIAL="+addr, "VMESH_TEST_DIAL_FROM="+from)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "dialled "+addr) {
		t.Fatalf("dial %s from %q as UID 1337: %v\n%s", addr, from, err, out)
	}
}

// TestDialAsProxyHelper is dialAsProxy's helper: with VMESH_TEST_DIAL set,
// it becomes UID/GID 1337 and connects there (from VMESH_TEST_DIAL_FROM
// when set); otherwise it does nothing.
func TestDialAsProxyHelper(t *testing.T) {
	addr := os.Getenv("VMESH_TEST_DIAL")
	if addr == "" {
		return
	}
	if err := syscall.Setgroups(nil); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setgid(1337); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setuid(1337); err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Timeout: 3 * time.Second}
	if from := os.Getenv("VMESH_TEST_DIAL_FROM"); from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	t.Logf("dialled %s", addr)
}

// TestPermittedHelper prints Permitted's verdict (run by TestPermitted).
func TestPermittedHelper(t *testing.T) {
	if err := capture.Permitted(true); err != nil {
		t.Log(err)
	}
}

// TestFaultReinstallLeavesNoGap is what a restarting agent does with the
// rules its previous run left in place (they stay across stops and crashes
// so that traffic fails closed): installing again replaces them without a
// moment with no capture, and without duplicating a rule. A peer connects
// to a workload port without pause while the capture is installed again
// and again: every connection reaches the stand-in for Envoy on 15006,
// none the workload itself; the rules afterwards are the rules of one
// install. A reinstall that removed the old rules first would let some
// through.
func TestFaultReinstallLeavesNoGap(t *testing.T) {
	for _, mode := range []string{capture.ModeNFT, capture.ModeIPTables} {
		t.Run(mode, func(t *testing.T) {
			bin := map[string]string{capture.ModeNFT: "nft", capture.ModeIPTables: "iptables"}[mode]
			netnstest.Require(t, bin, "iptables-save", "iptables-restore")
			testReinstall(t, mode)
		})
	}
}

func testReinstall(t *testing.T, mode string) {
	vm, peer := netnstest.New(t, "vm"), netnstest.New(t, "peer")
	netnstest.Link(t, vm, vmAddr, peer, peerAddr)
	inbound := standIn(t, vm.Listen(t, "0.0.0.0:15006"))
	go func() {
		for range inbound { // drained; the workload's channel is what counts
		}
	}()
	workload := accepted(vm.Listen(t, vmAddr+":8080"))

	cfg := capture.Defaults()
	cfg.Mode = mode
	ctx := agenttest.Context(t, 2*time.Minute)
	install := func() {
		t.Helper()
		if err := vm.Do(func() error { _, err := capture.Install(ctx, cfg, nil); return err }); err != nil {
			t.Fatal(err)
		}
	}
	install()
	first := ownRuleset(t, vm)
	if !strings.Contains(strings.ToLower(first), "vmesh") {
		t.Fatalf("no vmesh rules installed:\n%s", first)
	}

	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			if c, err := peer.Dial("tcp", vmAddr+":8080", time.Second); err == nil {
				c.Close()
				n++
			}
		}
	}()
	for range 15 {
		install()
	}
	close(stop)
	n := <-done
	if n == 0 {
		t.Fatal("no connection made while reinstalling")
	}
	select {
	case got := <-workload:
		t.Fatalf("a connection reached the workload (%s) directly while the capture was installed again (%d connections)", got, n)
	case <-time.After(200 * time.Millisecond):
	}
	if again := ownRuleset(t, vm); again != first {
		t.Fatalf("rules after 16 installs differ from those after one:\n--- one:\n%s\n--- 16:\n%s", first, again)
	}
	t.Logf("%d connections during 15 reinstalls, all captured", n)
	if err := vm.Do(func() error { return capture.Remove(ctx, nil) }); err != nil {
		t.Fatal(err)
	}
	assertClean(t, vm)
}

// counters are what nft shows of iptables-nft's counters.
var counters = regexp.MustCompile(`counter packets \d+ bytes \d+ `)

// ownRuleset is the namespace's nat rules without counters or dates:
// nft's ruleset and `iptables -t nat -S` of both families.
func ownRuleset(t *testing.T, ns *netnstest.NS) string {
	t.Helper()
	var b strings.Builder
	for _, c := range [][]string{{"nft", "list", "ruleset"}, {"iptables", "-w", "-t", "nat", "-S"}, {"ip6tables", "-w", "-t", "nat", "-S"}} {
		if _, err := exec.LookPath(c[0]); err != nil {
			continue
		}
		b.WriteString("# " + strings.Join(c, " ") + "\n" + ns.Output(t, c[0], c[1:]...))
	}
	return counters.ReplaceAllString(b.String(), "")
}
