package filestore

import (
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

func validateServiceEntry(v *validator, namespace string, labels map[string]string, se *networking.ServiceEntry) {
	if se.WorkloadSelector != nil {
		before := len(v.problems)
		checkSelectorLabels(v, "workloadSelector.labels", se.WorkloadSelector.Labels)
		if len(v.problems) > before {
			return
		}
	}
	if se.WorkloadSelector != nil && se.Endpoints != nil {
		v.add("workloadSelector", "workloadSelector and endpoints are mutually exclusive")
	}
	if len(se.Hosts) == 0 {
		v.add("hosts", "a ServiceEntry needs at least one host")
	}
	for i, h := range se.Hosts {
		if h == "*" {
			v.add(at("hosts", i), `host "*" is not allowed in a ServiceEntry`)
			continue
		}
		v.check(at("hosts", i), checkWildcardDomain(h))
	}
	cidr := false
	for i, a := range se.Addresses {
		cidr = cidr || strings.Contains(a, "/")
		v.check(at("addresses", i), checkIPSubnet(a))
	}
	if cidr && se.Resolution != networking.ServiceEntry_NONE && se.Resolution != networking.ServiceEntry_STATIC {
		v.add("addresses", "CIDR addresses are allowed only with resolution NONE or STATIC")
	}
	portNames := map[string]bool{}
	portNumbers := map[uint32]bool{}
	for i, p := range se.Ports {
		path := at("ports", i)
		if p == nil {
			v.add(path, "a port must not be null")
			continue
		}
		if portNames[p.Name] {
			v.add(path+".name", "port name %s is used twice", quote(p.Name))
		}
		if portNumbers[p.Number] {
			v.add(path+".number", "port number %d is used twice", p.Number)
		}
		portNames[p.Name], portNumbers[p.Number] = true, true
		if p.TargetPort != 0 {
			v.check(path+".targetPort", checkIstioPort(int64(p.TargetPort)))
		}
		v.check(path+".name", checkIstioPortName(p.Name))
		v.check(path+".protocol", checkIstioProtocol(p.Protocol))
		v.check(path+".number", checkIstioPort(int64(p.Number)))
	}
	switch se.Resolution {
	case networking.ServiceEntry_NONE:
		if len(se.Endpoints) > 0 {
			v.add("endpoints", "endpoints are not allowed with resolution NONE")
		}
	case networking.ServiceEntry_STATIC:
		for i, e := range se.Endpoints {
			if e == nil {
				v.add(at("endpoints", i), "an endpoint must not be null")
				continue
			}
			validateWorkloadEntry(v, at("endpoints", i), e, portNames, false)
		}
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		if len(se.Endpoints) == 0 {
			for i, h := range se.Hosts {
				if msg := checkFQDN(h); msg != "" {
					v.add(at("hosts", i), "host %s needs endpoints with resolution %s (%s)", quote(h), se.Resolution, msg)
					break
				}
			}
		}
		if se.Resolution == networking.ServiceEntry_DNS_ROUND_ROBIN && len(se.Endpoints) > 1 {
			v.add("endpoints", "resolution DNS_ROUND_ROBIN allows at most one endpoint")
		}
		for i, e := range se.Endpoints {
			path := at("endpoints", i)
			if e == nil {
				v.add(path, "an endpoint must not be null")
				continue
			}
			if !isIP(e.Address) && checkFQDN(e.Address) != "" {
				v.add(path+".address", "endpoint address %s is not a domain name or an IP address", quote(e.Address))
			}
			checkSpecLabels(v, path+".labels", e.Labels)
			checkEndpointPorts(v, path, e.Ports, portNames)
		}
	case networking.ServiceEntry_DYNAMIC_DNS:
		for i, h := range se.Hosts {
			if !strings.HasPrefix(h, "*") {
				v.add(at("hosts", i), "hosts must be wildcards with resolution DYNAMIC_DNS")
			}
		}
		if len(se.Addresses) > 0 {
			v.add("addresses", "addresses are not allowed with resolution DYNAMIC_DNS")
		}
		if len(se.Endpoints) > 0 {
			v.add("endpoints", "endpoints are not allowed with resolution DYNAMIC_DNS")
		}
		for i, p := range se.Ports {
			switch strings.ToLower(p.GetProtocol()) {
			case "http", "tls", "grpc", "http2":
			default:
				v.add(at("ports", i)+".protocol", "resolution DYNAMIC_DNS supports only HTTP, TLS, GRPC and HTTP2 ports")
			}
		}
		if w := labels["istio.io/use-waypoint"]; se.Location == networking.ServiceEntry_MESH_INTERNAL && w != "" && !strings.EqualFold(w, "none") {
			v.add("location", "location MESH_INTERNAL with resolution DYNAMIC_DNS is not supported with a waypoint")
		}
	default:
		v.add("resolution", "unsupported resolution %s", se.Resolution)
	}
	if se.Resolution != networking.ServiceEntry_NONE && len(se.Hosts) > 1 {
		for i, p := range se.Ports {
			if p != nil && !isHTTPProtocol(p.Protocol) && !isTLSProtocol(p.Protocol) {
				v.add(at("ports", i)+".protocol", "a ServiceEntry with several hosts needs HTTP or TLS ports (unless resolution is NONE)")
				break
			}
		}
	}
	validateExportTo(v, namespace, se.ExportTo, true, false)
}

// validateWorkloadEntry checks a WorkloadEntry, or a ServiceEntry endpoint
// (servicePorts are then the entry's port names; fqdn says whether the
// address may be a domain name).
func validateWorkloadEntry(v *validator, path string, we *networking.WorkloadEntry, servicePorts map[string]bool, fqdn bool) {
	p := func(f string) string {
		if path == "" {
			return f
		}
		return path + "." + f
	}
	addr := we.Address
	if addr == "" && we.Network == "" {
		v.add(p("address"), "address is required unless network is set")
		return
	}
	unix := false
	if after, ok := strings.CutPrefix(addr, unixPrefix); ok {
		unix = true
		v.check(p("address"), checkUnixAddress(after))
		if len(we.Ports) > 0 {
			v.add(p("ports"), "a unix:// endpoint must not have ports")
		}
	} else if addr != "" && !isIP(addr) {
		if !fqdn {
			v.add(p("address"), "%s must be an IP address or unix:// path with resolution STATIC", quote(addr))
		} else if checkFQDN(addr) != "" {
			v.add(p("address"), "%s is not a domain name or an IP address", quote(addr))
		}
	}
	checkEndpointPorts(v, path, we.Ports, servicePorts)
	checkSpecLabels(v, p("labels"), we.Labels)
	checkServiceAccountName(v, p("serviceAccount"), we.ServiceAccount)
	if unix && servicePorts != nil && len(servicePorts) != 1 {
		v.add(p("address"), "a unix:// endpoint needs a ServiceEntry with exactly one port")
	}
}

func checkEndpointPorts(v *validator, path string, ports map[string]uint32, servicePorts map[string]bool) {
	for name, port := range ports {
		field := "ports." + name
		if path != "" {
			field = path + "." + field
		}
		if servicePorts != nil && !servicePorts[name] {
			v.add(field, "port %s is not one of the ServiceEntry's port names", quote(name))
		}
		v.check(field, checkIstioPortName(name))
		v.check(field, checkIstioPort(int64(port)))
	}
}

func validateWorkloadGroup(v *validator, wg *networking.WorkloadGroup) {
	if wg.Template == nil {
		v.add("template", "template is required")
		return
	}
	if wg.Metadata != nil {
		checkSpecLabels(v, "metadata.labels", wg.Metadata.Labels)
	}
	checkServiceAccountName(v, "template.serviceAccount", wg.Template.ServiceAccount)
	pr := wg.Probe
	if pr == nil {
		return
	}
	for _, f := range []struct {
		name string
		n    int32
	}{{"periodSeconds", pr.PeriodSeconds}, {"initialDelaySeconds", pr.InitialDelaySeconds}, {"timeoutSeconds", pr.TimeoutSeconds},
		{"successThreshold", pr.SuccessThreshold}, {"failureThreshold", pr.FailureThreshold}} {
		if f.n < 0 {
			v.add("probe."+f.name, "must not be negative")
		}
	}
	switch m := pr.HealthCheckMethod.(type) {
	case *networking.ReadinessProbe_HttpGet:
		h := m.HttpGet
		v.check("probe.httpGet.port", checkIstioPort(int64(h.GetPort())))
		if s := h.GetScheme(); s != "" && s != "HTTP" && s != "HTTPS" {
			v.add("probe.httpGet.scheme", `scheme must be "HTTP" or "HTTPS"`)
		}
		for i, hd := range h.GetHttpHeaders() {
			if hd.GetName() == "" || !probeHeaderRE.MatchString(hd.GetName()) {
				v.add(at("probe.httpGet.httpHeaders", i)+".name", "%s is not a valid header name", quote(hd.GetName()))
			}
		}
	case *networking.ReadinessProbe_TcpSocket:
		v.check("probe.tcpSocket.port", checkIstioPort(int64(m.TcpSocket.GetPort())))
	case *networking.ReadinessProbe_Exec:
		if len(m.Exec.GetCommand()) == 0 {
			v.add("probe.exec.command", "command is required")
		}
	case *networking.ReadinessProbe_Grpc:
		// Beyond Istio, whose webhook refuses gRPC probes in a
		// WorkloadGroup: vmesh's agent runs them (the quickstart uses one).
		v.check("probe.grpc.port", checkIstioPort(int64(m.Grpc.GetPort())))
	default:
		v.add("probe", "a probe needs one of httpGet, tcpSocket, exec or grpc")
	}
}

// checkServiceAccountName is vmesh's rule beyond Istio's (which takes any
// string): a workload's service account becomes the .../sa/<name> part of
// its SPIFFE identity, so it must be a DNS-1123 subdomain, as every
// Kubernetes service account is.
func checkServiceAccountName(v *validator, field, sa string) {
	if sa != "" {
		v.check(field, checkDNS1123Subdomain(sa))
	}
}
