package capture

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// The iptables chains, in the nat table of iptables and ip6tables.
const (
	chainInbound    = ChainPrefix + "INBOUND"     // from PREROUTING
	chainInRedirect = ChainPrefix + "IN_REDIRECT" // → InboundPort
	chainOutput     = ChainPrefix + "OUTPUT"      // from OUTPUT
	chainRedirect   = ChainPrefix + "REDIRECT"    // → OutboundPort
)

var ownChains = []string{chainInbound, chainInRedirect, chainOutput, chainRedirect}

// iptablesRules returns the argument vectors (after "-t nat") that build
// vmesh's chains for one family, the rules istio-iptables writes with
// ISTIO_ replaced by VMESH_.
func iptablesRules(c Config, v6 bool) [][]string {
	var rules [][]string
	add := func(args ...string) { rules = append(rules, args) }
	pick := func(ps []netip.Prefix) []netip.Prefix {
		v4s, v6s := split(ps)
		if v6 {
			return v6s
		}
		return v4s
	}
	for _, ch := range ownChains {
		add("-N", ch)
	}
	add("-A", chainInRedirect, "-p", "tcp", "-j", "REDIRECT", "--to-ports", strconv.Itoa(int(c.InboundPort)))
	add("-A", chainRedirect, "-p", "tcp", "-j", "REDIRECT", "--to-ports", strconv.Itoa(int(c.OutboundPort)))

	// Inbound.
	for _, p := range c.excludedInbound() {
		add("-A", chainInbound, "-p", "tcp", "--dport", strconv.Itoa(int(p)), "-j", "RETURN")
	}
	if c.IncludeInboundPorts == nil {
		add("-A", chainInbound, "-p", "tcp", "-j", chainInRedirect)
	} else {
		for _, p := range uniquePorts(c.IncludeInboundPorts) {
			add("-A", chainInbound, "-p", "tcp", "--dport", strconv.Itoa(int(p)), "-j", chainInRedirect)
		}
	}

	// Outbound.
	localhost, envoySrc := "127.0.0.1/32", "127.0.0.6/32"
	if v6 {
		localhost, envoySrc = "::1/128", "::6/128"
	}
	add("-A", chainOutput, "-m", "mark", "--mark", fmt.Sprintf("0x%x", c.Mark), "-j", "RETURN")
	add("-A", chainOutput, "-o", "lo", "-s", envoySrc, "-j", "RETURN")
	for _, uid := range c.ProxyUIDs {
		add("-A", chainOutput, "-o", "lo", "-p", "tcp", "!", "-d", localhost, "-m", "owner", "--uid-owner", strconv.Itoa(int(uid)), "-j", chainInRedirect)
	}
	for _, uid := range c.ProxyUIDs {
		add("-A", chainOutput, "-m", "owner", "--uid-owner", strconv.Itoa(int(uid)), "-j", "RETURN")
	}
	for _, gid := range c.ProxyGIDs {
		add("-A", chainOutput, "-m", "owner", "--gid-owner", strconv.Itoa(int(gid)), "-j", "RETURN")
	}
	if c.CaptureDNS {
		v4s, v6s := splitAddrs(c.DNSServers)
		servers := v4s
		if v6 {
			servers = v6s
		}
		for _, proto := range []string{"udp", "tcp"} {
			redirect := []string{"-p", proto, "--dport", "53", "-j", "REDIRECT", "--to-ports", strconv.Itoa(int(c.DNSPort))}
			if len(c.DNSServers) == 0 {
				add(append([]string{"-A", chainOutput}, redirect...)...)
				continue
			}
			for _, s := range servers {
				add(append([]string{"-A", chainOutput, "-d", s.String()}, redirect...)...)
			}
		}
	}
	add("-A", chainOutput, "!", "-p", "tcp", "-j", "RETURN")
	add("-A", chainOutput, "-o", "lo", "-j", "RETURN")
	for _, p := range pick(loopback) {
		add("-A", chainOutput, "-d", p.String(), "-j", "RETURN")
	}
	for _, p := range uniquePorts(c.ExcludeOutboundPorts) {
		add("-A", chainOutput, "-p", "tcp", "--dport", strconv.Itoa(int(p)), "-j", "RETURN")
	}
	for _, p := range pick(c.ExcludeOutboundIPRanges) {
		add("-A", chainOutput, "-d", p.String(), "-j", "RETURN")
	}
	if c.IncludeOutboundIPRanges == nil {
		add("-A", chainOutput, "-j", chainRedirect)
	} else {
		for _, p := range pick(c.IncludeOutboundIPRanges) {
			add("-A", chainOutput, "-d", p.String(), "-j", chainRedirect)
		}
	}
	// The jumps: inbound TCP; all of OUTPUT, since DNS over UDP leaves
	// there too (the chain returns what it does not capture).
	add("-A", "PREROUTING", "-p", "tcp", "-j", chainInbound)
	add("-A", "OUTPUT", "-j", chainOutput)
	return rules
}

// iptablesInstall installs vmesh's chains for each family in one
// iptables-restore --noflush commit: declaring a chain creates it or, when
// an earlier run left it, flushes it, and the commit refills it, so the old
// rules apply until the new ones do. The jumps from PREROUTING and OUTPUT
// are added only when missing (and extra copies removed), so a reinstall
// never duplicates them.
func iptablesInstall(ctx context.Context, run runner, c Config) error {
	families := []struct {
		bin string
		v6  bool
	}{{"iptables", false}, {"ip6tables", true}}
	for _, f := range families {
		if f.v6 && !have(f.bin) {
			continue
		}
		existing, err := run(ctx, nil, f.bin, "-w", "-t", "nat", "-S")
		if err != nil {
			if !strings.Contains(string(existing), "Table does not exist") && !strings.Contains(string(existing), "can't initialize") {
				return err
			}
			existing = nil // no nat table yet: the commit makes it
		}
		input, extra := iptablesRestoreInput(iptablesRules(c, f.v6), string(existing))
		if _, err := run(ctx, []byte(input), f.bin+"-restore", "-w", "--noflush"); err != nil {
			return err
		}
		for _, r := range extra {
			if _, err := run(ctx, nil, f.bin, append([]string{"-w", "-t", "nat", "-D"}, r[1:]...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

// iptablesRestoreInput renders rules (argument vectors after "-t nat", as
// iptablesRules returns them) as one iptables-restore commit of the nat
// table, given the table's current rules (iptables -S): each "-N" becomes a
// chain declaration, and a rule appended to a built-in chain is left out
// when that chain has it already. It also returns the rules to delete: the
// copies of such a rule beyond the first.
func iptablesRestoreInput(rules [][]string, existing string) (string, [][]string) {
	have := map[string]int{}
	for _, line := range strings.Split(existing, "\n") {
		if strings.HasPrefix(line, "-A ") {
			have[strings.Join(strings.Fields(line), " ")]++
		}
	}
	var b strings.Builder
	var extra [][]string
	b.WriteString("*nat\n")
	for _, r := range rules {
		if r[0] == "-N" {
			b.WriteString(":" + r[1] + " - [0:0]\n")
		}
	}
	for _, r := range rules {
		switch {
		case r[0] == "-N":
			continue
		case r[0] == "-A" && !strings.HasPrefix(r[1], ChainPrefix):
			if n := have[strings.Join(r, " ")]; n > 0 {
				for range n - 1 {
					extra = append(extra, r)
				}
				continue
			}
		}
		b.WriteString(strings.Join(r, " ") + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String(), extra
}

// iptablesRemove deletes the jumps into vmesh's chains, then the chains.
func iptablesRemove(ctx context.Context, run runner, bin string) error {
	out, err := run(ctx, nil, bin, "-w", "-t", "nat", "-S")
	if err != nil {
		if strings.Contains(string(out), "Table does not exist") || strings.Contains(string(out), "can't initialize") {
			return nil
		}
		return err
	}
	var chains []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch {
		case f[0] == "-N" && strings.HasPrefix(f[1], ChainPrefix):
			chains = append(chains, f[1])
		case f[0] == "-A" && !strings.HasPrefix(f[1], ChainPrefix) && jumpsToOwn(f):
			// "-A OUTPUT ... -j VMESH_OUTPUT" → "-D OUTPUT ..."
			f[0] = "-D"
			if _, err := run(ctx, nil, bin, append([]string{"-w", "-t", "nat"}, f...)...); err != nil {
				return err
			}
		}
	}
	for _, ch := range chains {
		if _, err := run(ctx, nil, bin, "-w", "-t", "nat", "-F", ch); err != nil {
			return err
		}
	}
	for _, ch := range chains {
		if _, err := run(ctx, nil, bin, "-w", "-t", "nat", "-X", ch); err != nil {
			return err
		}
	}
	return nil
}

func jumpsToOwn(f []string) bool {
	for i := 0; i+1 < len(f); i++ {
		if (f[i] == "-j" || f[i] == "-g") && strings.HasPrefix(f[i+1], ChainPrefix) {
			return true
		}
	}
	return false
}
