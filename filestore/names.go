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
