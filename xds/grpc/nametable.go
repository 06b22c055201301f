package grpc

import (
	"net/netip"
	"strings"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/nds"
)

// NameTable returns the name table for a proxy's View: every visible,
// non-wildcard service host with its addresses (the ServiceEntry's, or the
// VIP vmesh allocated from 240.240.0.0/16), as Istio's BuildNameTable does
// for ServiceEntries. Hosts of the form name.namespace.svc.<domain> carry
// their short name and namespace with Istio's Kubernetes registry, so the
// agent also answers "name", "name.namespace" and "name.namespace.svc".
// CIDR addresses, which no DNS answer can name, are skipped, and so are
// hosts left without an address.
func NameTable(v *model.View) (nds.Table, error) {
	t := nds.Table{}
	for _, svc := range v.Services() {
		if _, seen := t[svc.Hostname]; seen {
			continue // one entry per host
		}
		if ni, ok := NameInfoOf(svc); ok {
			t[svc.Hostname] = ni
		}
	}
	return t, nil
}

// NameInfoOf returns a service's name table entry; false for none (no
// service, a wildcard host, no address a DNS answer can carry).
func NameInfoOf(svc *model.Service) (nds.NameInfo, bool) {
	if svc == nil || svc.Hostname == "" || strings.HasPrefix(svc.Hostname, "*") {
		return nds.NameInfo{}, false
	}
	var ips []string
	for _, a := range svc.Addresses {
		if ip, err := netip.ParseAddr(a); err == nil {
			ips = append(ips, ip.String())
		}
	}
	if len(ips) == 0 {
		return nds.NameInfo{}, false
	}
	ni := nds.NameInfo{IPs: ips, Registry: nds.RegistryExternal}
	if short, ns, ok := kubernetesStyle(svc.Hostname); ok {
		ni.Registry, ni.Shortname, ni.Namespace = nds.RegistryKubernetes, short, ns
	}
	return ni, true
}

// kubernetesStyle splits "name.namespace.svc.<domain>".
func kubernetesStyle(host string) (short, ns string, ok bool) {
	parts := strings.Split(host, ".")
	if len(parts) < 4 || parts[2] != "svc" || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}
