package router

import (
	"fmt"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/vmesh/vmesh/internal/filecert"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/security"
	"github.com/vmesh/vmesh/xds/sidecar"
	"github.com/vmesh/vmesh/xds/translate"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// CredentialPrefix starts the SDS name of a credentialName, as Istio's
// gateways ask for it ("kubernetes://<credentialName>"); the CA of a
// MUTUAL server is "<that>-cacert".
const CredentialPrefix = "kubernetes://"

// CACertSuffix ends the SDS name of a credential's CA (Istio's SdsCaSuffix).
const CACertSuffix = "-cacert"

// The SDS names of the router's own mesh certificate and root (ISTIO_MUTUAL
// servers), as the sidecar's.
const (
	workloadSecret = "default"
	rootSecret     = "ROOTCA"
)

// Listeners returns one listener per Gateway port, "0.0.0.0_<port>"
// ("<bind>_<port>" for a server with bind), ascending: a filter chain per
// server (a plaintext HTTP port has one for all of its servers), matched
// by SNI for TLS. Their HTTP connection managers and tcp_proxies log as
// Istio's gateways do (sidecar.RouterAccessLogs).
func Listeners(v *model.View) ([]*listenerv3.Listener, error) {
	svs := servers(v)
	type key struct {
		bind string
		port uint32
	}
	byKey := map[key][]server{}
	var keys []key
	for _, s := range svs {
		k := key{s.spec.GetBind(), s.port()}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], s)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.port != b.port {
			return int(a.port) - int(b.port)
		}
		switch {
		case a.bind < b.bind:
			return -1
		case a.bind > b.bind:
			return 1
		}
		return 0
	})
	var out []*listenerv3.Listener
	for _, k := range keys {
		l, err := listener(v, k.bind, k.port, byKey[k])
		if err != nil {
			return nil, fmt.Errorf("proxy %s: listener %d: %w", v.Workload().ID, k.port, err)
		}
		if len(l.GetFilterChains()) > 0 {
			out = append(out, l)
		}
	}
	if err := sidecar.RouterAccessLogs(v, out); err != nil {
		return nil, fmt.Errorf("proxy %s: access log: %w", v.Workload().ID, err)
	}
	return out, nil
}

// listener is the listener of one port's servers.
func listener(v *model.View, bind string, port uint32, svs []server) (*listenerv3.Listener, error) {
	addr := bind
	if addr == "" {
		addr = "0.0.0.0"
	}
	name := addr + "_" + itoa(port)
	l := &listenerv3.Listener{
		Name:             name,
		Address:          translate.SocketAddress(addr, port),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
	}
	stat := "outbound_" + name
	// The AuthorizationPolicies and RequestAuthentications that select the
	// router are enforced on every chain, as on a sidecar's inbound
	// chains (Istio's gateways enforce them too): HTTP filters before the
	// router, network filters before tcp_proxy.
	policies := security.ForEnvoy(v)
	httpSec, err := policies.HTTPFilters()
	if err != nil {
		return nil, err
	}
	netSec, err := policies.NetworkFilters()
	if err != nil {
		return nil, err
	}
	httpDone := false
	sniSeen := map[string]bool{}
	for _, s := range svs {
		switch {
		case s.isHTTP():
			if httpDone {
				continue // every plaintext HTTP server of the port is in its one route configuration
			}
			httpDone = true
			l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
				Filters: []*listenerv3.Filter{sidecar.NetworkFilter(sidecar.HCMFilterName, sidecar.GatewayHCM(stat, s.routeName(), httpSec, sidecar.Tracing(v)))},
			})
		case s.terminatesHTTPS():
			ctx, err := downstreamTLS(s.spec.GetTls())
			if err != nil {
				continue // not served (VM1018): no chain, the server's connections are refused
			}
			fc := &listenerv3.FilterChain{
				Filters:         []*listenerv3.Filter{sidecar.NetworkFilter(sidecar.HCMFilterName, sidecar.GatewayHCM(stat, s.routeName(), httpSec, sidecar.Tracing(v)))},
				TransportSocket: sidecar.TLSSocket(ctx),
			}
			if sni := s.sniHosts(); len(sni) > 0 {
				fc.FilterChainMatch = &listenerv3.FilterChainMatch{ServerNames: sni}
			}
			l.FilterChains = append(l.FilterChains, fc)
		case s.spec.GetTls().GetMode() == networking.ServerTLSSettings_AUTO_PASSTHROUGH && !s.isHTTP():
			l.FilterChains = append(l.FilterChains, autoPassthroughChains(v, s)...)
		case s.spec.GetTls() != nil && s.spec.GetTls().GetMode() == networking.ServerTLSSettings_PASSTHROUGH:
			// (PASSTHROUGH is the mode's zero value: a server without
			// tls is not one.)
			l.FilterChains = append(l.FilterChains, passthroughChains(v, s, sniSeen, netSec)...)
		case s.terminatesTCP():
			// TLS terminated in front of tcp routes, as Istio's
			// createGatewayTCPFilterChainOpts: the server's SNI hosts,
			// its TLS (ISTIO_MUTUAL offers Istio's peer-exchange ALPN
			// too), the first applying tcp route.
			ctx, err := downstreamTLS(s.spec.GetTls())
			if err != nil {
				continue // not served (VM1018): no chain
			}
			if s.spec.GetTls().GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL {
				ctx.CommonTlsContext.AlpnProtocols = []string{"istio-peer-exchange", "h2", "http/1.1"}
			}
			fc := tcpChain(v, s, netSec)
			if fc == nil {
				continue
			}
			fc.TransportSocket = sidecar.TLSSocket(ctx)
			if sni := s.sniHosts(); len(sni) > 0 {
				fc.FilterChainMatch = &listenerv3.FilterChainMatch{ServerNames: sni}
			}
			l.FilterChains = append(l.FilterChains, fc)
		case s.spec.GetTls() == nil && (s.protocol() == "TCP" || s.protocol() == "TLS" || s.protocol() == "MONGO"):
			if fc := tcpChain(v, s, netSec); fc != nil {
				l.FilterChains = append(l.FilterChains, fc)
			}
		}
	}
	for _, fc := range l.GetFilterChains() {
		if fc.GetFilterChainMatch() != nil || fc.GetTransportSocket() != nil {
			l.ListenerFilters = []*listenerv3.ListenerFilter{sidecar.TLSInspector()}
			break
		}
	}
	return l, nil
}

// passthroughChains are a PASSTHROUGH server's filter chains, as Istio's
// buildGatewayNetworkFiltersFromTLSRoutes: per match of a tls route (with
// destinations) of the VirtualServices bound to its Gateway whose hosts
// the server's hosts match, a chain matching the match's sniHosts to a
// tcp_proxy of its destinations. A match whose port is another or whose
// gateways do not name the Gateway does not apply; one naming an SNI host
// an earlier chain of the port has is skipped whole (Envoy refuses two
// chains with one match).
func passthroughChains(v *model.View, s server, seen map[string]bool, sec []*listenerv3.Filter) []*listenerv3.FilterChain {
	var out []*listenerv3.FilterChain
	for _, vs := range v.VirtualServicesForGateway(s.gw) {
		if len(intersect(s.hostsFor(vs.Namespace), vs.Hosts)) == 0 {
			continue
		}
		for _, tr := range vs.Spec.GetTls() {
			if len(tr.GetRoute()) == 0 {
				continue
			}
			for _, m := range tr.GetMatch() {
				if !l4Match(m.GetPort(), m.GetGateways(), vs.Namespace, s) {
					continue
				}
				if slices.ContainsFunc(m.GetSniHosts(), func(h string) bool { return seen[h] }) {
					continue
				}
				for _, h := range m.GetSniHosts() {
					seen[h] = true
				}
				out = append(out, &listenerv3.FilterChain{
					FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: slices.Clone(m.GetSniHosts())},
					Filters:          append(slices.Clone(sec), sidecar.GatewayTCPProxy(v, vs, m.GetSniHosts()[0], s.port(), tr.GetRoute())),
				})
			}
		}
	}
	return out
}

// istioMTLSALPNs are the ALPNs an Istio mTLS client offers (Istio's
// allIstioMtlsALPNs): an AUTO_PASSTHROUGH chain matches only them.
var istioMTLSALPNs = []string{"istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"}

// autoPassthroughChains are an AUTO_PASSTHROUGH server's filter chains, as
// Istio's builtAutoPassthroughFilterChains: per service the router sees
// that is not mesh-external and whose host one of the server's hosts
// matches, per port that is not UDP and per DestinationRule subset, a
// chain matching the SNI "outbound_.<port>_.<subset>_.<host>" (the
// cluster a mesh client's mTLS names) and Istio's mTLS ALPNs to a
// tcp_proxy to that SNI-DNAT cluster (clusters.go). No VirtualService is
// needed and no policy applies: the client's mTLS passes through to the
// destination's sidecar, which enforces its own.
func autoPassthroughChains(v *model.View, s server) []*listenerv3.FilterChain {
	var hosts []string
	for _, h := range s.spec.GetHosts() {
		if _, host, ok := strings.Cut(h, "/"); ok {
			h = host
		}
		hosts = append(hosts, h)
	}
	var out []*listenerv3.FilterChain
	for _, svc := range v.Services() {
		if svc.MeshExternal || !slices.ContainsFunc(hosts, func(h string) bool { return subsetOf(svc.Hostname, h) }) {
			continue
		}
		for _, c := range v.ClustersOf([]*model.Service{svc}) {
			if strings.EqualFold(c.Port.Protocol, "UDP") {
				continue
			}
			name := sidecar.SNIDNATName(c.Port.Number, c.Subset, svc.Hostname)
			out = append(out, &listenerv3.FilterChain{
				FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{name}, ApplicationProtocols: slices.Clone(istioMTLSALPNs)},
				Filters:          []*listenerv3.Filter{sidecar.TCPProxyTo(name, name)},
			})
		}
	}
	return out
}

// autoPassthrough reports whether a served server of the router is
// AUTO_PASSTHROUGH: its SNI-DNAT clusters are then generated.
func autoPassthrough(v *model.View) bool {
	for _, s := range servers(v) {
		if s.spec.GetTls().GetMode() == networking.ServerTLSSettings_AUTO_PASSTHROUGH && !s.isHTTP() {
			return true
		}
	}
	return false
}

// tcpChain is a TCP server's (no TLS) filter chain, as Istio's
// buildGatewayNetworkFiltersFromTCPRoutes: the first tcp route (with
// destinations) of the VirtualServices bound to its Gateway, whose hosts
// the server's match, that applies to the server; nil when none does.
func tcpChain(v *model.View, s server, sec []*listenerv3.Filter) *listenerv3.FilterChain {
	for _, vs := range v.VirtualServicesForGateway(s.gw) {
		if len(intersect(s.hostsFor(vs.Namespace), vs.Hosts)) == 0 {
			continue
		}
		for _, tr := range vs.Spec.GetTcp() {
			applies := len(tr.GetMatch()) == 0
			for _, m := range tr.GetMatch() {
				applies = applies || l4Match(m.GetPort(), m.GetGateways(), vs.Namespace, s)
			}
			if !applies || len(tr.GetRoute()) == 0 {
				continue
			}
			host := vs.Hosts[0]
			return &listenerv3.FilterChain{Filters: append(slices.Clone(sec), sidecar.GatewayTCPProxy(v, vs, host, s.port(), tr.GetRoute()))}
		}
		// A TLSRoute's VirtualService on a server that does not pass TLS
		// through (it terminates, or is plain TCP): its tls routes, the
		// first whose match applies, as Istio's fallback to TLS blocks.
		if !vs.FromTLSRoute || s.passthrough() {
			continue
		}
		for _, tr := range vs.Spec.GetTls() {
			for _, m := range tr.GetMatch() {
				if l4Match(m.GetPort(), m.GetGateways(), vs.Namespace, s) {
					return &listenerv3.FilterChain{Filters: append(slices.Clone(sec), sidecar.GatewayTCPProxy(v, vs, vs.Hosts[0], s.port(), tr.GetRoute()))}
				}
			}
		}
	}
	return nil
}

// l4Match reports whether a tcp or tls match applies to server s, as
// Istio's l4SingleMatch for gateways: its port, when set, is the server's,
// and its gateways, when set, name s's Gateway (resolved in vsNamespace).
func l4Match(port uint32, gateways []string, vsNamespace string, s server) bool {
	if port != 0 && port != s.port() {
		return false
	}
	if len(gateways) == 0 {
		return true
	}
	for _, g := range gateways {
		if model.ResolveGatewayName(g, vsNamespace) == s.gw.Key() {
			return true
		}
	}
	return false
}

// downstreamTLS is a terminating server's TLS context, as Istio's
// BuildListenerTLSContext: ALPN h2 and http/1.1; the client's certificate
// required for MUTUAL and ISTIO_MUTUAL, checked (when sent) for
// OPTIONAL_MUTUAL; the server's protocol versions and cipher suites. The
// certificates and the client validation come from one of three sources,
// each as Istio's:
//
//   - ISTIO_MUTUAL: the router's mesh certificate ("default") and root
//     ("ROOTCA"), with the server's subjectAltNames, caCrl and
//     insecureSkipVerify (ApplyToCommonTLSContext);
//   - credentialName or credentialNames: "kubernetes://<name>" per name
//     (several: an RSA and an ECDSA certificate), for MUTUAL and
//     OPTIONAL_MUTUAL the roots of the (first) credential,
//     "kubernetes://<name>-cacert" (with its folder's CRL, ca.crl, when it
//     has one: agents/sds), with subjectAltNames,
//     verifyCertificateSpki, verifyCertificateHash and insecureSkipVerify;
//     for SIMPLE a static check of subjectAltNames only, when set
//     (ApplyCredentialSDSToServerCommonTLSContext);
//   - certificate files on the router (serverCertificate and privateKey,
//     or each of tlsCertificates) over the agent's SDS as
//     "file-cert:<cert>~<key>", for MUTUAL and OPTIONAL_MUTUAL the roots
//     "file-root:<caCertificates>" (else the mesh root), with
//     subjectAltNames, caCrl and insecureSkipVerify (fileTLS); the agent
//     serves the files when they are in a directory it allows (agents/sds,
//     files.go).
//
// What Istio leaves out, vmesh leaves out too, and warns (VM1022,
// filecert.NotApplied): the certificate pins on the ISTIO_MUTUAL and file
// branches and for SIMPLE, caCrl beside credentialNames,
// caCertCredentialName where no credential's roots apply. What vmesh does
// not serve is an error, and the listener has no chain for that server
// (VM1018, filecert.ServerProblem): caCertCredentialName where it would
// apply, a certificate or CRL file path that is not absolute and clean or
// holds '~'.
func downstreamTLS(t *networking.ServerTLSSettings) (*tlsv3.DownstreamTlsContext, error) {
	ctx := &tlsv3.DownstreamTlsContext{
		CommonTlsContext:         &tlsv3.CommonTlsContext{AlpnProtocols: []string{"h2", "http/1.1"}},
		RequireClientCertificate: wrapperspb.Bool(false),
	}
	mode := t.GetMode()
	if mode == networking.ServerTLSSettings_MUTUAL || mode == networking.ServerTLSSettings_ISTIO_MUTUAL {
		ctx.RequireClientCertificate = wrapperspb.Bool(true)
	}
	if why := filecert.ServerProblem(t); why != "" {
		return nil, fmt.Errorf("TLS mode %s: %s", mode, why)
	}
	c := ctx.CommonTlsContext
	switch {
	case mode == networking.ServerTLSSettings_ISTIO_MUTUAL:
		c.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{sidecar.SDSSecret(workloadSecret, true)}
		c.ValidationContextType = combined(clientValidation(t, false, true), sidecar.SDSSecret(rootSecret, true))
	case t.GetCredentialName() != "" || len(t.GetCredentialNames()) > 0:
		credentialTLS(c, t)
	default:
		fileTLS(c, t)
	}
	if mode == networking.ServerTLSSettings_SIMPLE || mode == networking.ServerTLSSettings_MUTUAL || mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL {
		if t.GetMinProtocolVersion() != networking.ServerTLSSettings_TLS_AUTO || t.GetMaxProtocolVersion() != networking.ServerTLSSettings_TLS_AUTO {
			c.TlsParams = &tlsv3.TlsParameters{
				TlsMinimumProtocolVersion: tlsVersion(t.GetMinProtocolVersion()),
				TlsMaximumProtocolVersion: tlsVersion(t.GetMaxProtocolVersion()),
			}
		}
		if len(t.GetCipherSuites()) > 0 {
			if c.TlsParams == nil {
				c.TlsParams = &tlsv3.TlsParameters{}
			}
			c.TlsParams.CipherSuites = t.GetCipherSuites()
		}
	}
	return ctx, nil
}

// credentialTLS fills a terminating server's TLS context from its
// credentialName or credentialNames, as Istio's
// ApplyCredentialSDSToServerCommonTLSContext: one SDS secret
// "kubernetes://<name>" per name, no initial fetch wait (a credential the
// agent does not hold fails the chain's handshakes, VM1019); for MUTUAL
// and OPTIONAL_MUTUAL the client's certificate checked against the first
// credential's roots ("kubernetes://<name>-cacert": one CA for all, as in
// Istio) with the server's subjectAltNames, certificate pins and
// insecureSkipVerify; for SIMPLE a static validation context of the
// subjectAltNames when there are some.
func credentialTLS(c *tlsv3.CommonTlsContext, t *networking.ServerTLSSettings) {
	names := t.GetCredentialNames()
	if len(names) == 0 {
		names = []string{t.GetCredentialName()}
	}
	for _, n := range names {
		c.TlsCertificateSdsSecretConfigs = append(c.TlsCertificateSdsSecretConfigs, sidecar.SDSSecret(CredentialPrefix+n, false))
	}
	switch {
	case filecert.Validates(t):
		c.ValidationContextType = combined(clientValidation(t, true, false), sidecar.SDSSecret(CredentialPrefix+names[0]+CACertSuffix, false))
	case len(t.GetSubjectAltNames()) > 0:
		c.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			MatchTypedSubjectAltNames: sanMatchers(t.GetSubjectAltNames()),
		}}
	}
}

// combined is a validation context of roots from SDS, with the static
// checks of cvc.
func combined(cvc *tlsv3.CertificateValidationContext, roots *tlsv3.SdsSecretConfig) *tlsv3.CommonTlsContext_CombinedValidationContext {
	return &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
		DefaultValidationContext:         cvc,
		ValidationContextSdsSecretConfig: roots,
	}}
}

// clientValidation is the static part of a server's check of client
// certificates: its subjectAltNames; with pins its verifyCertificateSpki
// and verifyCertificateHash (Istio applies them with credentials only);
// with crl its CRL file (caCrl: Envoy reads it when it loads the
// listener, as Istio's; credentials carry their own CRL); insecureSkipVerify
// accepts a chain the roots do not verify (Envoy's ACCEPT_UNTRUSTED).
func clientValidation(t *networking.ServerTLSSettings, pins, crl bool) *tlsv3.CertificateValidationContext {
	cvc := &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanMatchers(t.GetSubjectAltNames())}
	if pins {
		cvc.VerifyCertificateSpki = t.GetVerifyCertificateSpki()
		cvc.VerifyCertificateHash = t.GetVerifyCertificateHash()
	}
	if crl && t.GetCaCrl() != "" {
		cvc.Crl = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: t.GetCaCrl()}}
	}
	if t.GetInsecureSkipVerify().GetValue() {
		cvc.TrustChainVerification = tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED
	}
	return cvc
}

// sanTypes are the SAN types a server's subjectAltNames match: all four,
// as Envoy's match_subject_alt_names, which Istio sets, matches each name
// against DNS, URI, email and IP SANs alike (client certificates outside
// the mesh name themselves by any of them).
var sanTypes = []tlsv3.SubjectAltNameMatcher_SanType{
	tlsv3.SubjectAltNameMatcher_DNS, tlsv3.SubjectAltNameMatcher_URI, tlsv3.SubjectAltNameMatcher_EMAIL, tlsv3.SubjectAltNameMatcher_IP_ADDRESS,
}

// sanMatchers matches each of sans exactly, as a SAN of any type.
func sanMatchers(sans []string) []*tlsv3.SubjectAltNameMatcher {
	var out []*tlsv3.SubjectAltNameMatcher
	for _, san := range sans {
		for _, typ := range sanTypes {
			out = append(out, &tlsv3.SubjectAltNameMatcher{
				SanType: typ, Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}},
			})
		}
	}
	return out
}

func tlsVersion(v networking.ServerTLSSettings_TLSProtocol) tlsv3.TlsParameters_TlsProtocol {
	switch v {
	case networking.ServerTLSSettings_TLSV1_0:
		return tlsv3.TlsParameters_TLSv1_0
	case networking.ServerTLSSettings_TLSV1_1:
		return tlsv3.TlsParameters_TLSv1_1
	case networking.ServerTLSSettings_TLSV1_2:
		return tlsv3.TlsParameters_TLSv1_2
	case networking.ServerTLSSettings_TLSV1_3:
		return tlsv3.TlsParameters_TLSv1_3
	}
	return tlsv3.TlsParameters_TLS_AUTO
}
