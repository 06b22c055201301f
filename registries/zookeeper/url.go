package zookeeper

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/vmesh/vmesh/registries/adapter"
)

// Provider is one Dubbo provider URL, as Dubbo writes it under
// /<root>/<interface>/providers/.
type Provider struct {
	// Protocol is the URL scheme: dubbo, tri, grpc, rest, ...
	Protocol string
	// Host is the provider's address (an IP as Dubbo registers it).
	Host string
	Port uint32
	// Interface is the `interface` parameter, else the URL path.
	Interface   string
	Group       string
	Version     string
	Application string
	// Weight is the `weight` parameter, 0 when absent.
	Weight uint32
	// Timestamp orders two registrations of the same address.
	Timestamp string
	labels    map[string]string // see Labels
	raw       string            // the decoded URL
}

// errNotProvider marks a URL that is well formed but not an enabled
// provider (category other than providers, enabled=false): it is left out
// without counting as malformed.
var errNotProvider = errors.New("not an enabled provider")

// ParseProviderURL parses a provider node name: the URL-encoded
// dubbo://ip:port/interface?params that Dubbo writes.
func ParseProviderURL(node string) (*Provider, error) {
	raw, err := queryUnescape(node)
	if err != nil {
		return nil, fmt.Errorf("url-decode: %w", err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", raw, err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%q: no protocol", raw)
	}
	host, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("%q: address: %w", raw, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 || host == "" {
		return nil, fmt.Errorf("%q: bad address %q", raw, u.Host)
	}
	q := readQuery(u.RawQuery)
	p := &Provider{
		Protocol:    strings.ToLower(u.Scheme),
		Host:        host,
		Port:        uint32(port),
		Interface:   q.param[paramInterface],
		Group:       firstNonEmpty(q.param[paramGroup], q.param[paramDefaultGroup]),
		Version:     firstNonEmpty(q.param[paramVersion], q.param[paramDefaultVersion]),
		Application: q.param[paramApplication],
		Timestamp:   q.param[paramTimestamp],
		labels:      q.labels,
		raw:         raw,
	}
	if p.Interface == "" {
		p.Interface = strings.Trim(u.Path, "/")
	}
	if p.Interface == "" {
		return nil, fmt.Errorf("%q: no interface", raw)
	}
	if w := q.param[paramWeight]; w != "" {
		n, err := strconv.ParseUint(w, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q: weight %q: %w", raw, w, err)
		}
		p.Weight = uint32(n)
	}
	if c := q.param[paramCategory]; c != "" && c != "providers" {
		return nil, fmt.Errorf("category %q: %w", c, errNotProvider)
	}
	if q.param[paramEnabled] == "false" {
		return nil, fmt.Errorf("enabled=false: %w", errNotProvider)
	}
	return p, nil
}

// The URL parameters a provider is read from.
const (
	paramInterface = iota
	paramGroup
	paramDefaultGroup
	paramVersion
	paramDefaultVersion
	paramApplication
	paramTimestamp
	paramWeight
	paramCategory
	paramEnabled
	numParams
)

var paramNames = [numParams]string{"interface", "group", "default.group", "version", "default.version", "application",
	"timestamp", "weight", "category", "enabled"}

// query is what a provider URL's query says: the parameters vmesh reads,
// and every parameter that is a valid label (adapter.Labels), each the
// key's first value.
type query struct {
	param  [numParams]string
	labels map[string]string
}

// readQuery reads a query as url.ParseQuery does, keeping each key's
// first value (pairs with ';' and pairs that do not unescape are left
// out, as there), in one pass with no map of every parameter: a
// registry's first read parses 100,000 provider URLs.
// TestReadQueryIsParseQuery checks it against the standard library.
func readQuery(raw string) query {
	var q query
	var seen [numParams]bool
	var notLabels []string // keys whose first value is not a label's
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, err := unescapeQuery(k)
		if err != nil {
			continue
		}
		if v, err = unescapeQuery(v); err != nil {
			continue
		}
		if i := slices.Index(paramNames[:], k); i >= 0 && !seen[i] {
			q.param[i], seen[i] = v, true
		}
		if _, ok := q.labels[k]; ok || slices.Contains(notLabels, k) {
			continue
		}
		if !adapter.IsLabelKey(k) || !adapter.IsLabelValue(v) {
			notLabels = append(notLabels, k)
			continue
		}
		if q.labels == nil {
			q.labels = make(map[string]string, strings.Count(raw, "&")+1)
		}
		q.labels[k] = v
	}
	return q
}

// unescapeQuery is url.QueryUnescape, without its copy when s has nothing
// to unescape.
func unescapeQuery(s string) (string, error) {
	if !strings.ContainsAny(s, "%+") {
		return s, nil
	}
	return queryUnescape(s)
}

// queryUnescape is url.QueryUnescape (the same result and errors,
// TestQueryUnescapeIsTheStandardLibrarys), copying the runs between
// escapes at once where the standard library writes byte by byte: every
// provider node is a URL-encoded URL of a few hundred bytes, and a
// registry's first read decodes 100,000 of them.
func queryUnescape(s string) (string, error) {
	i := strings.IndexAny(s, "%+")
	if i < 0 {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i >= 0 {
		b.WriteString(s[:i])
		switch s[i] {
		case '+':
			b.WriteByte(' ')
			s = s[i+1:]
		default: // '%'
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				bad := s[i:]
				if len(bad) > 3 {
					bad = bad[:3]
				}
				return "", url.EscapeError(bad)
			}
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			s = s[i+3:]
		}
		i = strings.IndexAny(s, "%+")
	}
	b.WriteString(s)
	return b.String(), nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// Labels returns the provider's WorkloadEntry labels: every URL parameter
// that is a valid label (application, version, group, side, ... ; methods
// lists and over-long values are not), first value of each. The map is
// the provider's own: callers must not modify it.
func (p *Provider) Labels() map[string]string { return p.labels }

// InterfaceHost is the documented host naming rule for a Dubbo service
// (interface, group, version); see README.md:
//
//	lower(interface), each dot-separated part made a DNS label
//	+ ".g-<group>"   when the group is set
//	+ ".v-<version>" when the version is set (dots become '-')
//	+ "." + suffix   when a suffix is configured
//
// e.g. org.apache.dubbo.demo.DemoService, group "pay", version "1.0.0" →
// org.apache.dubbo.demo.demoservice.g-pay.v-1-0-0. Java names hold no '-',
// so the g-/v- labels never clash with a part of the interface name.
func InterfaceHost(iface, group, version, suffix string) string {
	h := adapter.DNSName(iface)
	if group != "" {
		h += "." + adapter.DNSLabel("g-"+group)
	}
	if version != "" {
		h += "." + adapter.DNSLabel("v-"+version)
	}
	if suffix != "" {
		h += "." + adapter.DNSName(suffix)
	}
	return adapter.DNSName(h)
}

// ApplicationHost is the host of a Dubbo 3 application (application-level
// discovery): "<application>.dubbo", plus "." + suffix when configured.
func ApplicationHost(app, suffix string) string {
	h := adapter.DNSLabel(app) + ".dubbo"
	if suffix != "" {
		h += "." + adapter.DNSName(suffix)
	}
	return adapter.DNSName(h)
}
