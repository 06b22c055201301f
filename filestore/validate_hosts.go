package filestore

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

// Host, label, port and duration rules as Istio's validation applies them
// (pkg/config/validation and its agent package): what istioctl validate
// and Istio's admission webhook accept, checked by the differential test
// in istio_parity_test.go.

var (
	// Istio's DNS-1123 label allows upper case.
	istioLabelRE    = regexp.MustCompile(`^[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?$`)
	wildcardLabelRE = regexp.MustCompile(`^(\*|(\*|\*-)?[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)$`)
	// RFC 7230 token characters: what a header name may hold.
	probeHeaderRE = regexp.MustCompile(`^[-A-Za-z0-9]+$`)
	headerNameRE  = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9a-zA-Z]+$")
)

func isIstioLabel(s string) bool    { return len(s) <= 63 && istioLabelRE.MatchString(s) }
func isWildcardLabel(s string) bool { return len(s) <= 63 && wildcardLabelRE.MatchString(s) }

func domainPreconditions(d string) string {
	if len(d) > 255 {
		return fmt.Sprintf("domain name %s is longer than 255 characters", quote(d))
	}
	if d == "" {
		return "host is required"
	}
	return ""
}

// dnsLabels checks the labels of a domain: each a DNS-1123 label, a top
// level domain that is not all digits, and an optional trailing dot.
func dnsLabels(d string) string {
	parts := strings.Split(d, ".")
	if _, err := strconv.Atoi(parts[len(parts)-1]); err == nil {
		return fmt.Sprintf("%s is not a valid domain name (the top-level domain %s is all digits)", quote(d), quote(parts[len(parts)-1]))
	}
	for i, l := range parts {
		if i == len(parts)-1 && l == "" {
			return ""
		}
		if !isIstioLabel(l) {
			return fmt.Sprintf("%s is not a valid domain name (label %s)", quote(d), quote(l))
		}
	}
	return ""
}

// checkFQDN validates a domain name without wildcards.
func checkFQDN(d string) string {
	if msg := domainPreconditions(d); msg != "" {
		return msg
	}
	return dnsLabels(d)
}

// checkWildcardDomain validates a domain name whose first label may be a
// wildcard ("*", "*.x.com", or a partial "*x.com" / "*-x.com").
func checkWildcardDomain(d string) string {
	if msg := domainPreconditions(d); msg != "" {
		return msg
	}
	first, rest, more := strings.Cut(d, ".")
	if !isWildcardLabel(first) {
		return fmt.Sprintf("%s is not a valid domain name (label %s)", quote(d), quote(first))
	}
	if more {
		return dnsLabels(rest)
	}
	return ""
}

// checkGatewayDomain is checkWildcardDomain for a VirtualService bound to
// gateways; an SNI host may also be an auto-generated outbound_.PORT_._.HOST.
func checkGatewayDomain(sni bool, d string) string {
	if msg := domainPreconditions(d); msg != "" {
		return msg
	}
	if sni && strings.HasPrefix(d, "outbound_") {
		parts := strings.Split(d, "_")
		if len(parts) < 4 {
			return fmt.Sprintf("domain name %s must have the form outbound_.<port>_._.<hostname>", quote(d))
		}
		port, hostname := strings.Trim(parts[1], "."), strings.Trim(parts[3], ".")
		if parts[0] != "outbound" || !strings.ContainsAny(port, "0123456789") || !strings.ContainsAny(strings.ToLower(hostname), "abcdefghijklmnopqrstuvwxyz") {
			return fmt.Sprintf("domain name %s must have the form outbound_.<port>_._.<hostname>", quote(d))
		}
		return ""
	}
	return checkWildcardDomain(d)
}

func checkPartialWildcard(h string) string {
	if strings.Contains(h, "*") && h != "*" && !strings.HasPrefix(h, "*.") {
		return fmt.Sprintf("partial wildcard %s is not allowed here", quote(h))
	}
	return ""
}

// checkScopedHostPart validates the host of a Sidecar egress or Gateway
// server host: a FQDN (no short names), "*", a leading "*." wildcard, or
// for gateways an IP address.
func checkScopedHostPart(h string, gateway bool) string {
	if h != "*" && !strings.Contains(h, ".") {
		return fmt.Sprintf("host %s: short names (non FQDN) are not allowed", quote(h))
	}
	if msg := checkWildcardDomain(h); msg != "" && !(gateway && isIP(h)) {
		return msg
	}
	return checkPartialWildcard(h)
}

// checkScopedHost validates a "namespace/host" Sidecar egress or Gateway
// server host. Sidecars allow "*", ".", a namespace, each optionally
// "~"-prefixed to exclude it; gateways allow "*", "." or a namespace, and
// a plain host.
func checkScopedHost(h string, gateway bool) string {
	ns, name, ok := strings.Cut(h, "/")
	if !ok {
		if gateway {
			return checkScopedHostPart(h, true)
		}
		return fmt.Sprintf("host %s must be namespace/dnsName", quote(h))
	}
	if ns == "" || name == "" {
		return fmt.Sprintf("host %s: namespace and dnsName cannot be empty", quote(h))
	}
	if gateway {
		if ns != "*" && ns != "." && !isIstioLabel(ns) {
			return fmt.Sprintf("host %s: invalid namespace %s in a gateway", quote(h), quote(ns))
		}
	} else if t := strings.TrimPrefix(ns, "~"); t != "" && t != "*" && t != "." && !isIstioLabel(t) {
		return fmt.Sprintf("host %s: invalid namespace %s in a sidecar", quote(h), quote(ns))
	}
	return checkScopedHostPart(name, gateway)
}

// hostMatches reports whether two hosts overlap (Istio's host.Name.Matches).
func hostMatches(a, b string) bool {
	aw, bw := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	switch {
	case aw && bw:
		if len(a) < len(b) {
			return strings.HasSuffix(b[1:], a[1:])
		}
		return strings.HasSuffix(a[1:], b[1:])
	case aw:
		return strings.HasSuffix(b, a[1:])
	case bw:
		return strings.HasSuffix(a, b[1:])
	}
	return a == b
}

// hostSubsetOf reports whether every name host a matches is matched by b
// (Istio's host.Name.SubsetOf).
func hostSubsetOf(a, b string) bool {
	aw, bw := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	switch {
	case aw && bw:
		return len(a) >= len(b) && strings.HasSuffix(a[1:], b[1:])
	case aw:
		return false
	case bw:
		return strings.HasSuffix(a, b[1:])
	}
	return a == b
}

func checkIstioPort(n int64) string {
	if n < 1 || n > 65535 {
		return fmt.Sprintf("port number %d must be in 1-65535", n)
	}
	return ""
}

func checkIstioPortName(name string) string {
	if !isIstioLabel(name) {
		return fmt.Sprintf("invalid port name %s", quote(name))
	}
	return ""
}

// istioProtocols are the names Istio's protocol.Parse knows, plus the ones
// vmesh's registries add (Dubbo, ZooKeeper, Thrift).
var istioProtocols = map[string]bool{
	"tcp": true, "udp": true, "grpc": true, "grpc-web": true, "http": true, "http_proxy": true, "http2": true,
	"https": true, "tls": true, "mongo": true, "redis": true, "mysql": true,
	"dubbo": true, "zookeeper": true, "thrift": true,
}

func isKnownProtocol(p string) bool { return istioProtocols[strings.ToLower(p)] }

func isTLSProtocol(p string) bool {
	p = strings.ToLower(p)
	return p == "https" || p == "tls"
}

func isHTTPProtocol(p string) bool {
	switch strings.ToLower(p) {
	case "http", "http2", "grpc", "grpc-web", "http_proxy":
		return true
	}
	return false
}

// checkIstioProtocol accepts an empty protocol (sniffed) or a known one.
func checkIstioProtocol(p string) string {
	if p != "" && !isKnownProtocol(p) {
		return fmt.Sprintf("unknown protocol %s", quote(p))
	}
	return ""
}

// checkIstioDuration is Istio's duration rule: at least 1ms, in whole
// milliseconds.
func checkIstioDuration(v *validator, field string, d *durationpb.Duration) {
	if d == nil {
		return
	}
	dur := d.AsDuration()
	switch {
	case dur < time.Millisecond:
		v.add(field, "duration %s must be at least 1ms", dur)
	case dur%time.Millisecond != 0:
		v.add(field, "duration %s: only whole milliseconds are supported", dur)
	}
}

// checkUnixAddress validates the path of a unix:// address: an abstract
// socket (@name) or an absolute path to a file.
func checkUnixAddress(addr string) string {
	switch {
	case addr == "":
		return "unix address must not be empty"
	case strings.HasPrefix(addr, "@"):
		return ""
	case !path.IsAbs(addr) || strings.HasSuffix(addr, "/"):
		return fmt.Sprintf("%s is not an absolute path to a file", quote(addr))
	}
	return ""
}

// checkIPSubnet accepts an IP address or, with one "/", a CIDR block.
func checkIPSubnet(s string) string {
	if strings.Count(s, "/") == 1 {
		if _, err := netip.ParsePrefix(s); err != nil {
			return fmt.Sprintf("%s is not an IP address or CIDR block", quote(s))
		}
		return ""
	}
	if !isIP(s) {
		return fmt.Sprintf("%s is not an IP address or CIDR block", quote(s))
	}
	return ""
}

// checkSelectorLabels is Istio's rule for workload selectors: no empty key
// and no wildcard.
func checkSelectorLabels(v *validator, field string, labels map[string]string) {
	for k, val := range labels {
		if k == "" {
			v.add(field, "an empty label key is not supported in a selector")
		}
		if strings.Contains(k, "*") || strings.Contains(val, "*") {
			v.add(field+"."+k, "wildcard is not supported in a selector: %s", quote(k+"="+val))
		}
	}
}

var (
	// Istio's rules for labels inside a spec (subsets, endpoints, source
	// labels): Kubernetes' key syntax with a case-insensitive DNS prefix,
	// and a value of any length.
	specLabelKeyRE   = regexp.MustCompile(`^([a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)*/)?((?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`)
	specLabelValueRE = regexp.MustCompile(`^((?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
)

// checkSpecLabels validates the labels of a spec (not metadata.labels, which
// the decoder checks with Kubernetes' rules).
func checkSpecLabels(v *validator, path string, labels map[string]string) {
	for k, val := range labels {
		m := specLabelKeyRE.FindStringSubmatch(k)
		switch {
		case m == nil:
			v.add(path+"."+k, "invalid label key %s", quote(k))
		case len(m[1]) > 254:
			v.add(path+"."+k, "label key %s: the prefix is longer than 253 characters", quote(k))
		case len(m[2]) > 63:
			v.add(path+"."+k, "label key %s: the name is longer than 63 characters", quote(k))
		}
		if !specLabelValueRE.MatchString(val) {
			v.add(path+"."+k, "invalid label value %s for key %s", quote(val), quote(k))
		}
	}
}
