package filestore

//lint:file-ignore SA1019 Istio warns about its deprecated fields (mirrorPercent, minimumRingSize, consecutiveErrors), so vmesh reads them

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode"

	"github.com/vmesh/vmesh/store"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// Istio's validation warnings.
//
// Istio's admission webhook (and `istioctl validate`) accepts some config
// with a warning; its analyzer reports those as IST0133 SchemaWarning, and
// the two about VirtualService rules as IST0130 and IST0131
// (virtualservice_rules.go). vmesh gives the same warnings, where Istio
// gives them, in its own words, with the field each one is about; the
// Istio function each mirrors is named on it. Where Istio's code drops a
// warning on the way up (the traffic policies of subsets and ports, the
// gateways of HTTP and TCP matches, a fault abort without an error type),
// so does vmesh: istio_warning_parity_test.go compares the two on Istio's
// own YAML, and tools/istio-oracle/warning-exceptions.txt lists where they
// differ on purpose.

// schemaWarnings adds the warnings Istio's own validation gives for one
// valid object.
func schemaWarnings(w *warner, o *store.Object) {
	switch spec := o.Spec.(type) {
	case *security.AuthorizationPolicy:
		emptySelectorWarning(w, "selector", spec.GetSelector() != nil, len(spec.GetSelector().GetMatchLabels()))
		denyRuleWarnings(w, spec)
	case *security.RequestAuthentication:
		emptySelectorWarning(w, "selector", spec.GetSelector() != nil, len(spec.GetSelector().GetMatchLabels()))
		for i, r := range spec.GetJwtRules() {
			privateJWKSWarnings(w, at("jwtRules", i)+".jwks", r.GetJwks())
		}
	case *security.PeerAuthentication:
		emptySelectorWarning(w, "selector", spec.GetSelector() != nil, len(spec.GetSelector().GetMatchLabels()))
	case *networking.DestinationRule:
		emptySelectorWarning(w, "workloadSelector", spec.GetWorkloadSelector() != nil, len(spec.GetWorkloadSelector().GetMatchLabels()))
		trafficPolicyWarnings(w, "trafficPolicy", spec.GetTrafficPolicy())
	case *networking.Sidecar:
		sidecarWarnings(w, o.Namespace, spec)
	case *networking.ServiceEntry:
		serviceEntryWarnings(w, spec)
	case *networking.WorkloadEntry:
		if spec.GetAddress() == "" {
			w.add("address", store.CodeSchemaWarning, "address is not set (network %s): Istio reaches such an entry only through that network's gateway", quote(spec.GetNetwork()))
		}
	case *telemetry.Telemetry:
		emptySelectorWarning(w, "selector", spec.GetSelector() != nil, len(spec.GetSelector().GetMatchLabels()))
		// Istio's validateTelemetryTracing: it uses the first entry's
		// first provider.
		if len(spec.GetTracing()) > 1 {
			w.add("tracing", store.CodeSchemaWarning, "multiple tracing is not currently supported")
		}
		for i, tr := range spec.GetTracing() {
			if len(tr.GetProviders()) > 1 {
				w.add(at("tracing", i)+".providers", store.CodeSchemaWarning, "multiple providers is not currently supported")
			}
		}
		for i, m := range spec.GetMetrics() {
			for j, o := range m.GetOverrides() {
				if _, empty := o.GetTagOverrides()[""]; empty {
					w.add(at(at("metrics", i)+".overrides", j)+".tagOverrides", store.CodeSchemaWarning, "tagOverrides.name may not be empty")
				}
			}
		}
	case *networking.Gateway:
		gatewayWarnings(w, spec)
	case *networking.VirtualService:
		virtualServiceWarnings(w, spec)
		unreachableRules(w, spec)
	}
}

// emptySelectorWarning is Istio's validateWorkloadSelector and
// ValidateAlphaWorkloadSelector: a selector without labels selects every
// workload of the namespace, which is what leaving it out says.
func emptySelectorWarning(w *warner, field string, set bool, labels int) {
	if set && labels == 0 {
		w.add(field, store.CodeSchemaWarning, "%s has no labels, so it selects every workload in the namespace: give it labels, or remove it to say so", field)
	}
}

// denyRuleWarnings is the DENY check of Istio's
// ValidateAuthorizationPolicy: a DENY rule whose from and to use only HTTP
// attributes (no ports, no principals, namespaces, service accounts or IP
// blocks) matches every connection to a TCP port, where no HTTP attribute
// can be checked, so it denies all TCP traffic the policy covers.
func denyRuleWarnings(w *warner, ap *security.AuthorizationPolicy) {
	if ap.GetAction() != security.AuthorizationPolicy_DENY {
		return
	}
	for i, r := range ap.GetRules() {
		if r == nil {
			continue
		}
		from, tcpFrom := false, false
		for _, f := range r.GetFrom() {
			if s := f.GetSource(); s != nil {
				from = true
				tcpFrom = tcpFrom || hasTCPSource(s)
			}
		}
		to, tcpTo := false, false
		for _, t := range r.GetTo() {
			if op := t.GetOperation(); op != nil {
				to = true
				tcpTo = tcpTo || len(op.GetPorts()) > 0 || len(op.GetNotPorts()) > 0
			}
		}
		const fix = "on each TCP port the policy covers (add to.operation.ports to keep it to HTTP ports)"
		switch {
		case to && !tcpTo:
			w.add(at("rules", i), store.CodeSchemaWarning, "the operations of this DENY rule name only HTTP attributes (no ports), which a TCP port cannot check: there the rule denies every connection its other conditions match, %s", fix)
		case from && !to && !tcpFrom:
			w.add(at("rules", i), store.CodeSchemaWarning, "the sources of this DENY rule name no principals, namespaces, service accounts or IP blocks, and it has no operation: a TCP port checks nothing else, so there the rule denies every connection, %s", fix)
		}
	}
}

// hasTCPSource reports whether a source names something a TCP connection
// carries (Istio's list: principals, namespaces, service accounts, IP
// blocks, each with its not-form).
func hasTCPSource(s *security.Source) bool {
	for _, l := range [][]string{s.GetPrincipals(), s.GetNotPrincipals(), s.GetNamespaces(), s.GetNotNamespaces(),
		s.GetIpBlocks(), s.GetNotIpBlocks(), s.GetRemoteIpBlocks(), s.GetNotRemoteIpBlocks(),
		s.GetServiceAccounts(), s.GetNotServiceAccounts()} {
		if len(l) > 0 {
			return true
		}
	}
	return false
}

// privateJWKSWarnings is Istio's warnPrivateJwksKeys: an inline key set
// (or single key) whose key holds private material (an RSA, EC or OKP key
// with "d", or a symmetric "oct" key). Verification uses public keys only,
// so the secret is published in the config for nothing.
func privateJWKSWarnings(w *warner, field, jwks string) {
	if jwks == "" {
		return
	}
	var set struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal([]byte(jwks), &set); err != nil {
		return
	}
	if set.Keys == nil {
		var key map[string]json.RawMessage
		if json.Unmarshal([]byte(jwks), &key) == nil && key["kty"] != nil {
			set.Keys = append(set.Keys, key)
		}
	}
	for i, k := range set.Keys {
		var kty string
		_ = json.Unmarshal(k["kty"], &kty)
		_, d := k["d"]
		switch {
		case kty == "oct":
			w.add(field, store.CodeSchemaWarning, "key %d is a symmetric (oct) key: its secret is in the config, and only public keys verify tokens; publish the public key only", i)
		case d && (kty == "RSA" || kty == "EC" || kty == "OKP"):
			w.add(field, store.CodeSchemaWarning, "key %d (%s) holds its private part (\"d\"): only public keys verify tokens, so remove the private members from the config", i, kty)
		}
	}
}

// trafficPolicyWarnings is the warning part of Istio's
// validateTrafficPolicy, for a DestinationRule's own traffic policy (Istio
// drops the warnings of its subsets' and port-level policies): the
// deprecated outlierDetection.consecutiveErrors and
// consistentHash.minimumRingSize, and failover without outlierDetection.
func trafficPolicyWarnings(w *warner, path string, tp *networking.TrafficPolicy) {
	if tp == nil {
		return
	}
	od := tp.GetOutlierDetection()
	if od.GetConsecutiveErrors() != 0 {
		w.add(path+".outlierDetection.consecutiveErrors", store.CodeSchemaWarning, "consecutiveErrors is deprecated: use consecutive5xxErrors or consecutiveGatewayErrors")
	}
	lb := tp.GetLoadBalancer()
	if lb.GetConsistentHash().GetMinimumRingSize() != 0 {
		w.add(path+".loadBalancer.consistentHash.minimumRingSize", store.CodeSchemaWarning, "minimumRingSize is deprecated: use consistentHash.ringHash.minimumRingSize")
	}
	if od != nil {
		return
	}
	for _, s := range []struct {
		field            string
		failover, labels int
	}{
		{path + ".loadBalancer.localityLbSetting", len(lb.GetLocalityLbSetting().GetFailover()), len(lb.GetLocalityLbSetting().GetFailoverPriority())},
		{path + ".loadBalancer.zoneAwareLbSetting", len(lb.GetZoneAwareLbSetting().GetFailover()), len(lb.GetZoneAwareLbSetting().GetFailoverPriority())},
	} {
		field := s.field + ".failover"
		if s.failover == 0 {
			field = s.field + ".failoverPriority"
		}
		if s.failover+s.labels > 0 {
			w.add(field, store.CodeSchemaWarning, "failover needs outlierDetection: without it no endpoint is ever ejected, so traffic never fails over (add trafficPolicy.outlierDetection)")
		}
	}
}

// sidecarWarnings is the warning part of Istio's ValidateSidecar: a
// workloadSelector without labels, HTTP connection pool settings on an
// ingress port that is not HTTP, and egress hosts a listener already
// selects.
func sidecarWarnings(w *warner, namespace string, sc *networking.Sidecar) {
	emptySelectorWarning(w, "workloadSelector", sc.GetWorkloadSelector() != nil, len(sc.GetWorkloadSelector().GetLabels()))
	for i, in := range sc.GetIngress() {
		if in == nil || in.GetPort() == nil {
			continue
		}
		path := at("ingress", i)
		serverTLSWarnings(w, path+".tls", in.GetTls())
		if p := in.GetPort(); in.GetConnectionPool().GetHttp() != nil && !isHTTPProtocol(p.GetProtocol()) {
			w.add(path+".connectionPool.http", store.CodeSchemaWarning, "port %d (%s) is not HTTP (protocol %s): its HTTP connection pool settings do not apply, only the TCP ones", p.GetNumber(), quote(p.GetName()), quote(p.GetProtocol()))
		}
	}
	for i, e := range sc.GetEgress() {
		if e != nil {
			egressHostWarnings(w, at("egress", i)+".hosts", namespace, e.GetHosts())
		}
	}
}

// egressHostWarnings: an egress host that an earlier host of the same
// listener already selects (the same, or "ns/*" before "ns/name"), and
// "*/*" beside hosts of a namespace, which it selects too. "~" exclusions
// and hosts without a namespace are not counted, as in Istio.
func egressHostWarnings(w *warner, path, namespace string, hosts []string) {
	seen := map[string]map[string]bool{} // namespace -> names
	all := -1                            // the index of "*/*"
	for j, h := range hosts {
		ns, name, ok := strings.Cut(h, "/")
		if !ok || strings.HasPrefix(ns, "~") {
			continue
		}
		if ns == "." {
			ns = namespace
		}
		names := seen[ns]
		if names == nil {
			names = map[string]bool{}
			seen[ns] = names
		}
		if (name == "*" && len(names) > 0) || (name != "*" && (names[name] || names["*"])) {
			w.add(at(path, j), store.CodeSchemaWarning, "egress host %s is already selected by an earlier host of this listener", quote(h))
		}
		names[name] = true
		if ns == "*" && name == "*" && all < 0 {
			all = j
		}
	}
	if all >= 0 && len(seen) > 1 {
		w.add(at(path, all), store.CodeSchemaWarning, `"*/*" selects every host of every namespace: the listener's other hosts add nothing`)
	}
}

// serviceEntryWarnings is the warning part of Istio's ValidateServiceEntry.
func serviceEntryWarnings(w *warner, se *networking.ServiceEntry) {
	emptySelectorWarning(w, "workloadSelector", se.GetWorkloadSelector() != nil, len(se.GetWorkloadSelector().GetLabels()))
	unaddressedTCPPortWarnings(w, se)
	if se.GetResolution() != networking.ServiceEntry_DYNAMIC_DNS {
		for i, h := range se.GetHosts() {
			if h != "*" && strings.Contains(h, "*") && !strings.HasPrefix(h, "*.") {
				w.add(at("hosts", i), store.CodeSchemaWarning, "host %s is a partial wildcard: only \"*.\" at the start of a host is a wildcard (or use resolution DYNAMIC_DNS)", quote(h))
			}
		}
	}
	switch se.GetResolution() {
	case networking.ServiceEntry_NONE:
		if se.GetWorkloadSelector() != nil {
			w.add("workloadSelector", store.CodeSchemaWarning, "resolution NONE has no endpoints, so the workloads workloadSelector selects are not used (use resolution STATIC)")
		}
	case networking.ServiceEntry_STATIC:
		for i, e := range se.GetEndpoints() {
			if e != nil && e.GetAddress() == "" {
				w.add(at("endpoints", i)+".address", store.CodeSchemaWarning, "address is not set (network %s): Istio reaches such an endpoint only through that network's gateway", quote(e.GetNetwork()))
			}
		}
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		if len(se.GetAddresses()) == 0 || len(se.GetHosts()) < 2 {
			return
		}
		for i, p := range se.GetPorts() {
			if p != nil && carriesTCP(p.GetProtocol()) {
				w.add(at("ports", i), store.CodeSchemaWarning, "port %d carries TCP (protocol %s): a connection to the addresses cannot say which of the %d hosts it is for (give each host a ServiceEntry of its own)", p.GetNumber(), quote(p.GetProtocol()), len(se.GetHosts()))
				return
			}
		}
	}
}

// unaddressedTCPPortWarnings is Istio's warning that a TCP (or unset
// protocol) port needs addresses when IP auto-allocation is off, where it
// holds for vmesh. vmesh allocates a VIP to each ServiceEntry host without
// addresses (model/vip.go), as Istio does with auto-allocation on, but not
// with resolution NONE (nor does Istio) or for a wildcard host. Without a
// VIP a TCP port is served by the catch-all chain of the port's 0.0.0.0
// listener, which takes every connection to the port that no address
// claims, for the first such service only. Where vmesh allocates, Istio
// warns and vmesh does not (warning-exceptions.txt).
func unaddressedTCPPortWarnings(w *warner, se *networking.ServiceEntry) {
	if len(se.GetAddresses()) > 0 {
		return
	}
	why := "resolution NONE"
	if se.GetResolution() != networking.ServiceEntry_NONE {
		i := slices.IndexFunc(se.GetHosts(), func(h string) bool { return strings.HasPrefix(h, "*") })
		if i < 0 {
			return
		}
		why = "wildcard host " + quote(se.GetHosts()[i])
	}
	for i, p := range se.GetPorts() {
		if p == nil || (p.GetProtocol() != "" && p.GetProtocol() != "TCP") {
			continue
		}
		proto := "protocol TCP"
		if p.GetProtocol() == "" {
			proto = "no protocol: TCP"
		}
		w.add(at("ports", i), store.CodeSchemaWarning, "port %d (%s) has no address: with %s no VIP is allocated, so the port's catch-all listener takes every connection to port %d that no service address claims, for one such ServiceEntry only (set addresses)", p.GetNumber(), proto, why, p.GetNumber())
	}
}

// carriesTCP is Istio's protocol.Instance IsTCP: the protocols whose
// connections are routed as TCP, TLS included.
func carriesTCP(p string) bool {
	switch strings.ToLower(p) {
	case "tcp", "https", "tls", "mongo", "redis", "mysql":
		return true
	}
	return false
}

// gatewayWarnings is the warning part of Istio's ValidateGateway: each
// server's TLS settings, and tls.httpsRedirect on a server that is not
// HTTP.
func gatewayWarnings(w *warner, gw *networking.Gateway) {
	for i, s := range gw.GetServers() {
		if s == nil {
			continue
		}
		path := at("servers", i)
		serverTLSWarnings(w, path+".tls", s.GetTls())
		if s.GetPort() != nil && !isHTTPProtocol(s.GetPort().GetProtocol()) && s.GetTls().GetHttpsRedirect() {
			w.add(path+".tls.httpsRedirect", store.CodeSchemaWarning, "httpsRedirect answers plain HTTP requests, and this server is %s, not HTTP: it has no effect here", quote(s.GetPort().GetProtocol()))
		}
	}
}

// serverTLSWarnings is the warning part of Istio's validateTLSOptions, for
// a Gateway server's or a Sidecar ingress listener's tls: a TLS version
// below 1.2 without cipher suites, cipher suites that are not known or
// are listed twice, and certificates on a passthrough server. (Its
// warning about more than 2 tlsCertificates never applies: the CRD,
// and vmesh, refuse them.)
func serverTLSWarnings(w *warner, path string, tls *networking.ServerTLSSettings) {
	if tls == nil {
		return
	}
	switch v := tls.GetMinProtocolVersion(); v {
	case networking.ServerTLSSettings_TLSV1_0, networking.ServerTLSSettings_TLSV1_1:
		if len(tls.GetCipherSuites()) == 0 {
			w.add(path+".minProtocolVersion", store.CodeSchemaWarning, "minProtocolVersion %s without cipherSuites: the default suites are for TLS 1.2 and later, so older clients cannot connect (list cipher suites they support)", v)
		}
	}
	cipherSuiteWarnings(w, path+".cipherSuites", tls.GetCipherSuites())
	if tls.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL {
		return
	}
	if m := tls.GetMode(); m == networking.ServerTLSSettings_PASSTHROUGH || m == networking.ServerTLSSettings_AUTO_PASSTHROUGH {
		if set := certificateFields(tls); len(set) > 0 {
			w.add(path+"."+set[0], store.CodeSchemaWarning, "mode %s does not terminate TLS, so %s %s ignored", m, strings.Join(set, ", "), plural(len(set), "is", "are"))
		}
	}
}

// cipherSuiteWarnings: cipher suites Envoy does not know are ignored, and
// so is a suite listed twice; one warning for each kind, at its first.
func cipherSuiteWarnings(w *warner, path string, suites []string) {
	var invalid, dups []string
	firstInvalid, firstDup := -1, -1
	seen := map[string]bool{}
	for i, cs := range suites {
		switch {
		case !knownCipherSuite(cs):
			if firstInvalid < 0 {
				firstInvalid = i
			}
			invalid = append(invalid, cs)
		case seen[cs]:
			if firstDup < 0 {
				firstDup = i
			}
			dups = append(dups, cs)
		}
		seen[cs] = true
	}
	if firstInvalid >= 0 {
		w.add(at(path, firstInvalid), store.CodeSchemaWarning, "unknown cipher suites are ignored: %s", strings.Join(sortedUnique(invalid), ", "))
	}
	if firstDup >= 0 {
		w.add(at(path, firstDup), store.CodeSchemaWarning, "cipher suites listed more than once are used once: %s", strings.Join(sortedUnique(dups), ", "))
	}
}

// knownCipherSuite is Istio's IsValidCipherSuite: a name of BoringSSL's
// that Istio lists, "" or "ALL", or an expression that does not start
// with a letter or digit (BoringSSL's "-", "+", "!" and "[" operators, not
// parsed).
func knownCipherSuite(cs string) bool {
	if cs == "" || cs == "ALL" {
		return true
	}
	if r := rune(cs[0]); !unicode.IsNumber(r) && !unicode.IsLetter(r) {
		return true
	}
	switch cs {
	case "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
		"ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
		"ECDHE-ECDSA-AES128-SHA", "ECDHE-RSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA", "ECDHE-RSA-AES256-SHA",
		"AES128-GCM-SHA256", "AES256-GCM-SHA384", "AES128-SHA", "AES256-SHA", "DES-CBC3-SHA":
		return true
	}
	return false
}

// certificateFields lists the certificate fields a server's tls sets.
func certificateFields(tls *networking.ServerTLSSettings) []string {
	var set []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"caCrl", tls.GetCaCrl() != ""}, {"serverCertificate", tls.GetServerCertificate() != ""}, {"privateKey", tls.GetPrivateKey() != ""},
		{"caCertificates", tls.GetCaCertificates() != ""}, {"tlsCertificates", len(tls.GetTlsCertificates()) > 0},
		{"credentialName", tls.GetCredentialName() != ""}, {"credentialNames", len(tls.GetCredentialNames()) > 0},
	} {
		if f.set {
			set = append(set, f.name)
		}
	}
	return set
}

// virtualServiceWarnings is the warning part of Istio's
// ValidateVirtualService but for its rule analysis (unreachableRules): a
// gateway named the legacy way, the deprecated mirrorPercent, a large
// direct response body, and an IP address as an SNI host.
func virtualServiceWarnings(w *warner, vs *networking.VirtualService) {
	legacyGatewayNameWarning(w, "gateways", vs.GetGateways())
	for i, r := range vs.GetHttp() {
		if r == nil {
			continue
		}
		path := at("http", i)
		if r.GetMirrorPercent() != nil {
			w.add(path+".mirrorPercent", store.CodeSchemaWarning, "mirrorPercent is deprecated: use mirrorPercentage")
		}
		if body := r.GetDirectResponse().GetBody(); len(body.GetString_())+len(body.GetBytes()) > 100<<10 {
			w.add(path+".directResponse.body", store.CodeSchemaWarning, "a direct response body over 100 KiB is sent to every proxy with the routes, which slows config distribution")
		}
	}
	for i, r := range vs.GetTls() {
		for j, m := range r.GetMatch() {
			if m == nil {
				continue
			}
			mp := at(at("tls", i)+".match", j)
			for k, h := range m.GetSniHosts() {
				if sniHostProblem(h, vs) != "" && isIP(h) {
					w.add(at(mp+".sniHosts", k), store.CodeSchemaWarning, "SNI host %s is an IP address: SNI names hosts, not addresses, and most clients send none for an IP", quote(h))
				}
			}
			legacyGatewayNameWarning(w, mp+".gateways", m.GetGateways())
		}
	}
}

// legacyGatewayNameWarning is Istio's validateGatewayNames: a gateway
// named "name.namespace" (the legacy form) rather than "namespace/name".
// Like Istio (and checkGatewayNames) it stops at the first name without a
// "/".
func legacyGatewayNameWarning(w *warner, path string, names []string) {
	for i, g := range names {
		if strings.Contains(g, "/") {
			continue
		}
		if parts := strings.Split(g, "."); len(parts) > 1 {
			w.add(at(path, i), store.CodeSchemaWarning, "gateway %s uses the legacy name.namespace form: write it as %s", quote(g), quote(parts[1]+"/"+parts[0]))
		}
		return
	}
}

// sortedUnique returns the distinct values, sorted.
func sortedUnique(values []string) []string {
	out := slices.Clone(values)
	slices.Sort(out)
	return slices.Compact(out)
}

// plural picks the singular or plural word for n things.
func plural(n int, one, more string) string {
	if n == 1 {
		return one
	}
	return more
}
