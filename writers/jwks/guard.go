package jwks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MaxRedirects is how many redirects one fetch follows.
const MaxRedirects = 3

// maxHeaderBytes bounds a key server's response headers.
const maxHeaderBytes = 64 << 10

// ErrAddressRefused is wrapped by the error of a fetch that would have
// connected to an address the policy refuses.
var ErrAddressRefused = errors.New("address refused")

// special is a range of addresses that are not globally reachable (IANA's
// special-purpose registries): key sets are not fetched from them unless
// Settings.AllowedCIDRs names them.
type special struct {
	prefix netip.Prefix
	what   string
}

// nonGlobal lists the ranges refused by default. IPv4-mapped IPv6
// addresses are checked as the IPv4 address they map; NAT64 and 6to4
// addresses as the IPv4 address they embed (see embedded).
var nonGlobal = []special{
	{netip.MustParsePrefix("0.0.0.0/8"), "a \"this network\" address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (CGNAT) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol assignment"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a 6to4 relay address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible or reserved IPv6 address"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "an IPv4-translated address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
	{netip.MustParsePrefix("2001::/23"), "an IETF protocol assignment"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("3fff::/20"), "a documentation address"},
	{netip.MustParsePrefix("5f00::/16"), "a segment-routing address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local (private) address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// policy decides which addresses the fetcher connects to: never an
// unspecified, multicast or broadcast address; never one in Blocked;
// one in Allowed; else only a globally reachable one.
type policy struct {
	allowed []netip.Prefix
	blocked []netip.Prefix
}

// normalise returns the prefixes masked, an IPv4-mapped IPv6 prefix as
// the IPv4 prefix it maps.
func normalise(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out
}

// embedded returns the IPv4 address a NAT64 (64:ff9b::/96) or 6to4
// (2002::/16) address carries.
func embedded(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// refusal says why the fetcher must not connect to a; "" when it may.
func (p policy) refusal(a netip.Addr) string {
	a = a.WithZone("").Unmap()
	switch {
	case !a.IsValid():
		return "not an IP address"
	case a.IsUnspecified():
		return fmt.Sprintf("%s is unspecified (it reaches this host): never fetched from", a)
	case a.IsMulticast():
		return fmt.Sprintf("%s is a multicast address: never fetched from", a)
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Sprintf("%s is the broadcast address: never fetched from", a)
	}
	for _, b := range p.blocked {
		if b.Contains(a) {
			return fmt.Sprintf("%s is in the blocked range %s (jwksBlockedCIDRs)", a, b)
		}
	}
	for _, ok := range p.allowed {
		if ok.Contains(a) {
			return ""
		}
	}
	if v4, ok := embedded(a); ok {
		if r := p.refusal(v4); r != "" {
			return fmt.Sprintf("%s embeds %s, and %s", a, v4, r)
		}
		return ""
	}
	what := ""
	for _, s := range nonGlobal {
		if s.prefix.Contains(a) {
			what = s.what
			break
		}
	}
	if what == "" && !a.IsGlobalUnicast() {
		what = "not a global unicast address"
	}
	if what == "" {
		return ""
	}
	return fmt.Sprintf("%s is %s: key sets are fetched from such addresses only if jwksAllowedCIDRs (--jwks-allowed-cidr) names them", a, what)
}

// check returns an error wrapping ErrAddressRefused when a is refused.
func (p policy) check(a netip.Addr) error {
	if r := p.refusal(a); r != "" {
		return fmt.Errorf("%w: %s", ErrAddressRefused, r)
	}
	return nil
}

// guardedClient returns a copy of c whose transport connects only to the
// addresses p allows: it resolves the host itself, refuses the connection
// if any of its addresses is refused, dials the checked addresses, and
// checks again the address each socket connects to (Dialer.Control). It
// uses no proxy (a proxy would connect on its behalf, unchecked), follows
// at most MaxRedirects redirects, never from https to http, and bounds
// the response headers.
func guardedClient(c *http.Client, p policy) (*http.Client, error) {
	var t *http.Transport
	switch base := c.Transport.(type) {
	case nil:
		t = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		t = base.Clone()
	default:
		return nil, fmt.Errorf("jwks: the fetch client needs an *http.Transport, it has a %T", c.Transport)
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("jwks: dialing %q: %w", address, err)
			}
			return p.check(ap.Addr())
		}}
	t.Proxy = nil
	t.OnProxyConnectResponse = nil
	t.DialTLSContext = nil
	//lint:ignore SA1019 cleared so that no dial bypasses the check
	t.DialTLS = nil
	//lint:ignore SA1019 cleared so that no dial bypasses the check
	t.Dial = nil
	t.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		return dialChecked(ctx, dialer, p, network, address)
	}
	t.MaxResponseHeaderBytes = maxHeaderBytes
	out := *c
	out.Transport = t
	out.Jar = nil
	out.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > MaxRedirects {
			return fmt.Errorf("stopped after %d redirects", MaxRedirects)
		}
		if s := req.URL.Scheme; s != "http" && s != "https" {
			return errors.New("redirect to a scheme other than http or https")
		}
		if via[len(via)-1].URL.Scheme == "https" && req.URL.Scheme == "http" {
			return errors.New("redirect from https to http refused")
		}
		return nil
	}
	return &out, nil
}

// dialChecked resolves address's host, refuses it if any of its addresses
// is refused, then dials the checked addresses in turn.
func dialChecked(ctx context.Context, d *net.Dialer, p policy, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("jwks: dialing %q: %w", address, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("jwks: dialing %q: port is not a number: %w", address, err)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ipNet := "ip"
		switch {
		case strings.HasSuffix(network, "4"):
			ipNet = "ip4"
		case strings.HasSuffix(network, "6"):
			ipNet = "ip6"
		}
		addrs, err = net.DefaultResolver.LookupNetIP(ctx, ipNet, host)
		if err != nil {
			return nil, fmt.Errorf("jwks: resolving %q: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("jwks: %q resolves to no address", host)
		}
	}
	for _, a := range addrs {
		if err := p.check(a); err != nil {
			if a.String() != host {
				return nil, fmt.Errorf("%s resolves to %w", host, err)
			}
			return nil, err
		}
	}
	var errs []error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(n)).String())
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}
