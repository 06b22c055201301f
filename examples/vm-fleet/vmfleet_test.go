// Package vmfleet holds the test of docs/vm-fleet.md, the VM-fleet guide:
// it extracts the guide's command blocks from the document and runs them
// verbatim, each on the host it names, with network namespaces as hosts.
//
// The hosts. Each of cp, vm1, vm2 and vm3 is a network namespace joined by
// a veth to a bridge that lives in a namespace of its own; each has only
// its link-local address (169.254.10.x/16: no default route, nothing leaves
// the machine) and loopback. Each host is also a mount and UTS namespace
// kept alive by one process (its "init", a sleep) that every block enters
// with nsenter: its host name is set, and /etc, /usr, /var and /root are
// overlays of the machine's own directories whose changes go to the test's
// temporary directory, /run is an empty tmpfs. So the guide's `dpkg -i`
// installs into a private copy of the dpkg database, /etc/passwd,
// /etc/vmesh, /usr/bin and /var/lib/vmesh of that host only, and the
// machine's own files are never written. /etc/hosts (in the overlay) names
// the four hosts, as the guide asks DNS or /etc/hosts to. /srv/fleet is the
// same directory on every host: it holds what the guide's "Before you
// start" section builds (the two packages and meshecho, built by the test
// into that directory) and carries the bundles from cp to the VMs.
//
// The one substitution: no systemd runs here, so the first directory on
// each host's PATH holds a stand-in systemctl (examples/vm-fleet/systemctl)
// that runs an installed unit's own ExecStart= line (EnvironmentFile= and
// $VAR expanded, as User=) in the background and, for Type=notify, waits
// for READY=1 on the NOTIFY_SOCKET it provides. Every other command is the
// document's, byte for byte.
//
// At the end every process of every host is killed and the namespaces are
// deleted, on failure too; the mounts go with their namespaces and the
// overlays' upper directories with the test's temporary directory.
package vmfleet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/testenv"
)

// guideDoc is a guide under test: its path relative to the repository
// root, and its hosts with their addresses, in the order they are created.
type guideDoc struct {
	path  string
	hosts []string
	addrs map[string]string
	// tools are the commands the guide runs beyond vm-fleet's.
	tools []string
	// envoy builds the Envoy stand-in (examples/vm-fleet/envoy) as
	// /srv/fleet/envoy, where the guide takes Envoy from.
	envoy bool
}

// vmFleet is docs/vm-fleet.md.
var vmFleet = guideDoc{
	path:  "docs/vm-fleet.md",
	hosts: []string{"cp", "vm1", "vm2", "vm3"},
	addrs: map[string]string{
		"cp":  "169.254.10.1",
		"vm1": "169.254.10.11",
		"vm2": "169.254.10.12",
		"vm3": "169.254.10.13",
	},
}

// block is one runnable command block of the guide: a fenced block whose
// info string is `sh {host=H[,H...] [id=ID]}`.
type block struct {
	hosts []string
	id    string
	line  int // the document line of the block's first command
	text  string
}

var (
	fenceRE = regexp.MustCompile("^(\\s*)```(.*)$")
	attrsRE = regexp.MustCompile(`^sh\s+\{([^}]*)\}\s*$`)
	// blockLineRE matches what the ERR trap of exec prints.
	blockLineRE = regexp.MustCompile(`\(block line (\d+)\)`)
)

// extractBlocks returns the guide's runnable blocks, in document order. A
// block naming a host not in known, a runnable-looking block with a bad
// attribute, or a document without any runnable block is an error.
func extractBlocks(doc string, g guideDoc) ([]block, error) {
	guide, known := g.path, g.addrs
	var blocks []block
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, info := m[1], strings.TrimSpace(m[2])
		// Find the closing fence (same indentation or less).
		end := -1
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				end = j
				break
			}
		}
		if end < 0 {
			return nil, fmt.Errorf("%s:%d: code block never closed", guide, i+1)
		}
		attrs := attrsRE.FindStringSubmatch(info)
		if attrs == nil {
			if strings.Contains(info, "host=") {
				return nil, fmt.Errorf("%s:%d: malformed runnable block info %q (want sh {host=H[,H...] [id=ID]})", guide, i+1, info)
			}
			i = end
			continue
		}
		b := block{line: i + 2}
		for _, kv := range strings.Fields(attrs[1]) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("%s:%d: attribute %q is not key=value", guide, i+1, kv)
			}
			switch k {
			case "host":
				for _, h := range strings.Split(v, ",") {
					if _, ok := known[h]; !ok {
						return nil, fmt.Errorf("%s:%d: block names unknown host %q (hosts: %s)", guide, i+1, h, strings.Join(g.hosts, ", "))
					}
					b.hosts = append(b.hosts, h)
				}
			case "id":
				b.id = v
			default:
				return nil, fmt.Errorf("%s:%d: unknown attribute %q", guide, i+1, k)
			}
		}
		if len(b.hosts) == 0 {
			return nil, fmt.Errorf("%s:%d: runnable block names no host", guide, i+1)
		}
		body := lines[i+1 : end]
		for k, l := range body {
			body[k] = strings.TrimPrefix(l, indent)
		}
		b.text = strings.Join(body, "\n") + "\n"
		blocks = append(blocks, b)
		i = end
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s: no runnable blocks (```sh {host=...})", guide)
	}
	return blocks, nil
}

// TestExtractBlocks: the extractor finds host-tagged blocks with their
// hosts, ids and first lines, skips other blocks, and refuses a document
// without runnable blocks, an unknown host and a malformed tag.
func TestExtractBlocks(t *testing.T) {
	doc := "# t\n\n```sh\nnot run\n```\n\n```sh {host=cp id=one}\necho a\necho b\n```\n\n  ```sh {host=vm1,vm2}\n  echo c\n  ```\n"
	bs, err := extractBlocks(doc, vmFleet)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || bs[0].id != "one" || bs[0].line != 8 || bs[0].text != "echo a\necho b\n" ||
		strings.Join(bs[1].hosts, ",") != "vm1,vm2" || bs[1].text != "echo c\n" {
		t.Fatalf("blocks %+v", bs)
	}
	for name, bad := range map[string]string{
		"no blocks":    "# t\n```sh\necho\n```\n",
		"unknown host": "```sh {host=db}\necho\n```\n",
		"no host":      "```sh {id=x}\necho\n```\n",
		"malformed":    "```sh host=cp\necho\n```\n",
		"unclosed":     "```sh {host=cp}\necho\n",
	} {
		if _, err := extractBlocks(bad, vmFleet); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// The guides themselves parse and use only their hosts.
	for _, g := range []guideDoc{vmFleet, gateways} {
		data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), g.path))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := extractBlocks(string(data), g); err != nil {
			t.Fatal(err)
		}
	}
}

// fleet is the running set of hosts.
type fleet struct {
	t       *testing.T
	g       guideDoc
	tmp     string
	prefix  string         // namespace name prefix, unique per run
	pids    map[string]int // host -> its init process
	inits   map[string]*exec.Cmd
	pathDir string // the stand-in systemctl's directory
}

func (f *fleet) ns(host string) string { return f.prefix + host }

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// prerequisites skips (or with CI=true fails) when the test cannot run here.
func prerequisites(t *testing.T, g guideDoc) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (network namespaces, mounts, dpkg)")
	}
	for _, tool := range append([]string{"ip", "unshare", "nsenter", "dpkg", "curl", "dig", "bash"}, g.tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "%s", tool)
		}
	}
	if err := exec.Command("unshare", "--mount", "sh", "-c", "d=$(mktemp -d) && mkdir $d/u $d/w $d/m && mount -t overlay overlay -o lowerdir=/etc,upperdir=$d/u,workdir=$d/w $d/m; r=$?; umount $d/m 2>/dev/null; rm -rf $d; exit $r").Run(); err != nil {
		testenv.Missing(t, "overlayfs mounts (%v)", err)
	}
}

// build compiles what the guide's "Before you start" section builds (the
// packages, meshecho) into /srv/fleet's backing directory, and the
// stand-in systemctl. The packages are made (tools/package, what
// `make package` runs) while the rest builds; wait returns once they are.
func build(t *testing.T, root, fleetDir, pathDir string, envoy bool) (wait func()) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "go on PATH")
	}
	command := func(dir string, env []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd, &out
	}
	gobuild := func(dir string, env []string, args ...string) {
		t.Helper()
		cmd, out := command(dir, env, args...)
		if err := cmd.Run(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	bin := filepath.Join(t.TempDir(), "vmesh")
	gobuild(root, nil, "build", "-o", bin, "./cmd/vmesh")
	pkgArgs := []string{"run", ".", "-binary", bin, "-version", "0.0.0~vmfleet", "-out", fleetDir}
	pkg, pkgOut := command(filepath.Join(root, "tools", "package"), nil, pkgArgs...)
	if err := pkg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pkg.ProcessState == nil {
			_ = pkg.Process.Kill()
			_ = pkg.Wait()
		}
	})
	gobuild(root, nil, "build", "-o", filepath.Join(fleetDir, "meshecho"), "./examples/vm-fleet/meshecho")
	gobuild(root, []string{"CGO_ENABLED=0"}, "build", "-o", filepath.Join(pathDir, "systemctl"), "./examples/vm-fleet/systemctl")
	if envoy {
		gobuild(root, []string{"CGO_ENABLED=0"}, "build", "-o", filepath.Join(fleetDir, "envoy"), "./examples/vm-fleet/envoy")
	}
	return func() {
		t.Helper()
		if err := pkg.Wait(); err != nil {
			t.Fatalf("go %s (in tools/package): %v\n%s", strings.Join(pkgArgs, " "), err, pkgOut)
		}
	}
}

// hostsFile is every host's /etc/hosts.
func hostsFile(self string, g guideDoc) string {
	var b strings.Builder
	fmt.Fprintf(&b, "127.0.0.1\tlocalhost\n127.0.1.1\t%s\n", self)
	for _, h := range g.hosts {
		fmt.Fprintf(&b, "%s\t%s.mesh.internal %s\n", g.addrs[h], h, h)
	}
	return b.String()
}

// start creates the bridge and the hosts.
func (f *fleet) start(fleetDir string) {
	t := f.t
	br := f.prefix + "br"
	run(t, "ip", "netns", "add", br)
	t.Cleanup(func() { f.deleteNS(br) })
	run(t, "ip", "-n", br, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", br, "link", "set", "br0", "up")
	for _, h := range f.g.hosts {
		ns := f.ns(h)
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { f.deleteNS(ns) })
		run(t, "ip", "-n", br, "link", "add", h, "type", "veth", "peer", "name", "eth0", "netns", ns)
		run(t, "ip", "-n", br, "link", "set", h, "master", "br0", "up")
		run(t, "ip", "-n", ns, "addr", "add", f.g.addrs[h]+"/16", "dev", "eth0")
		run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")

		// The host's private directories: overlays of the machine's own.
		dir := filepath.Join(f.tmp, "hosts", h)
		var setup strings.Builder
		setup.WriteString("set -e\n")
		for _, d := range []string{"etc", "usr", "var", "root"} {
			up, work := filepath.Join(dir, d), filepath.Join(dir, d+".work")
			for _, p := range []string{up, work} {
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			fmt.Fprintf(&setup, "mount -t overlay overlay -o lowerdir=/%s,upperdir=%s,workdir=%s /%s\n", d, up, work, d)
		}
		fmt.Fprintf(&setup, "mount -t tmpfs -o mode=0755 tmpfs /run\nmkdir -p /run/lock\n")
		fmt.Fprintf(&setup, "mount -t tmpfs -o mode=0755 tmpfs /srv\nmkdir /srv/fleet\nmount --bind %s /srv/fleet\n", fleetDir)
		fmt.Fprintf(&setup, "hostname %s\n", h)
		fmt.Fprintf(&setup, "cat > /etc/hosts <<'EOF'\n%sEOF\n", hostsFile(h, f.g))
		setup.WriteString("echo ready\nexec sleep infinity\n")
		init := exec.Command("ip", "netns", "exec", ns, "unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", setup.String())
		stdout, err := init.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		init.Stderr = &stderr
		if err := init.Start(); err != nil {
			t.Fatal(err)
		}
		f.inits[h] = init
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			_ = init.Wait()
			t.Fatalf("host %s did not start: %q\n%s", h, line, stderr.String())
		}
		f.pids[h] = init.Process.Pid
	}
}

// deleteNS kills every process in a network namespace and deletes it.
func (f *fleet) deleteNS(ns string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			f.t.Errorf("processes %v of namespace %s survived SIGKILL", pids, ns)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for h, c := range f.inits {
		if f.ns(h) == ns {
			_ = c.Wait()
		}
	}
	if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
		f.t.Errorf("ip netns delete %s: %v\n%s", ns, err, out)
	}
}

// exec runs one block on one host and returns its combined output.
func (f *fleet) exec(host string, b block) (string, error) {
	// One line, so that the block's own lines keep their LINENO (+1).
	preamble := "set -eEo pipefail; trap 'echo \"FAIL: \\`$BASH_COMMAND\\` exited $? (block line $((LINENO - 1)))\" >&2' ERR; cd /root\n"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(f.pids[host]), "-m", "-u", "-n", "--", "/bin/bash", "-c", preamble+b.text)
	cmd.Env = []string{
		"PATH=" + f.pathDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "USER=root", "LOGNAME=root", "LANG=C.UTF-8", "TERM=dumb", "DEBIAN_FRONTEND=noninteractive",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after 2 minutes: %w", err)
	}
	return out.String(), err
}

// dumpLogs prints each host's service logs (the stand-in's /run/systemctl).
func (f *fleet) dumpLogs(w io.Writer) {
	for _, h := range f.g.hosts {
		pid, ok := f.pids[h]
		if !ok {
			continue
		}
		logs, _ := filepath.Glob(fmt.Sprintf("/proc/%d/root/run/systemctl/*.log", pid))
		for _, l := range logs {
			data, _ := os.ReadFile(l)
			lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			fmt.Fprintf(w, "--- %s: %s (last %d lines)\n%s\n", h, filepath.Base(l), len(lines), strings.Join(lines, "\n"))
		}
	}
}

// answers parses `meshecho call` output: version -> calls answered.
func answers(t *testing.T, out string) map[string]int {
	t.Helper()
	got := map[string]int{}
	re := regexp.MustCompile(`(?m)^\s*(\d+)\s+(v\d)\s+(vm\d)\s+(\S+)$`)
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		got[m[2]] += n
		want := map[string]string{"v1": "vm1", "v2": "vm2"}[m[2]]
		if m[3] != want || m[4] != "spiffe://cluster.local/ns/fleet/sa/echo" {
			t.Errorf("answer line %q: want %s from %s as spiffe://cluster.local/ns/fleet/sa/echo", m[0], m[2], want)
		}
	}
	return got
}

// runGuide runs a guide's blocks, each on the hosts it names, and returns
// the output of each block with an id, by "id@host".
func runGuide(t *testing.T, g guideDoc) map[string]string {
	t.Helper()
	prerequisites(t, g)
	guide := g.path
	root := testenv.RepoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, guide))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := extractBlocks(string(data), g)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	tmp := t.TempDir()
	fleetDir, pathDir := filepath.Join(tmp, "fleet"), filepath.Join(tmp, "standin")
	for _, d := range []string{fleetDir, pathDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	packaged := build(t, root, fleetDir, pathDir, g.envoy)

	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, g: g, tmp: tmp, prefix: "vmf" + hex.EncodeToString(suffix) + "-", pids: map[string]int{}, inits: map[string]*exec.Cmd{}, pathDir: pathDir}
	f.start(fleetDir)
	t.Cleanup(func() { // before the hosts go (cleanups run last first)
		if t.Failed() {
			var b strings.Builder
			f.dumpLogs(&b)
			t.Log("service logs (the stand-in's /run/systemctl/*.log):\n" + b.String())
		}
	})
	packaged()
	t.Logf("built the packages, meshecho and the stand-ins and made the hosts in %s", time.Since(start).Round(time.Millisecond))

	outputs := map[string]string{}
	for _, b := range blocks {
		for _, h := range b.hosts {
			t0 := time.Now()
			out, err := f.exec(h, b)
			// The ERR trap names the block's line; name the document's.
			out = blockLineRE.ReplaceAllStringFunc(out, func(m string) string {
				n, _ := strconv.Atoi(blockLineRE.FindStringSubmatch(m)[1])
				return fmt.Sprintf("(%s:%d)", guide, b.line+n-1)
			})
			if err != nil {
				t.Fatalf("%s:%d: the block on %s failed: %v\n--- block:\n%s--- output:\n%s", guide, b.line, h, err, b.text, out)
			}
			t.Logf("%s:%d on %s (%s):\n%s", guide, b.line, h, time.Since(t0).Round(time.Millisecond), out)
			if b.id != "" {
				outputs[b.id+"@"+h] = out
			}
		}
	}
	return outputs
}

// TestVMFleetGuide runs docs/vm-fleet.md word for word (see the package
// comment for the hosts and the one substitution, systemctl) and checks
// what it must show: two VMs registered through their WorkloadGroup, a call
// between VMs over mTLS, and a canary VirtualService whose split moves from
// 90/10 to 50/50.
func TestVMFleetGuide(t *testing.T) {
	guide, hostAddrs := vmFleet.path, vmFleet.addrs
	start := time.Now()
	outputs := runGuide(t, vmFleet)

	// Two VMs registered through the WorkloadGroup, with their versions.
	reg, ok := outputs["registered@cp"]
	if !ok {
		t.Fatalf("%s has no block {host=cp id=registered}", guide)
	}
	for _, vm := range []string{"vm1", "vm2"} {
		name := `"name": "echo-` + hostAddrs[vm] + `"`
		if !strings.Contains(reg, name) {
			t.Errorf("the registration check shows no WorkloadEntry %s:\n%s", name, reg)
		}
	}
	for _, want := range []string{`"version": "v1"`, `"version": "v2"`, `"vmesh.io/workload-group": "echo"`, `"serviceAccount": "echo"`} {
		if !strings.Contains(reg, want) {
			t.Errorf("the registered WorkloadEntries lack %s:\n%s", want, reg)
		}
	}
	// A call from vm3 to the service on vm1 and vm2, over mTLS both ways.
	call, ok := outputs["call@vm3"]
	if !ok {
		t.Fatalf("%s has no block {host=vm3 id=call}", guide)
	}
	if !strings.Contains(call, "over mTLS, the servers saw the caller as spiffe://cluster.local/ns/fleet/sa/client") {
		t.Errorf("the call was not shown over mTLS with the client's identity:\n%s", call)
	}
	if got := answers(t, call); got["v1"]+got["v2"] == 0 {
		t.Errorf("the call output names no answer:\n%s", call)
	}
	// The canary: 90/10, then 50/50.
	share := func(id string) float64 {
		out, ok := outputs[id+"@vm3"]
		if !ok {
			t.Fatalf("%s has no block {host=vm3 id=%s}", guide, id)
		}
		got := answers(t, out)
		total := got["v1"] + got["v2"]
		if total < 100 {
			t.Fatalf("%s: %d calls answered, want at least 100:\n%s", id, total, out)
		}
		return float64(got["v2"]) / float64(total)
	}
	at10, at50 := share("split-90-10"), share("split-50-50")
	t.Logf("v2's share: %.3f at 90/10, %.3f at 50/50", at10, at50)
	// At least six standard deviations either side for 1,000 calls (p=0.1: 0.0095;
	// p=0.5: 0.016), which leaves room for the calls a new client makes to v1 alone
	// before its connection to v2 is ready.
	if at10 < 0.03 || at10 > 0.17 {
		t.Errorf("at 90/10 v2 answered %.1f%% of the calls", 100*at10)
	}
	if at50 < 0.40 || at50 > 0.60 {
		t.Errorf("at 50/50 v2 answered %.1f%% of the calls", 100*at50)
	}
	if at50-at10 < 0.2 {
		t.Errorf("the split did not move: v2 %.1f%% then %.1f%%", 100*at10, 100*at50)
	}
	t.Logf("the guide ran in %s", time.Since(start).Round(time.Millisecond))
}
