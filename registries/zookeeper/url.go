package zookeeper

import (
	"errors"
	"fmt"
	"net"
	"net/url"
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
	// Params holds every URL parameter (first value of each).
	Params map[string]string

	raw string // the decoded URL
}

// errNotProvider marks a URL that is well formed but not an enabled
// provider (category other than providers, enabled=false): it is left out
// without counting as malformed.
var errNotProvider = errors.New("not an enabled provider")

// ParseProviderURL parses a provider node name: the URL-encoded
// dubbo://ip:port/interface?params that Dubbo writes.
func ParseProviderURL(node string) (*Provider, error) {
	raw, err := url.QueryUnescape(node)
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
	params := firstValues(u.RawQuery)
	p := &Provider{
		Protocol:    strings.ToLower(u.Scheme),
		Host:        host,
		Port:        uint32(port),
		Interface:   params["interface"],
		Group:       firstNonEmpty(params["group"], params["default.group"]),
		Version:     firstNonEmpty(params["version"], params["default.version"]),
		Application: params["application"],
		Timestamp:   params["timestamp"],
		Params:      params,
		raw:         raw,
	}
	if p.Interface == "" {
		p.Interface = strings.Trim(u.Path, "/")
	}
	if p.Interface == "" {
		return nil, fmt.Errorf("%q: no interface", raw)
	}
	if w := params["weight"]; w != "" {
		n, err := strconv.ParseUint(w, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q: weight %q: %w", raw, w, err)
		}
		p.Weight = uint32(n)
	}
	if c := params["category"]; c != "" && c != "providers" {
		return nil, fmt.Errorf("category %q: %w", c, errNotProvider)
	}
	if params["enabled"] == "false" {
		return nil, fmt.Errorf("enabled=false: %w", errNotProvider)
	}
	return p, nil
}

// firstValues is url.ParseQuery's reading of a query, keeping each key's
// first value, without the lists ParseQuery builds (a registry of 100,000
// providers parses that many URLs on its first read): pairs with ';' and
// pairs that do not unescape are left out, as there.
func firstValues(query string) map[string]string {
	out := make(map[string]string, strings.Count(query, "&")+1)
	for query != "" {
		var pair string
		pair, query, _ = strings.Cut(query, "&")
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
		if _, seen := out[k]; !seen {
			out[k] = v
		}
	}
	return out
}

// unescapeQuery is url.QueryUnescape, without its copy when s has nothing
// to unescape.
func unescapeQuery(s string) (string, error) {
	if !strings.ContainsAny(s, "%+") {
		return s, nil
	}
	return url.QueryUnescape(s)
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
// lists and over-long values are not).
func (p *Provider) Labels() map[string]string {
	return adapter.Labels(nil, p.Params)
}

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
