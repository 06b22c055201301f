package capture

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// nftRuleset renders the table "inet vmesh" as one nft transaction (it
// replaces a table left behind). The chains, in the order istio-iptables
// builds its own:
//
//	prerouting (nat, dstnat): TCP → inbound
//	inbound: excluded ports return; captured ports → redirect to :InboundPort
//	output (nat, -100): marked, Envoy-local and loopback traffic return;
//	  DNS → redirect to :DNSPort; excluded ports/ranges return; included
//	  ranges → redirect to :OutboundPort
func nftRuleset(c Config) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("add table inet %s", NFTTable)
	w("delete table inet %s", NFTTable)
	w("table inet %s {", NFTTable)

	// Inbound.
	w("  chain prerouting {")
	w("    type nat hook prerouting priority dstnat; policy accept;")
	if c.IncludeInboundPorts == nil || len(c.IncludeInboundPorts) > 0 {
		w("    meta l4proto tcp jump inbound")
	}
	w("  }")
	w("  chain inbound {")
	w("    tcp dport %s return", nftSet(ports(c.excludedInbound())))
	if c.IncludeInboundPorts == nil {
		w("    meta l4proto tcp redirect to :%d", c.InboundPort)
	} else if len(c.IncludeInboundPorts) > 0 {
		w("    tcp dport %s redirect to :%d", nftSet(ports(uniquePorts(c.IncludeInboundPorts))), c.InboundPort)
	}
	w("  }")

	// Outbound.
	w("  chain output {")
	w("    type nat hook output priority -100; policy accept;")
	w("    meta mark 0x%x return", c.Mark)
	// Envoy's inbound passthrough source, and Envoy calling its own VM's
	// address through loopback: back to inbound capture (istio-iptables).
	w("    oifname \"lo\" ip saddr 127.0.0.6 return")
	w("    oifname \"lo\" ip6 saddr ::6 return")
	for _, uid := range c.ProxyUIDs {
		w("    oifname \"lo\" meta l4proto tcp ip daddr != 127.0.0.1 meta skuid %d redirect to :%d", uid, c.InboundPort)
		w("    oifname \"lo\" meta l4proto tcp ip6 daddr != ::1 meta skuid %d redirect to :%d", uid, c.InboundPort)
	}
	for _, uid := range c.ProxyUIDs {
		w("    meta skuid %d return", uid)
	}
	for _, gid := range c.ProxyGIDs {
		w("    meta skgid %d return", gid)
	}
	if c.CaptureDNS {
		v4, v6 := splitAddrs(c.DNSServers)
		switch {
		case len(c.DNSServers) == 0:
			w("    meta l4proto { tcp, udp } th dport 53 redirect to :%d", c.DNSPort)
		default:
			if len(v4) > 0 {
				w("    ip daddr %s meta l4proto { tcp, udp } th dport 53 redirect to :%d", nftSet(addrs(v4)), c.DNSPort)
			}
			if len(v6) > 0 {
				w("    ip6 daddr %s meta l4proto { tcp, udp } th dport 53 redirect to :%d", nftSet(addrs(v6)), c.DNSPort)
			}
		}
	}
	w("    meta l4proto != tcp return")
	w("    oifname \"lo\" return")
	l4, l6 := split(loopback)
	w("    ip daddr %s return", nftSet(prefixes(l4)))
	w("    ip6 daddr %s return", nftSet(prefixes(l6)))
	if len(c.ExcludeOutboundPorts) > 0 {
		w("    tcp dport %s return", nftSet(ports(uniquePorts(c.ExcludeOutboundPorts))))
	}
	e4, e6 := split(c.ExcludeOutboundIPRanges)
	if len(e4) > 0 {
		w("    ip daddr %s return", nftSet(prefixes(e4)))
	}
	if len(e6) > 0 {
		w("    ip6 daddr %s return", nftSet(prefixes(e6)))
	}
	if c.IncludeOutboundIPRanges == nil {
		w("    meta l4proto tcp redirect to :%d", c.OutboundPort)
	} else {
		i4, i6 := split(c.IncludeOutboundIPRanges)
		if len(i4) > 0 {
			w("    ip daddr %s meta l4proto tcp redirect to :%d", nftSet(prefixes(i4)), c.OutboundPort)
		}
		if len(i6) > 0 {
			w("    ip6 daddr %s meta l4proto tcp redirect to :%d", nftSet(prefixes(i6)), c.OutboundPort)
		}
	}
	w("  }")
	w("}")
	return b.String()
}

func nftSet(items []string) string {
	if len(items) == 1 {
		return items[0]
	}
	return "{ " + strings.Join(items, ", ") + " }"
}

func ports(ps []uint16) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = strconv.Itoa(int(p))
	}
	return out
}

func prefixes(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Masked().String()
	}
	return out
}

func addrs(as []netip.Addr) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}
