package adapter

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxLabel is the longest DNS label and the longest label value.
const maxLabel = 63

// IsLabelValue reports whether v is a valid label value: at most 63
// characters of [A-Za-z0-9._-], beginning and ending with an alphanumeric
// character, or empty.
func IsLabelValue(v string) bool {
	if len(v) > maxLabel {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case isAlnum(c):
		case (c == '-' || c == '_' || c == '.') && i > 0 && i < len(v)-1:
		default:
			return false
		}
	}
	return true
}

// IsLabelKey reports whether k is a valid label key: an optional DNS
// subdomain prefix and "/", then a name that is a non-empty label value.
func IsLabelKey(k string) bool {
	name := k
	if i := strings.LastIndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if prefix == "" || len(prefix) > 253 || !isDNSSubdomain(prefix) {
			return false
		}
	}
	return name != "" && IsLabelValue(name)
}

func isDNSSubdomain(s string) bool {
	for {
		l, rest, more := strings.Cut(s, ".")
		if !isDNSLabel(l) {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}

func isDNSLabel(l string) bool {
	if l == "" || len(l) > maxLabel {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(l)-1) {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// DNSLabel turns s into one DNS label: lower case, every character outside
// [a-z0-9-] becomes '-', leading and trailing '-' are trimmed, and a label
// longer than 63 characters is cut and given a hash of s so distinct inputs
// stay distinct. It returns "x" for an input with no usable character.
func DNSLabel(s string) string {
	if isDNSLabel(s) {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b = append(b, c)
		default:
			b = append(b, '-')
		}
	}
	out := strings.Trim(string(b), "-")
	if out == "" {
		return "x"
	}
	if len(out) > maxLabel {
		out = strings.TrimRight(out[:maxLabel-9], "-") + "-" + shortHash(s)
	}
	return out
}

// DNSName turns a dotted name into a DNS name label by label (see DNSLabel),
// dropping empty labels. A result longer than 253 characters is cut and
// hashed.
func DNSName(s string) string {
	if len(s) <= 253 && isDNSSubdomain(s) {
		return s // already one: most registry names are
	}
	parts := strings.Split(s, ".")
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		if p == "" {
			continue
		}
		out = append(out, DNSLabel(p))
	}
	name := strings.Join(out, ".")
	if name == "" {
		return "x"
	}
	if len(name) > 253 {
		name = strings.Trim(name[:253-9], ".-") + "-" + shortHash(s)
	}
	return name
}

// ObjectName joins parts with '-' into a valid object name (a DNS subdomain
// of at most 253 characters): each part is made DNS-safe with DNSName.
func ObjectName(parts ...string) string {
	clean := make([]string, 0, len(parts))
	for _, p := range parts {
		if p != "" {
			clean = append(clean, DNSName(p))
		}
	}
	return DNSName(strings.Join(clean, "-"))
}

// SelectorValue turns an object name into a label value that identifies
// it: the name itself when it is a valid label value, else a cut name with a
// hash.
func SelectorValue(name string) string {
	if IsLabelValue(name) {
		return name
	}
	v := DNSLabel(name)
	if v == name {
		return v
	}
	if len(v) > maxLabel-9 {
		v = strings.TrimRight(v[:maxLabel-9], "-")
	}
	return v + "-" + shortHash(name)
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}

// Labels copies the pairs of in that are valid labels into out (creating
// it when nil) and returns out.
func Labels(out, in map[string]string) map[string]string {
	for k, v := range in {
		if IsLabelKey(k) && IsLabelValue(v) {
			if out == nil {
				out = make(map[string]string, len(in))
			}
			out[k] = v
		}
	}
	return out
}
