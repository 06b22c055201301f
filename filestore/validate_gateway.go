package filestore

//lint:file-ignore SA1019 Istio still validates the deprecated targetPort of Gateway and Sidecar ports

import (
	"net"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

const unixPrefix = "unix://"

func validateGateway(v *validator, name string, gw *networking.Gateway) {
	if !isIstioLabel(name) {
		v.add("", "gateway name %s must be a DNS label (no dots)", quote(name))
	}
	if len(gw.Servers) == 0 {
		v.add("servers", "a Gateway needs at least one server")
	}
	portNames := map[string]bool{}
	for i, s := range gw.Servers {
		path := at("servers", i)
		if s == nil {
			v.add(path, "a server must not be null")
			continue
		}
		validateServer(v, path, s)
		if s.Port != nil {
			if portNames[s.Port.Name] {
				v.add(path+".port.name", "port name %s is used by two servers", quote(s.Port.Name))
			}
			portNames[s.Port.Name] = true
		}
	}
}

func validateServer(v *validator, path string, s *networking.Server) {
	if len(s.Hosts) == 0 {
		v.add(path+".hosts", "a server needs at least one host")
	}
	for j, h := range s.Hosts {
		v.check(at(path+".hosts", j), checkScopedHost(h, true))
	}
	portOK := true
	if p := s.Port; p == nil {
		v.add(path+".port", "port is required")
		portOK = false
	} else {
		before := len(v.problems)
		if !isKnownProtocol(p.Protocol) {
			v.add(path+".port.protocol", "unknown protocol %s", quote(p.Protocol))
		}
		// Istio's webhook allows port 0 with a unix:// bind, but its CRD
		// requires the number, which vmesh cannot tell from 0 once decoded;
		// and vmesh serves no unix-socket gateway listeners.
		v.check(path+".port.number", checkIstioPort(int64(p.Number)))
		if p.TargetPort > 0 {
			v.add(path+".port.targetPort", "targetPort has no effect on gateways")
		}
		if p.Name == "" {
			v.add(path+".port.name", "port name is required")
		}
		portOK = len(v.problems) == before
	}
	if after, ok := strings.CutPrefix(s.Bind, unixPrefix); ok {
		v.check(path+".bind", checkUnixAddress(after))
		if s.Port != nil && s.Port.Number != 0 {
			v.add(path+".port.number", "port number must be 0 with a unix domain socket bind")
		}
	} else if s.Bind != "" && !isIP(s.Bind) {
		v.add(path+".bind", "bind %s is not an IP address or unix:// path", quote(s.Bind))
	}
	checkServerTLS(v, path+".tls", s.Tls)
	if portOK {
		switch p := s.Port.Protocol; {
		case strings.EqualFold(p, "HTTPS") && s.Tls == nil:
			v.add(path+".tls", "an HTTPS server needs tls settings")
		case isTLSProtocol(p) && s.Tls == nil:
			v.add(path+".tls", "a TLS server needs tls settings")
		case !isTLSProtocol(p) && s.Tls != nil && isHTTPProtocol(p):
			passthrough := s.Tls.Mode == networking.ServerTLSSettings_PASSTHROUGH || s.Tls.Mode == networking.ServerTLSSettings_AUTO_PASSTHROUGH
			if !passthrough || s.Tls.CaCertificates != "" || s.Tls.PrivateKey != "" || s.Tls.ServerCertificate != "" {
				v.add(path+".tls", "a plain-text HTTP server cannot have tls settings")
			}
		case !isTLSProtocol(p) && s.Tls != nil:
			v.add(path+".tls", "only HTTPS and TLS servers can have tls settings")
		}
	}
}

// checkServerTLS is Istio's rule for a server's TLS settings (gateways and
// sidecar ingress).
func checkServerTLS(v *validator, path string, tls *networking.ServerTLSSettings) {
	if tls == nil {
		return
	}
	if tls.Mode == networking.ServerTLSSettings_ISTIO_MUTUAL {
		for _, f := range []struct {
			set  bool
			name string
		}{{tls.ServerCertificate != "", "serverCertificate"}, {tls.PrivateKey != "", "privateKey"}, {tls.CaCertificates != "", "caCertificates"},
			{len(tls.TlsCertificates) > 0, "tlsCertificates"}, {tls.CredentialName != "", "credentialName"}, {len(tls.CredentialNames) > 0, "credentialNames"}} {
			if f.set {
				v.add(path+"."+f.name, "mode ISTIO_MUTUAL cannot have %s", f.name)
			}
		}
		return
	}
	if len(tls.TlsCertificates) > 2 {
		v.add(path+".tlsCertificates", "at most 2 tlsCertificates are allowed")
	}
	sources := 0
	for _, set := range []bool{tls.ServerCertificate != "" && tls.PrivateKey != "", tls.CredentialName != "", len(tls.CredentialNames) > 0, len(tls.TlsCertificates) > 0} {
		if set {
			sources++
		}
	}
	if sources > 1 {
		v.add(path, "only one of credentialName, credentialNames, serverCertificate/privateKey and tlsCertificates may be set")
	}
	terminates := tls.Mode == networking.ServerTLSSettings_SIMPLE || tls.Mode == networking.ServerTLSSettings_MUTUAL ||
		tls.Mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL
	if terminates && (tls.CredentialName != "" || len(tls.CredentialNames) > 0) {
		return // the certificates come from the credential
	}
	if terminates {
		mode := tls.Mode.String()
		if tls.Mode != networking.ServerTLSSettings_SIMPLE && tls.CaCertificates == "" {
			v.add(path+".caCertificates", "mode %s needs caCertificates (a client CA bundle)", mode)
		}
		certs := tls.TlsCertificates
		if len(certs) == 0 {
			certs = []*networking.ServerTLSSettings_TLSCertificate{{ServerCertificate: tls.ServerCertificate, PrivateKey: tls.PrivateKey}}
		}
		for _, c := range certs {
			if c.GetServerCertificate() == "" {
				v.add(path+".serverCertificate", "mode %s needs a server certificate", mode)
			}
			if c.GetPrivateKey() == "" {
				v.add(path+".privateKey", "mode %s needs a private key", mode)
			}
		}
	}
	if tls.CaCrl != "" {
		if tls.CredentialName != "" {
			v.add(path+".caCrl", "caCrl cannot be used with credentialName (put the CRL in the credential)")
		}
		if tls.Mode == networking.ServerTLSSettings_SIMPLE {
			v.add(path+".caCrl", "caCrl cannot be used with mode SIMPLE")
		}
	}
}

func validateSidecar(v *validator, namespace string, sc *networking.Sidecar) {
	if sc.WorkloadSelector != nil {
		before := len(v.problems)
		checkSelectorLabels(v, "workloadSelector.labels", sc.WorkloadSelector.Labels)
		if len(v.problems) > before {
			return
		}
	}
	if len(sc.Egress) == 0 && len(sc.Ingress) == 0 && sc.OutboundTrafficPolicy == nil && sc.InboundConnectionPool == nil {
		v.add("", "a Sidecar needs egress, ingress, outboundTrafficPolicy or inboundConnectionPool")
		return
	}
	ports := map[uint32]bool{}
	for i, in := range sc.Ingress {
		path := at("ingress", i)
		if in == nil {
			v.add(path, "an ingress listener must not be null")
			continue
		}
		if in.Port == nil {
			v.add(path+".port", "port is required")
			continue
		}
		if in.Port.TargetPort > 0 {
			v.add(path+".port.targetPort", "targetPort has no effect on sidecars")
		}
		checkSidecarPort(v, path+".port", in.Port)
		if in.Bind != "" && !isIP(in.Bind) {
			v.add(path+".bind", "bind %s is not an IP address", quote(in.Bind))
		}
		if ports[in.Port.Number] {
			v.add(path+".port.number", "port %d is used by two ingress listeners", in.Port.Number)
		}
		ports[in.Port.Number] = true
		if in.DefaultEndpoint != "" {
			checkDefaultEndpoint(v, path+".defaultEndpoint", in.DefaultEndpoint)
		}
		if t := in.Tls; t != nil {
			tp := path + ".tls"
			for _, f := range []struct {
				set  bool
				name string
			}{{len(t.SubjectAltNames) > 0, "subjectAltNames"}, {t.HttpsRedirect, "httpsRedirect"}, {t.CredentialName != "", "credentialName"},
				{len(t.CredentialNames) > 0, "credentialNames"}, {len(t.TlsCertificates) > 0, "tlsCertificates"}} {
				if f.set {
					v.add(tp+"."+f.name, "%s is not supported in sidecar ingress tls", f.name)
				}
			}
			if t.Mode == networking.ServerTLSSettings_ISTIO_MUTUAL || t.Mode == networking.ServerTLSSettings_AUTO_PASSTHROUGH {
				v.add(tp+".mode", "mode %s is not allowed in sidecar ingress tls", t.Mode)
			}
			if !isTLSProtocol(in.Port.Protocol) {
				v.add(tp, "only HTTPS and TLS ports can have tls settings")
			}
			checkServerTLS(v, tp, t)
		}
		checkConnectionPool(v, path+".connectionPool", in.ConnectionPool)
	}
	checkConnectionPool(v, "inboundConnectionPool", sc.InboundConnectionPool)
	ports = map[uint32]bool{}
	sockets := map[string]bool{}
	catchAll := false
	for i, e := range sc.Egress {
		path := at("egress", i)
		if e == nil {
			v.add(path, "an egress listener must not be null")
			continue
		}
		if e.Port == nil {
			if catchAll {
				v.add(path+".port", "only one egress listener may omit port")
				continue
			}
			if i == len(sc.Egress)-1 {
				catchAll = true
			} else {
				v.add(path+".port", "only the last egress listener may omit port (the catch-all)")
			}
		} else {
			if e.Port.TargetPort > 0 {
				v.add(path+".port.targetPort", "targetPort has no effect on sidecars")
			}
			if e.Port.Number == 0 {
				if e.Port.Name != "" {
					v.check(path+".port.name", checkIstioPortName(e.Port.Name))
				}
				v.check(path+".port.protocol", checkIstioProtocol(e.Port.Protocol))
				if after, ok := strings.CutPrefix(e.Bind, unixPrefix); ok {
					v.check(path+".bind", checkUnixAddress(after))
				} else {
					v.add(path+".bind", "port 0 needs a unix:// bind address")
				}
				if e.CaptureMode != networking.CaptureMode_DEFAULT && e.CaptureMode != networking.CaptureMode_NONE {
					v.add(path+".captureMode", "a unix domain socket listener needs captureMode DEFAULT or NONE")
				}
				if sockets[e.Bind] {
					v.add(path+".bind", "unix domain socket %s is used by two egress listeners", quote(e.Bind))
				}
				sockets[e.Bind] = true
			} else {
				checkSidecarPort(v, path+".port", e.Port)
				if e.Bind != "" && !isIP(e.Bind) {
					v.add(path+".bind", "bind %s is not an IP address", quote(e.Bind))
				}
				if ports[e.Port.Number] {
					v.add(path+".port.number", "port %d is used by two egress listeners", e.Port.Number)
				}
				ports[e.Port.Number] = true
			}
		}
		if len(e.Hosts) == 0 {
			v.add(path+".hosts", "an egress listener needs at least one host")
		}
		for j, h := range e.Hosts {
			v.check(at(path+".hosts", j), checkScopedHost(h, false))
		}
	}
	if tp := sc.OutboundTrafficPolicy; tp != nil && tp.EgressProxy != nil {
		ep := "outboundTrafficPolicy.egressProxy"
		if tp.Mode != networking.OutboundTrafficPolicy_ALLOW_ANY {
			v.add(ep, "egressProxy needs mode ALLOW_ANY")
			return
		}
		v.check(ep+".host", checkFQDN(tp.EgressProxy.Host))
		if tp.EgressProxy.Port == nil {
			v.add(ep+".port", "port is required")
			return
		}
		checkDestination(v, ep, tp.EgressProxy)
	}
}

func checkSidecarPort(v *validator, path string, p *networking.SidecarPort) {
	if p.Name != "" {
		v.check(path+".name", checkIstioPortName(p.Name))
	}
	v.check(path+".protocol", checkIstioProtocol(p.Protocol))
	v.check(path+".number", checkIstioPort(int64(p.Number)))
}

// checkDefaultEndpoint: unix://PATH, or a loopback or unspecified
// address (or none) with a port.
func checkDefaultEndpoint(v *validator, field, ep string) {
	if after, ok := strings.CutPrefix(ep, unixPrefix); ok {
		v.check(field, checkUnixAddress(after))
		return
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		v.add(field, "%s is not host:port", quote(ep))
	}
	switch host {
	case "", "127.0.0.1", "0.0.0.0", "::1", "::":
	default:
		v.add(field, "defaultEndpoint must be 127.0.0.1:<port>, 0.0.0.0:<port>, [::1]:<port>, [::]:<port> or unix://<path>")
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		v.add(field, "defaultEndpoint port %s is not a number", quote(port))
		return
	}
	v.check(field, checkIstioPort(int64(n)))
}
