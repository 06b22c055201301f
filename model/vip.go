package model

import (
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Automatic VIPs.
//
// A service without addresses gets one VIP from 240.240.0.0/16 (Istio's
// range), except NONE-resolution and wildcard hosts. The rule keeps a host's
// VIP a function of that host alone unless another host collides with it:
//
//   - Each host has its own probe sequence: slot_i = FNV-1a("host#i") mod 65534,
//     mapped to 240.240.0.1 .. 240.240.255.254.
//   - Assignment runs in rounds i = 0, 1, 2, ... Every unassigned host
//     proposes slot_i. A proposed slot already taken (by an explicit address
//     or an earlier round) is lost; a slot proposed by several hosts in one
//     round goes to the lexicographically smallest host. Losers go on to the
//     next round.
//
// Consequences: the result depends only on the set of hosts (stable across
// restarts and independent of file or namespace order); adding or removing a
// host changes another host's VIP only when the two hash to the same slot
// (probability about n/65534 per added host, with n hosts already in the
// slot's round), and never shifts unrelated hosts the way linear probing in
// sorted order does. Users who need a VIP that never moves set
// ServiceEntry.addresses.

const (
	vipBase  = 0xF0F00000 // 240.240.0.0
	vipSlots = 65534      // .0.1 .. .255.254
)

// vipSlot returns host's probe slot for a round, 1..65534.
func vipSlot(host string, round int) uint32 {
	h := fnv.New64a()
	h.Write([]byte(host))
	h.Write([]byte{'#'})
	h.Write([]byte(strconv.Itoa(round)))
	return uint32(h.Sum64()%vipSlots) + 1
}

// vipString renders slot as an address in 240.240.0.0/16.
func vipString(slot uint32) string {
	v := vipBase + slot
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}

// AutoVIPs assigns VIPs to hosts by the rule above; taken holds addresses
// already in use. It returns host -> VIP.
func AutoVIPs(hosts []string, taken map[string]bool) map[string]string {
	used := make(map[uint32]bool, len(hosts)+len(taken))
	for a := range taken {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
			b := ip.As4()
			if b[0] == 240 && b[1] == 240 {
				used[uint32(b[2])<<8|uint32(b[3])] = true
			}
		}
	}
	pending := slices.Clone(hosts)
	slices.Sort(pending)
	pending = slices.Compact(pending)
	out := make(map[string]string, len(pending))
	for round := 0; len(pending) > 0 && round < 4*vipSlots; round++ {
		proposals := make(map[uint32]string, len(pending))
		var next []string
		for _, h := range pending { // sorted: the first proposer of a slot is the smallest host
			s := vipSlot(h, round)
			if used[s] {
				next = append(next, h)
				continue
			}
			if _, ok := proposals[s]; ok {
				next = append(next, h)
				continue
			}
			proposals[s] = h
		}
		for s, h := range proposals {
			used[s] = true
			out[h] = vipString(s)
		}
		pending = next
	}
	return out
}

// assignVIPs gives services without addresses their automatic VIP.
func assignVIPs(services []*Service) {
	taken := make(map[string]bool)
	var hosts []string
	for _, svc := range services {
		for _, a := range svc.Addresses {
			taken[a] = true
		}
		if needsVIP(svc) {
			hosts = append(hosts, svc.Hostname)
		}
	}
	if len(hosts) == 0 {
		return
	}
	vips := AutoVIPs(hosts, taken)
	for _, svc := range services {
		if needsVIP(svc) {
			if v, ok := vips[svc.Hostname]; ok {
				svc.Addresses = []string{v}
				svc.AutoAddress = true
			}
		}
	}
}

func needsVIP(svc *Service) bool {
	return len(svc.Addresses) == 0 && svc.Resolution != ResolutionNone && !strings.HasPrefix(svc.Hostname, "*")
}
