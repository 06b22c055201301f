// Package capture installs the VM's traffic redirection, as istio-iptables
// does for a pod or an Istio VM: outbound TCP to Envoy's port 15001, inbound
// TCP to 15006, DNS (UDP and TCP port 53) to the agent's DNS proxy on 15053,
// excluding the traffic of Envoy's own UID/GID, loopback, the control plane's
// address and what the include/exclude settings say (Istio's names:
// includeOutboundIPRanges, excludeOutboundIPRanges, includeInboundPorts,
// excludeInboundPorts, excludeOutboundPorts).
//
// Every rule lives in objects vmesh owns, so removal is exact and needs no
// state: with nftables the table "inet vmesh"; with iptables the nat chains
// VMESH_* plus one jump from PREROUTING and one from OUTPUT (in iptables and
// ip6tables). Remove deletes exactly those, whichever backend put them there,
// which is what `vmesh agent cleanup` runs when the operator takes the VM out
// of the mesh. The rules outlive the agent (a stop, a restart, a crash): while
// it and Envoy are down, captured traffic goes to ports where nothing
// listens and fails, as with Istio; Install replaces them in place.
//
// The system binaries do the work (nft, else iptables/ip6tables), run with
// argument vectors; nft reads its one-transaction ruleset on stdin, rendered
// here from typed values only (addresses, ports, ids), never from a shell
// string.
package capture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// Istio's port numbers and ids.
const (
	DefaultOutboundPort = 15001
	DefaultInboundPort  = 15006
	DefaultDNSPort      = 15053
	// DefaultProxyUID and DefaultProxyGID are the user and group Envoy
	// runs as (istio-proxy, 1337); their traffic is never captured.
	DefaultProxyUID = 1337
	DefaultProxyGID = 1337
	// DefaultMark marks packets never captured: the agent sets it on its
	// DNS proxy's upstream sockets (SO_MARK), so forwarding to the real
	// resolvers on port 53 does not loop back into the proxy.
	DefaultMark = 0x539
)

// DefaultExcludeInboundPorts are the inbound ports never captured: the
// agent's and Envoy's own (15020 agent, 15021 health, 15090 Envoy
// Prometheus), as Istio's injector adds them.
var DefaultExcludeInboundPorts = []uint16{15020, 15021, 15090}

// Modes.
const (
	ModeAuto     = "auto"
	ModeNFT      = "nftables"
	ModeIPTables = "iptables"
)

// Names of what vmesh owns.
const (
	NFTTable    = "vmesh" // family inet
	ChainPrefix = "VMESH_"
)

// Config says what to capture. The zero value of a field takes the default
// named in its comment; use Defaults() for a complete value.
type Config struct {
	// Mode is ModeAuto (nftables when the nft binary works, else
	// iptables), ModeNFT or ModeIPTables.
	Mode string

	// OutboundPort (15001), InboundPort (15006): Envoy's capture ports.
	OutboundPort, InboundPort uint16
	// DNSPort is the agent's DNS proxy (15053); DNS to port 53 (UDP and
	// TCP) goes there. CaptureDNS false leaves DNS alone.
	DNSPort    uint16
	CaptureDNS bool
	// DNSServers, when set, limits DNS capture to queries for these
	// resolvers (Istio captures only the resolv.conf nameservers); empty
	// captures DNS to any address.
	DNSServers []netip.Addr

	// ProxyUIDs and ProxyGIDs (Envoy's, 1337) are never captured.
	ProxyUIDs, ProxyGIDs []uint32
	// Mark (DefaultMark) is never captured.
	Mark uint32

	// IncludeOutboundIPRanges (includeOutboundIPRanges,
	// ISTIO_SERVICE_CIDR): outbound TCP to these is captured; nil or
	// AllOutbound = every address ("*"), an empty non-nil slice = none.
	IncludeOutboundIPRanges []netip.Prefix
	// ExcludeOutboundIPRanges (excludeOutboundIPRanges) win over the
	// include list. The control plane's address belongs here (the agent
	// adds it).
	ExcludeOutboundIPRanges []netip.Prefix
	// ExcludeOutboundPorts (excludeOutboundPorts) are TCP ports never
	// captured outbound.
	ExcludeOutboundPorts []uint16
	// IncludeInboundPorts (includeInboundPorts): nil = every port ("*"),
	// an empty non-nil slice = none.
	IncludeInboundPorts []uint16
	// ExcludeInboundPorts (excludeInboundPorts); DefaultExcludeInboundPorts
	// and the capture ports are always excluded too.
	ExcludeInboundPorts []uint16
}

// AllOutbound is IncludeOutboundIPRanges "*".
var AllOutbound []netip.Prefix = nil

// Defaults returns Istio's defaults: capture all outbound and inbound TCP
// and DNS, exclude UID/GID 1337.
func Defaults() Config {
	return Config{Mode: ModeAuto, OutboundPort: DefaultOutboundPort, InboundPort: DefaultInboundPort,
		DNSPort: DefaultDNSPort, CaptureDNS: true, ProxyUIDs: []uint32{DefaultProxyUID}, ProxyGIDs: []uint32{DefaultProxyGID}, Mark: DefaultMark}
}

func (c Config) withDefaults() Config {
	def := func(p *uint16, v uint16) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.OutboundPort, DefaultOutboundPort)
	def(&c.InboundPort, DefaultInboundPort)
	def(&c.DNSPort, DefaultDNSPort)
	if c.Mark == 0 {
		c.Mark = DefaultMark
	}
	if c.Mode == "" {
		c.Mode = ModeAuto
	}
	return c
}

// Validate checks the mode and the ranges.
func (c Config) Validate() error {
	switch c.Mode {
	case "", ModeAuto, ModeNFT, ModeIPTables:
	default:
		return fmt.Errorf("capture: mode %q: want %s, %s or %s", c.Mode, ModeAuto, ModeNFT, ModeIPTables)
	}
	for _, p := range append(slices.Clone(c.IncludeOutboundIPRanges), c.ExcludeOutboundIPRanges...) {
		if !p.IsValid() {
			return fmt.Errorf("capture: invalid IP range %v", p)
		}
	}
	return nil
}

// ParsePrefixes reads Istio's comma-separated CIDR list
// ("10.0.0.0/8,fd00::/8"); "*" returns AllOutbound (nil) and "" an empty
// non-nil slice. A bare address means a /32 (/128).
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if s == "*" {
		return AllOutbound, nil
	}
	out := []netip.Prefix{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("capture: IP range %q: %w", f, err)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("capture: IP range %q: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// ParsePorts reads Istio's comma-separated port list; "*" returns nil (all)
// and "" an empty non-nil slice.
func ParsePorts(s string) ([]uint16, error) {
	s = strings.TrimSpace(s)
	if s == "*" {
		return nil, nil
	}
	out := []uint16{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.ParseUint(f, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("capture: port %q: want 1-65535", f)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

// runner runs one command with optional stdin.
type runner func(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)

func run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Capture is installed redirection; Remove takes it away.
type Capture struct {
	mode string
	log  *slog.Logger
}

// Mode returns the backend in use (ModeNFT or ModeIPTables).
func (c *Capture) Mode() string { return c.mode }

// Install installs cfg's redirection, replacing what vmesh put there before
// (the rules an agent leaves when it stops or crashes, so that traffic fails
// closed meanwhile) without a moment with no rules: the nftables table is
// replaced in one transaction, the iptables chains are flushed and refilled
// in one iptables-restore commit per family, and the jumps into them are
// added only when missing, so installing again never duplicates a rule.
// Only then are the other backend's rules (a change of backend) removed.
// On an error the rules in place are left as they are: the traffic stays
// captured.
func Install(ctx context.Context, cfg Config, logger *slog.Logger) (*Capture, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	mode, err := detect(ctx, cfg.Mode)
	if err != nil {
		return nil, err
	}
	switch mode {
	case ModeNFT:
		// The ruleset adds, deletes and defines the table in one
		// transaction: the old rules stay until the new ones are in.
		if _, err := run(ctx, []byte(nftRuleset(cfg)), "nft", "-f", "-"); err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		for _, bin := range []string{"iptables", "ip6tables"} {
			if have(bin) {
				if err := iptablesRemove(ctx, run, bin); err != nil {
					return nil, fmt.Errorf("capture: removing the iptables rules of an earlier run: %w", err)
				}
			}
		}
	case ModeIPTables:
		if err := iptablesInstall(ctx, run, cfg); err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		if have("nft") && nftWorks(ctx) {
			if _, err := run(ctx, []byte("add table inet "+NFTTable+"\ndelete table inet "+NFTTable+"\n"), "nft", "-f", "-"); err != nil {
				return nil, fmt.Errorf("capture: removing the nftables rules of an earlier run: %w", err)
			}
		}
	}
	if err := addPassthroughV6(ctx, logger); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	logger.Info("traffic capture installed", "mode", mode, "outbound", cfg.OutboundPort, "inbound", cfg.InboundPort, "dns", cfg.CaptureDNS)
	return &Capture{mode: mode, log: logger}, nil
}

// Remove takes the capture away. The agent never calls it when it stops:
// the rules outlive it so that captured traffic fails while it is down;
// `vmesh agent cleanup` (the package's removal runs it) takes the VM out of
// the mesh.
func (c *Capture) Remove(ctx context.Context) error {
	err := Remove(ctx, c.log)
	if err == nil {
		c.log.Info("traffic capture removed", "mode", c.mode)
	}
	return err
}

// Remove deletes every rule, chain and table of vmesh's, by either backend;
// it is a no-op when there are none.
func Remove(ctx context.Context, logger *slog.Logger) error {
	var errs []error
	if have("nft") {
		// Creating it first makes the delete succeed when it is absent,
		// in one transaction.
		if _, err := run(ctx, []byte("add table inet "+NFTTable+"\ndelete table inet "+NFTTable+"\n"), "nft", "-f", "-"); err != nil && nftWorks(ctx) {
			errs = append(errs, err)
		}
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		if have(bin) {
			if err := iptablesRemove(ctx, run, bin); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := removePassthroughV6(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("capture: removing rules: %w", err)
	}
	return nil
}

// PassthroughV6 is the source address of Envoy's connections to its own
// VM's IPv6 addresses (Istio's ::6, where its inbound clusters bind; the
// rules let it through as they let 127.0.0.6 through). Unlike 127.0.0.6
// it is no address of the loopback interface until one puts it there:
// Install adds it to lo when the VM has IPv6, Remove takes it away.
const PassthroughV6 = "::6/128"

// ipv6On reports whether the loopback interface has IPv6.
func ipv6On() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/lo/disable_ipv6")
	return err == nil && strings.TrimSpace(string(b)) == "0"
}

// addPassthroughV6 puts PassthroughV6 on lo (again, if it is there). A
// VM without iproute2's ip keeps its IPv4 capture, with a warning: Envoy's
// inbound connections to its IPv6 addresses then fail.
func addPassthroughV6(ctx context.Context, logger *slog.Logger) error {
	if !ipv6On() {
		return nil
	}
	if !have("ip") {
		logger.Warn("traffic capture: no ip binary (iproute2) to put "+PassthroughV6+" on lo; Envoy cannot forward inbound IPv6 connections to the workload", "address", PassthroughV6)
		return nil
	}
	_, err := run(ctx, nil, "ip", "-6", "addr", "replace", PassthroughV6, "dev", "lo", "nodad")
	return err
}

// removePassthroughV6 takes PassthroughV6 off lo when it is there.
func removePassthroughV6(ctx context.Context) error {
	if !ipv6On() || !have("ip") {
		return nil
	}
	out, err := run(ctx, nil, "ip", "-6", "addr", "show", "dev", "lo")
	if err != nil || !strings.Contains(string(out), " "+PassthroughV6+" ") {
		return err
	}
	_, err = run(ctx, nil, "ip", "-6", "addr", "del", PassthroughV6, "dev", "lo")
	return err
}

func have(bin string) bool {
	_, err := exec.LookPath(bin)
	return err == nil
}

func nftWorks(ctx context.Context) bool {
	_, err := run(ctx, nil, "nft", "list", "tables")
	return err == nil
}

// detect picks the backend.
func detect(ctx context.Context, mode string) (string, error) {
	switch mode {
	case ModeNFT:
		if !have("nft") {
			return "", errors.New("capture: nftables mode: no nft binary on PATH (install nftables)")
		}
		return ModeNFT, nil
	case ModeIPTables:
		if !have("iptables") {
			return "", errors.New("capture: iptables mode: no iptables binary on PATH (install iptables)")
		}
		return ModeIPTables, nil
	}
	if have("nft") && nftWorks(ctx) {
		return ModeNFT, nil
	}
	if have("iptables") {
		return ModeIPTables, nil
	}
	return "", errors.New("capture: neither nft nor iptables found on PATH (install nftables or iptables)")
}

// excludedInbound returns the inbound ports never captured, sorted.
func (c Config) excludedInbound() []uint16 {
	ps := append([]uint16{c.OutboundPort, c.InboundPort, 15008}, DefaultExcludeInboundPorts...)
	ps = append(ps, c.ExcludeInboundPorts...)
	slices.Sort(ps)
	return slices.Compact(ps)
}

// loopback ranges are never captured outbound (but see the Envoy-to-self rule).
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// split separates IPv4 from IPv6 ranges, dropping ranges inside another
// (nft refuses overlapping intervals in one set).
func split(ps []netip.Prefix) (v4, v6 []netip.Prefix) {
	for _, p := range ps {
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		if p.Addr().Is4() {
			v4 = append(v4, p.Masked())
		} else {
			v6 = append(v6, p.Masked())
		}
	}
	return outermost(v4), outermost(v6)
}

func outermost(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range ps {
		if len(out) > 0 && out[len(out)-1].Bits() <= p.Bits() && out[len(out)-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

func uniquePorts(ps []uint16) []uint16 {
	ps = slices.Clone(ps)
	slices.Sort(ps)
	return slices.Compact(ps)
}

func splitAddrs(as []netip.Addr) (v4, v6 []netip.Addr) {
	for _, a := range as {
		if a.Unmap().Is4() {
			v4 = append(v4, a.Unmap())
		} else {
			v6 = append(v6, a)
		}
	}
	return v4, v6
}

// Linux capability numbers (linux/capability.h).
const (
	capSetGID   = 6
	capSetUID   = 7
	capNetAdmin = 12
)

// Permitted reports whether this process may install capture
// (CAP_NET_ADMIN) and, with envoy, start Envoy as the proxy UID/GID its
// rules exclude (CAP_SETUID, CAP_SETGID): without that, Envoy's own traffic
// would be captured back into Envoy. The error names what is missing.
func Permitted(envoy bool) error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("capture: reading capabilities: %w", err)
	}
	var eff uint64
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			if eff, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				return fmt.Errorf("capture: capabilities %q: %w", v, err)
			}
		}
	}
	need := map[int]string{capNetAdmin: "CAP_NET_ADMIN"}
	if envoy {
		need[capSetUID], need[capSetGID] = "CAP_SETUID", "CAP_SETGID"
	}
	var missing []string
	for _, c := range []int{capNetAdmin, capSetUID, capSetGID} {
		if name, ok := need[c]; ok && eff&(1<<c) == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("capture: the agent lacks %s (run it as root, or grant them in its systemd unit)", strings.Join(missing, ", "))
	}
	return nil
}
