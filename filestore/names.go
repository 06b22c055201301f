package filestore

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"
)

var (
	dns1123LabelRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	labelValueRE    = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	labelNameRE     = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	portNameRE      = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$`)
	hostLabelRE     = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?$`)
	durationPattern = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(h|m|s|ms|us|µs|ns))+$`)
)

// checkDNS1123Label returns a problem description, or "" if s is a valid DNS-1123 label.
func checkDNS1123Label(s string) string {
	if len(s) > 63 || !dns1123LabelRE.MatchString(s) {
		return fmt.Sprintf("%s is not a valid DNS-1123 label (lower-case letters, digits and '-', at most 63)", quote(s))
	}
	return ""
}

// checkDNS1123Subdomain returns a problem description, or "" if s is a valid DNS-1123 subdomain.
func checkDNS1123Subdomain(s string) string {
	if s == "" || len(s) > 253 {
		return fmt.Sprintf("%s is not a valid name (DNS-1123 subdomain, 1-253 characters)", quote(s))
	}
	for _, l := range strings.Split(s, ".") {
		if !dns1123LabelRE.MatchString(l) {
			return fmt.Sprintf("%s is not a valid name (DNS-1123 subdomain: lower-case letters, digits, '-' and '.')", quote(s))
		}
	}
	return ""
}

// checkLabel validates a Kubernetes-style label key and value.
func checkLabel(key, value string) string {
	name := key
	if prefix, n, ok := strings.Cut(key, "/"); ok {
		if checkDNS1123Subdomain(prefix) != "" {
			return fmt.Sprintf("label key %s has an invalid prefix", quote(key))
		}
		name = n
	}
	if len(name) == 0 || len(name) > 63 || !labelNameRE.MatchString(name) {
		return fmt.Sprintf("invalid label key %s (alphanumerics, '-', '_', '.', at most 63, starting and ending alphanumeric)", quote(key))
	}
	if len(value) > 63 || (value != "" && !labelValueRE.MatchString(value)) {
		return fmt.Sprintf("invalid label value %s for key %s (alphanumerics, '-', '_', '.', at most 63)", quote(value), quote(key))
	}
	return ""
}

// checkLabels validates every label of a map.
func checkLabels(v *validator, path string, labels map[string]string) {
	for k, val := range labels {
		if msg := checkLabel(k, val); msg != "" {
			v.add(path+"."+k, "%s", msg)
		}
	}
}

// checkHost validates a service host name: an FQDN or short name, optionally
// with a leading "*." wildcard. allowStar permits the bare "*".
func checkHost(host string, allowStar bool) string {
	if host == "*" {
		if allowStar {
			return ""
		}
		return `"*" is not allowed here`
	}
	if host == "" {
		return "host must not be empty"
	}
	if len(host) > 255 {
		return fmt.Sprintf("host %s is longer than 255 characters", quote(host))
	}
	h := strings.TrimPrefix(host, "*.")
	if strings.Contains(h, "*") {
		return fmt.Sprintf("host %s: a wildcard is only allowed as the leftmost label", quote(host))
	}
	for _, l := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if len(l) > 63 || !hostLabelRE.MatchString(l) {
			return fmt.Sprintf("host %s is not a valid domain name", quote(host))
		}
	}
	return ""
}

// isWildcard reports whether a host is a wildcard.
func isWildcard(host string) bool { return strings.HasPrefix(host, "*") }

// checkPortName validates a port name.
func checkPortName(name string) string {
	if len(name) > 63 || !portNameRE.MatchString(name) {
		return fmt.Sprintf("invalid port name %s", quote(name))
	}
	return ""
}

// checkPort validates a port number.
func checkPort(n uint32) string {
	if n == 0 || n > 65535 {
		return fmt.Sprintf("port number %d must be in 1-65535", n)
	}
	return ""
}

// knownProtocols are the protocol names Istio accepts on ports.
var knownProtocols = map[string]bool{
	"HTTP": true, "HTTPS": true, "GRPC": true, "GRPC-WEB": true, "HTTP2": true, "MONGO": true,
	"TCP": true, "TLS": true, "UDP": true, "MYSQL": true, "REDIS": true, "THRIFT": true,
	"DUBBO": true, "ZOOKEEPER": true,
}

func checkProtocol(p string) string {
	if !knownProtocols[strings.ToUpper(p)] {
		return fmt.Sprintf("unknown protocol %s", quote(p))
	}
	return ""
}

// checkAddress validates an IP address or CIDR.
func checkIPOrCIDR(s string) string {
	if _, err := netip.ParseAddr(s); err == nil {
		return ""
	}
	if _, err := netip.ParsePrefix(s); err == nil {
		return ""
	}
	return fmt.Sprintf("%s is not an IP address or CIDR", quote(s))
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// parseDuration parses a protobuf JSON duration ("1.5s") or a Go duration.
func parseDuration(s string) (time.Duration, error) {
	if !durationPattern.MatchString(s) {
		return 0, fmt.Errorf("want a duration like 1s, 500ms or 1m30s")
	}
	return time.ParseDuration(s)
}
