package filestore

//lint:file-ignore SA1019 Istio's deprecated fields (warmupDurationSecs, consecutiveErrors) are validated because Istio still accepts them

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
)

// Problem is one semantic validation failure inside an object's spec.
type Problem struct {
	Field   string // path inside spec, e.g. http[1].route[0].weight
	Message string
}

type validator struct{ problems []Problem }

func (v *validator) add(field, format string, args ...any) {
	v.problems = append(v.problems, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) check(field, msg string) {
	if msg != "" {
		v.problems = append(v.problems, Problem{Field: field, Message: msg})
	}
}

func at(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// Validate checks an object against the rules Istio itself enforces and
// returns every problem found. Labels and names in metadata are checked by
// the decoder.
func Validate(o *Object) []Problem {
	v := &validator{}
	switch spec := o.Spec.(type) {
	case *networking.ServiceEntry:
		validateServiceEntry(v, spec)
	case *networking.WorkloadEntry:
		validateWorkloadEntry(v, "", spec, false)
	case *networking.WorkloadGroup:
		validateWorkloadGroup(v, spec)
	case *networking.VirtualService:
		validateVirtualService(v, spec)
	case *networking.DestinationRule:
		validateDestinationRule(v, spec)
	case *networking.Sidecar:
		validateSidecar(v, spec)
	case *networking.Gateway:
		validateGateway(v, spec)
	case *security.PeerAuthentication:
		validatePeerAuthentication(v, spec)
	case *security.AuthorizationPolicy:
		validateAuthorizationPolicy(v, spec)
	default:
		v.add("", "unsupported spec type %T", o.Spec)
	}
	return v.problems
}

func validateExportTo(v *validator, exportTo []string) {
	for i, e := range exportTo {
		switch e {
		case ".", "*":
		case "~":
			if len(exportTo) > 1 {
				v.add(at("exportTo", i), `"~" (hide everywhere) must be the only exportTo entry`)
			}
		default:
			v.check(at("exportTo", i), checkDNS1123Label(e))
		}
	}
}

func validateServiceEntry(v *validator, se *networking.ServiceEntry) {
	if len(se.Hosts) == 0 {
		v.add("hosts", "a ServiceEntry needs at least one host")
	}
	for i, h := range se.Hosts {
		v.check(at("hosts", i), checkHost(h, false))
	}
	for i, a := range se.Addresses {
		v.check(at("addresses", i), checkIPOrCIDR(a))
	}
	validateExportTo(v, se.ExportTo)
	portNames := map[string]bool{}
	portNumbers := map[uint32]bool{}
	if len(se.Ports) == 0 && se.Resolution != networking.ServiceEntry_NONE {
		v.add("ports", "a ServiceEntry needs at least one port unless its resolution is NONE")
	}
	for i, p := range se.Ports {
		path := at("ports", i)
		v.check(path+".number", checkPort(p.Number))
		if p.TargetPort != 0 {
			v.check(path+".targetPort", checkPort(p.TargetPort))
		}
		v.check(path+".name", checkPortName(p.Name))
		if p.Protocol != "" {
			v.check(path+".protocol", checkProtocol(p.Protocol))
		}
		if portNames[p.Name] {
			v.add(path+".name", "port name %s is used twice", quote(p.Name))
		}
		if portNumbers[p.Number] {
			v.add(path+".number", "port number %d is used twice", p.Number)
		}
		portNames[p.Name], portNumbers[p.Number] = true, true
	}
	if se.WorkloadSelector != nil && len(se.Endpoints) > 0 {
		v.add("workloadSelector", "workloadSelector and endpoints are mutually exclusive")
	}
	if se.WorkloadSelector != nil {
		checkLabels(v, "workloadSelector.labels", se.WorkloadSelector.Labels)
	}
	switch se.Resolution {
	case networking.ServiceEntry_NONE:
		if len(se.Endpoints) > 0 {
			v.add("endpoints", "endpoints are not allowed with resolution NONE")
		}
	case networking.ServiceEntry_STATIC:
		for i, e := range se.Endpoints {
			if e.Address != "" && !isIP(e.Address) && !strings.HasPrefix(e.Address, "unix://") {
				v.add(at("endpoints", i)+".address", "%s must be an IP address or unix:// path with resolution STATIC", quote(e.Address))
			}
		}
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		if len(se.Endpoints) == 0 && se.WorkloadSelector == nil {
			for i, h := range se.Hosts {
				if isWildcard(h) {
					v.add(at("hosts", i), "wildcard host %s needs endpoints with resolution %s", quote(h), se.Resolution)
				}
			}
		}
		if se.Resolution == networking.ServiceEntry_DNS_ROUND_ROBIN && len(se.Endpoints) > 1 {
			v.add("endpoints", "resolution DNS_ROUND_ROBIN allows at most one endpoint")
		}
		for i, e := range se.Endpoints {
			if !isIP(e.Address) {
				v.check(at("endpoints", i)+".address", checkHost(e.Address, false))
			}
		}
	}
	if len(se.Addresses) > 0 && se.Resolution == networking.ServiceEntry_NONE {
		for i, a := range se.Addresses {
			if strings.Contains(a, "/") && len(se.Hosts) > 1 {
				v.add(at("addresses", i), "a CIDR address needs a single host")
			}
		}
	}
	for i, e := range se.Endpoints {
		path := at("endpoints", i)
		validateWorkloadEntry(v, path, e, true)
		for name := range e.Ports {
			if !portNames[name] {
				v.add(path+".ports."+name, "port %s is not one of the ServiceEntry's port names", quote(name))
			}
		}
	}
}

func validateWorkloadEntry(v *validator, path string, we *networking.WorkloadEntry, inline bool) {
	p := func(f string) string {
		if path == "" {
			return f
		}
		return path + "." + f
	}
	switch {
	case we.Address == "" && we.Network == "" && !inline:
		v.add(p("address"), "address is required unless network is set")
	case we.Address == "" && inline:
		v.add(p("address"), "address is required")
	case we.Address != "" && !isIP(we.Address) && !strings.HasPrefix(we.Address, "unix://"):
		v.check(p("address"), checkHost(we.Address, false))
	}
	for name, port := range we.Ports {
		v.check(p("ports."+name), checkPortName(name))
		v.check(p("ports."+name), checkPort(port))
	}
	checkLabels(v, p("labels"), we.Labels)
	if we.ServiceAccount != "" {
		v.check(p("serviceAccount"), checkDNS1123Subdomain(we.ServiceAccount))
	}
}

func validateWorkloadGroup(v *validator, wg *networking.WorkloadGroup) {
	if wg.Template == nil {
		v.add("template", "template is required")
	} else {
		if wg.Template.Address != "" {
			v.add("template.address", "address must not be set in a template: each VM registers its own")
		}
		for name, port := range wg.Template.Ports {
			v.check("template.ports."+name, checkPortName(name))
			v.check("template.ports."+name, checkPort(port))
		}
		checkLabels(v, "template.labels", wg.Template.Labels)
		if wg.Template.ServiceAccount != "" {
			v.check("template.serviceAccount", checkDNS1123Subdomain(wg.Template.ServiceAccount))
		}
	}
	if wg.Metadata != nil {
		checkLabels(v, "metadata.labels", wg.Metadata.Labels)
	}
	if pr := wg.Probe; pr != nil {
		if pr.HealthCheckMethod == nil {
			v.add("probe", "a probe needs one of httpGet, tcpSocket, exec or grpc")
		}
		if h := pr.GetHttpGet(); h != nil {
			v.check("probe.httpGet.port", checkPort(h.Port))
		}
		if t := pr.GetTcpSocket(); t != nil {
			v.check("probe.tcpSocket.port", checkPort(t.Port))
		}
		if e := pr.GetExec(); e != nil && len(e.Command) == 0 {
			v.add("probe.exec.command", "command must not be empty")
		}
		if pr.PeriodSeconds < 0 || pr.TimeoutSeconds < 0 || pr.InitialDelaySeconds < 0 || pr.SuccessThreshold < 0 || pr.FailureThreshold < 0 {
			v.add("probe", "probe timings and thresholds must not be negative")
		}
	}
}

func checkDurationMin(v *validator, field string, d *durationpb.Duration, min time.Duration) {
	if d == nil {
		return
	}
	if d.AsDuration() < min {
		v.add(field, "duration %s must be at least %s", d.AsDuration(), min)
	}
}

func checkPercent(v *validator, field string, p float64) {
	if p < 0 || p > 100 {
		v.add(field, "percentage %g must be in 0-100", p)
	}
}

func checkStringMatch(v *validator, field string, m *networking.StringMatch) {
	if m == nil {
		return
	}
	if m.MatchType == nil {
		v.add(field, "one of exact, prefix or regex is required")
		return
	}
	if re, ok := m.MatchType.(*networking.StringMatch_Regex); ok {
		if _, err := regexp.Compile(re.Regex); err != nil {
			v.add(field+".regex", "invalid regular expression: %v", err)
		}
	}
}

func checkHeaderName(v *validator, field, name string) {
	if name == "" || strings.ToLower(name) != name {
		v.add(field, "header name %s must be lower-case and not empty", quote(name))
	}
}

func validateVirtualService(v *validator, vs *networking.VirtualService) {
	if len(vs.Hosts) == 0 {
		v.add("hosts", "a VirtualService needs at least one host")
	}
	for i, h := range vs.Hosts {
		v.check(at("hosts", i), checkHost(h, true))
	}
	for i, g := range vs.Gateways {
		if g == "" {
			v.add(at("gateways", i), "gateway name must not be empty")
		}
	}
	validateExportTo(v, vs.ExportTo)
	if len(vs.Http)+len(vs.Tcp)+len(vs.Tls) == 0 {
		v.add("http", "a VirtualService needs at least one http, tcp or tls route")
	}
	routeNames := map[string]bool{}
	for i, r := range vs.Http {
		path := at("http", i)
		if r.Name != "" {
			if routeNames[r.Name] {
				v.add(path+".name", "route name %s is used twice", quote(r.Name))
			}
			routeNames[r.Name] = true
		}
		validateHTTPRoute(v, path, r)
	}
	for i, r := range vs.Tcp {
		path := at("tcp", i)
		checkWeights(v, path+".route", len(r.Route), func(j int) (*networking.Destination, int32) { return r.Route[j].Destination, r.Route[j].Weight })
		for j, m := range r.Match {
			if m.Port != 0 {
				v.check(at(path+".match", j)+".port", checkPort(m.Port))
			}
			for k, a := range m.DestinationSubnets {
				v.check(at(at(path+".match", j)+".destinationSubnets", k), checkIPOrCIDR(a))
			}
		}
	}
	for i, r := range vs.Tls {
		path := at("tls", i)
		if len(r.Match) == 0 {
			v.add(path+".match", "a TLS route needs at least one match")
		}
		for j, m := range r.Match {
			if len(m.SniHosts) == 0 {
				v.add(at(path+".match", j)+".sniHosts", "sniHosts is required")
			}
		}
		checkWeights(v, path+".route", len(r.Route), func(j int) (*networking.Destination, int32) { return r.Route[j].Destination, r.Route[j].Weight })
	}
}

func validateHTTPRoute(v *validator, path string, r *networking.HTTPRoute) {
	hasRoute, hasRedirect, hasDirect := len(r.Route) > 0, r.Redirect != nil, r.DirectResponse != nil
	switch {
	case !hasRoute && !hasRedirect && !hasDirect && r.Delegate == nil:
		v.add(path+".route", "an HTTP route needs route, redirect, directResponse or delegate")
	case hasRoute && (hasRedirect || hasDirect):
		v.add(path+".route", "route cannot be combined with redirect or directResponse")
	case hasRedirect && hasDirect:
		v.add(path+".redirect", "redirect cannot be combined with directResponse")
	}
	for j, m := range r.Match {
		mp := at(path+".match", j)
		checkStringMatch(v, mp+".uri", m.Uri)
		checkStringMatch(v, mp+".scheme", m.Scheme)
		checkStringMatch(v, mp+".method", m.Method)
		checkStringMatch(v, mp+".authority", m.Authority)
		for name, hm := range m.Headers {
			checkHeaderName(v, mp+".headers."+name, name)
			if hm != nil && hm.MatchType != nil {
				checkStringMatch(v, mp+".headers."+name, hm)
			}
		}
		for name, hm := range m.WithoutHeaders {
			checkHeaderName(v, mp+".withoutHeaders."+name, name)
			if hm != nil && hm.MatchType != nil {
				checkStringMatch(v, mp+".withoutHeaders."+name, hm)
			}
		}
		for name, qm := range m.QueryParams {
			if qm != nil && qm.MatchType != nil {
				checkStringMatch(v, mp+".queryParams."+name, qm)
			}
		}
		if m.Port != 0 {
			v.check(mp+".port", checkPort(m.Port))
		}
		checkLabels(v, mp+".sourceLabels", m.SourceLabels)
	}
	checkWeights(v, path+".route", len(r.Route), func(j int) (*networking.Destination, int32) { return r.Route[j].Destination, r.Route[j].Weight })
	checkDurationMin(v, path+".timeout", r.Timeout, time.Millisecond)
	if rt := r.Retries; rt != nil {
		if rt.Attempts < 0 {
			v.add(path+".retries.attempts", "attempts must not be negative")
		}
		checkDurationMin(v, path+".retries.perTryTimeout", rt.PerTryTimeout, time.Millisecond)
		for _, on := range strings.Split(rt.RetryOn, ",") {
			on = strings.TrimSpace(on)
			if on == "" {
				continue
			}
			if _, err := strconv.Atoi(on); err == nil {
				continue
			}
			if !retryOnPolicies[on] {
				v.add(path+".retries.retryOn", "unknown retry condition %s", quote(on))
			}
		}
	}
	if f := r.Fault; f != nil {
		if d := f.Delay; d != nil {
			if d.Percentage != nil {
				checkPercent(v, path+".fault.delay.percentage.value", d.Percentage.Value)
			}
			if d.GetFixedDelay() == nil && d.GetExponentialDelay() == nil {
				v.add(path+".fault.delay.fixedDelay", "fixedDelay is required")
			}
			checkDurationMin(v, path+".fault.delay.fixedDelay", d.GetFixedDelay(), time.Millisecond)
		}
		if a := f.Abort; a != nil {
			if a.Percentage != nil {
				checkPercent(v, path+".fault.abort.percentage.value", a.Percentage.Value)
			}
			switch e := a.ErrorType.(type) {
			case *networking.HTTPFaultInjection_Abort_HttpStatus:
				if e.HttpStatus < 200 || e.HttpStatus > 599 {
					v.add(path+".fault.abort.httpStatus", "HTTP status %d must be in 200-599", e.HttpStatus)
				}
			case *networking.HTTPFaultInjection_Abort_GrpcStatus:
				if _, ok := grpcStatusCodes[e.GrpcStatus]; !ok {
					v.add(path+".fault.abort.grpcStatus", "unknown gRPC status %s", quote(e.GrpcStatus))
				}
			case nil:
				v.add(path+".fault.abort", "httpStatus or grpcStatus is required")
			}
		}
	}
	if r.Mirror != nil {
		checkDestination(v, path+".mirror", r.Mirror)
	}
	for j, m := range r.Mirrors {
		checkDestination(v, at(path+".mirrors", j)+".destination", m.Destination)
		if m.Percentage != nil {
			checkPercent(v, at(path+".mirrors", j)+".percentage.value", m.Percentage.Value)
		}
	}
	if r.MirrorPercentage != nil {
		checkPercent(v, path+".mirrorPercentage.value", r.MirrorPercentage.Value)
	}
	if rw := r.Rewrite; rw != nil {
		if rw.Uri != "" && rw.UriRegexRewrite != nil {
			v.add(path+".rewrite", "uri and uriRegexRewrite are mutually exclusive")
		}
		if rr := rw.UriRegexRewrite; rr != nil {
			if _, err := regexp.Compile(rr.Match); err != nil {
				v.add(path+".rewrite.uriRegexRewrite.match", "invalid regular expression: %v", err)
			}
		}
	}
	if rd := r.Redirect; rd != nil && rd.RedirectCode != 0 && (rd.RedirectCode < 300 || rd.RedirectCode > 399) {
		v.add(path+".redirect.redirectCode", "redirect code %d must be in 300-399", rd.RedirectCode)
	}
	if dr := r.DirectResponse; dr != nil && (dr.Status < 200 || dr.Status > 599) {
		v.add(path+".directResponse.status", "status %d must be in 200-599", dr.Status)
	}
}

// checkWeights validates destinations and that weights add up to 100 when a
// route has more than one destination.
func checkWeights(v *validator, path string, n int, get func(int) (*networking.Destination, int32)) {
	var sum int64
	for j := 0; j < n; j++ {
		d, w := get(j)
		if w < 0 || w > 100 {
			v.add(at(path, j)+".weight", "weight %d must be in 0-100", w)
		}
		sum += int64(w)
		checkDestination(v, at(path, j)+".destination", d)
	}
	if n > 1 && sum != 100 {
		v.add(at(path, 0)+".weight", "weights of the %d destinations add up to %d, not 100", n, sum)
	}
}

func checkDestination(v *validator, path string, d *networking.Destination) {
	if d == nil {
		v.add(path, "destination is required")
		return
	}
	if d.Host == "" {
		v.add(path+".host", "host is required")
	} else {
		v.check(path+".host", checkHost(d.Host, false))
	}
	if d.Subset != "" {
		v.check(path+".subset", checkDNS1123Label(d.Subset))
	}
	if d.Port != nil {
		v.check(path+".port.number", checkPort(d.Port.Number))
	}
}

var retryOnPolicies = map[string]bool{
	"5xx": true, "gateway-error": true, "reset": true, "reset-before-request": true, "connect-failure": true,
	"envoy-ratelimited": true, "retriable-4xx": true, "refused-stream": true, "retriable-status-codes": true,
	"retriable-headers": true, "http3-post-connect-failure": true,
	"cancelled": true, "deadline-exceeded": true, "internal": true, "resource-exhausted": true, "unavailable": true,
}

var grpcStatusCodes = map[string]struct{}{
	"OK": {}, "CANCELLED": {}, "UNKNOWN": {}, "INVALID_ARGUMENT": {}, "DEADLINE_EXCEEDED": {}, "NOT_FOUND": {},
	"ALREADY_EXISTS": {}, "PERMISSION_DENIED": {}, "RESOURCE_EXHAUSTED": {}, "FAILED_PRECONDITION": {},
	"ABORTED": {}, "OUT_OF_RANGE": {}, "UNIMPLEMENTED": {}, "INTERNAL": {}, "UNAVAILABLE": {}, "DATA_LOSS": {},
	"UNAUTHENTICATED": {},
}

func validateDestinationRule(v *validator, dr *networking.DestinationRule) {
	if dr.Host == "" {
		v.add("host", "host is required")
	} else {
		v.check("host", checkHost(dr.Host, false))
	}
	validateExportTo(v, dr.ExportTo)
	validateTrafficPolicy(v, "trafficPolicy", dr.TrafficPolicy)
	names := map[string]bool{}
	for i, s := range dr.Subsets {
		path := at("subsets", i)
		if s.Name == "" {
			v.add(path+".name", "subset name is required")
		} else {
			v.check(path+".name", checkDNS1123Label(s.Name))
		}
		if names[s.Name] {
			v.add(path+".name", "subset %s is defined twice", quote(s.Name))
		}
		names[s.Name] = true
		checkLabels(v, path+".labels", s.Labels)
		validateTrafficPolicy(v, path+".trafficPolicy", s.TrafficPolicy)
	}
	if dr.WorkloadSelector != nil {
		checkLabels(v, "workloadSelector.matchLabels", dr.WorkloadSelector.MatchLabels)
	}
}

func validateTrafficPolicy(v *validator, path string, tp *networking.TrafficPolicy) {
	if tp == nil {
		return
	}
	validatePortPolicy(v, path, tp.LoadBalancer, tp.ConnectionPool, tp.OutlierDetection, tp.Tls)
	ports := map[uint32]bool{}
	for i, pl := range tp.PortLevelSettings {
		pp := at(path+".portLevelSettings", i)
		if pl.Port == nil {
			v.add(pp+".port", "port is required")
		} else {
			v.check(pp+".port.number", checkPort(pl.Port.Number))
			if ports[pl.Port.Number] {
				v.add(pp+".port.number", "port %d has two port-level settings", pl.Port.Number)
			}
			ports[pl.Port.Number] = true
		}
		validatePortPolicy(v, pp, pl.LoadBalancer, pl.ConnectionPool, pl.OutlierDetection, pl.Tls)
	}
}

func validatePortPolicy(v *validator, path string, lb *networking.LoadBalancerSettings, cp *networking.ConnectionPoolSettings,
	od *networking.OutlierDetection, tls *networking.ClientTLSSettings) {
	if lb != nil {
		if ch := lb.GetConsistentHash(); ch != nil {
			if ch.HashKey == nil {
				v.add(path+".loadBalancer.consistentHash", "one of httpHeaderName, httpCookie, useSourceIp or httpQueryParameterName is required")
			}
			if c := ch.GetHttpCookie(); c != nil && c.Name == "" {
				v.add(path+".loadBalancer.consistentHash.httpCookie.name", "cookie name is required")
			}
		}
		if lb.LbPolicy == nil && lb.LocalityLbSetting == nil && lb.WarmupDurationSecs == nil && lb.Warmup == nil {
			v.add(path+".loadBalancer", "one of simple or consistentHash is required")
		}
	}
	if cp != nil {
		if t := cp.Tcp; t != nil {
			if t.MaxConnections < 0 {
				v.add(path+".connectionPool.tcp.maxConnections", "must not be negative")
			}
			checkDurationMin(v, path+".connectionPool.tcp.connectTimeout", t.ConnectTimeout, time.Millisecond)
		}
		if h := cp.Http; h != nil {
			for name, n := range map[string]int32{"http1MaxPendingRequests": h.Http1MaxPendingRequests, "http2MaxRequests": h.Http2MaxRequests,
				"maxRequestsPerConnection": h.MaxRequestsPerConnection, "maxRetries": h.MaxRetries, "maxConcurrentStreams": h.MaxConcurrentStreams} {
				if n < 0 {
					v.add(path+".connectionPool.http."+name, "must not be negative")
				}
			}
			checkDurationMin(v, path+".connectionPool.http.idleTimeout", h.IdleTimeout, time.Millisecond)
		}
	}
	if od != nil {
		op := path + ".outlierDetection"
		checkDurationMin(v, op+".interval", od.Interval, time.Millisecond)
		checkDurationMin(v, op+".baseEjectionTime", od.BaseEjectionTime, time.Millisecond)
		if od.MaxEjectionPercent < 0 || od.MaxEjectionPercent > 100 {
			v.add(op+".maxEjectionPercent", "%d must be in 0-100", od.MaxEjectionPercent)
		}
		if od.MinHealthPercent < 0 || od.MinHealthPercent > 100 {
			v.add(op+".minHealthPercent", "%d must be in 0-100", od.MinHealthPercent)
		}
		if od.ConsecutiveErrors < 0 {
			v.add(op+".consecutiveErrors", "must not be negative")
		}
	}
	if tls != nil && tls.Mode == networking.ClientTLSSettings_MUTUAL && tls.CredentialName == "" &&
		(tls.ClientCertificate == "" || tls.PrivateKey == "") {
		v.add(path+".tls", "mode MUTUAL needs clientCertificate and privateKey (or credentialName)")
	}
}

func validateSidecar(v *validator, sc *networking.Sidecar) {
	if sc.WorkloadSelector != nil {
		checkLabels(v, "workloadSelector.labels", sc.WorkloadSelector.Labels)
	}
	for i, e := range sc.Egress {
		path := at("egress", i)
		if len(e.Hosts) == 0 {
			v.add(path+".hosts", "an egress listener needs at least one host")
		}
		for j, h := range e.Hosts {
			v.check(at(path+".hosts", j), checkNamespacedHost(h))
		}
		if e.Port == nil && i != len(sc.Egress)-1 {
			v.add(path+".port", "only the last egress listener may omit port (the catch-all)")
		}
		if e.Port != nil {
			v.check(path+".port.number", checkPort(e.Port.Number))
		}
	}
	for i, in := range sc.Ingress {
		path := at("ingress", i)
		if in.Port == nil {
			v.add(path+".port", "port is required")
		} else {
			v.check(path+".port.number", checkPort(in.Port.Number))
		}
	}
}

// checkNamespacedHost validates a "namespace/host" Sidecar or Gateway host.
func checkNamespacedHost(h string) string {
	ns, host, ok := strings.Cut(h, "/")
	if !ok {
		return fmt.Sprintf("host %s must be namespace/dnsName", quote(h))
	}
	switch ns {
	case "*", ".", "~":
	default:
		if msg := checkDNS1123Label(ns); msg != "" {
			return fmt.Sprintf("host %s: namespace %s", quote(h), msg)
		}
	}
	return checkHost(host, true)
}

func validateGateway(v *validator, gw *networking.Gateway) {
	if len(gw.Servers) == 0 {
		v.add("servers", "a Gateway needs at least one server")
	}
	checkLabels(v, "selector", gw.Selector)
	names := map[string]bool{}
	for i, s := range gw.Servers {
		path := at("servers", i)
		if s.Port == nil {
			v.add(path+".port", "port is required")
		} else {
			v.check(path+".port.number", checkPort(s.Port.Number))
			v.check(path+".port.name", checkPortName(s.Port.Name))
			v.check(path+".port.protocol", checkProtocol(s.Port.Protocol))
			if strings.EqualFold(s.Port.Protocol, "HTTPS") && s.Tls == nil {
				v.add(path+".tls", "an HTTPS server needs tls settings")
			}
		}
		if len(s.Hosts) == 0 {
			v.add(path+".hosts", "a server needs at least one host")
		}
		for j, h := range s.Hosts {
			if strings.Contains(h, "/") {
				v.check(at(path+".hosts", j), checkNamespacedHost(h))
			} else {
				v.check(at(path+".hosts", j), checkHost(h, true))
			}
		}
		if s.Name != "" {
			if names[s.Name] {
				v.add(path+".name", "server name %s is used twice", quote(s.Name))
			}
			names[s.Name] = true
		}
	}
}

func validatePeerAuthentication(v *validator, pa *security.PeerAuthentication) {
	if pa.Selector != nil {
		checkLabels(v, "selector.matchLabels", pa.Selector.MatchLabels)
	}
	if len(pa.PortLevelMtls) > 0 && (pa.Selector == nil || len(pa.Selector.MatchLabels) == 0) {
		v.add("portLevelMtls", "portLevelMtls needs a workload selector")
	}
	for port := range pa.PortLevelMtls {
		v.check(fmt.Sprintf("portLevelMtls.%d", port), checkPort(port))
	}
}

func validateAuthorizationPolicy(v *validator, ap *security.AuthorizationPolicy) {
	if ap.Selector != nil {
		checkLabels(v, "selector.matchLabels", ap.Selector.MatchLabels)
	}
	switch ap.Action {
	case security.AuthorizationPolicy_CUSTOM:
		v.add("action", "CUSTOM is not supported by vmesh (it needs an external authorization provider); use ALLOW or DENY")
	case security.AuthorizationPolicy_AUDIT:
		v.add("action", "AUDIT is not supported by vmesh; use ALLOW or DENY")
	}
	if ap.GetProvider() != nil && ap.Action != security.AuthorizationPolicy_CUSTOM {
		v.add("provider", "provider is only allowed with action CUSTOM")
	}
	for i, r := range ap.Rules {
		path := at("rules", i)
		if r == nil {
			continue
		}
		for j, f := range r.From {
			fp := at(path+".from", j) + ".source"
			s := f.GetSource()
			if s == nil || (len(s.Principals)+len(s.NotPrincipals)+len(s.Namespaces)+len(s.NotNamespaces)+len(s.IpBlocks)+
				len(s.NotIpBlocks)+len(s.RequestPrincipals)+len(s.NotRequestPrincipals)+len(s.RemoteIpBlocks)+len(s.NotRemoteIpBlocks)+
				len(s.ServiceAccounts)+len(s.NotServiceAccounts) == 0) {
				v.add(fp, "source must set at least one field")
				continue
			}
			for field, blocks := range map[string][]string{"ipBlocks": s.IpBlocks, "notIpBlocks": s.NotIpBlocks,
				"remoteIpBlocks": s.RemoteIpBlocks, "notRemoteIpBlocks": s.NotRemoteIpBlocks} {
				for k, b := range blocks {
					v.check(at(fp+"."+field, k), checkIPOrCIDR(b))
				}
			}
			for field, accounts := range map[string][]string{"serviceAccounts": s.ServiceAccounts, "notServiceAccounts": s.NotServiceAccounts} {
				for k, a := range accounts {
					ns, name, ok := strings.Cut(a, "/")
					if !ok || checkDNS1123Label(ns) != "" || checkDNS1123Subdomain(name) != "" {
						v.add(at(fp+"."+field, k), "service account %s must be <namespace>/<name>", quote(a))
					}
				}
			}
		}
		for j, t := range r.To {
			tp := at(path+".to", j) + ".operation"
			op := t.GetOperation()
			if op == nil || (len(op.Hosts)+len(op.NotHosts)+len(op.Ports)+len(op.NotPorts)+len(op.Methods)+len(op.NotMethods)+
				len(op.Paths)+len(op.NotPaths) == 0) {
				v.add(tp, "operation must set at least one field")
				continue
			}
			for k, p := range append(append([]string{}, op.Ports...), op.NotPorts...) {
				n, err := strconv.ParseUint(p, 10, 32)
				if err != nil {
					v.add(at(tp+".ports", k), "port %s is not a number", quote(p))
				} else {
					v.check(at(tp+".ports", k), checkPort(uint32(n)))
				}
			}
		}
		for j, c := range r.When {
			cp := at(path+".when", j)
			if !knownConditionKey(c.Key) {
				v.add(cp+".key", "unknown condition key %s", quote(c.Key))
			}
			if len(c.Values)+len(c.NotValues) == 0 {
				v.add(cp+".values", "values or notValues is required")
			}
			for k, val := range append(append([]string{}, c.Values...), c.NotValues...) {
				switch c.Key {
				case "source.ip", "remote.ip", "destination.ip":
					v.check(at(cp+".values", k), checkIPOrCIDR(val))
				case "destination.port":
					if n, err := strconv.ParseUint(val, 10, 32); err != nil || checkPort(uint32(n)) != "" {
						v.add(at(cp+".values", k), "%s is not a port number", quote(val))
					}
				}
			}
		}
	}
}

func knownConditionKey(k string) bool {
	switch k {
	case "source.ip", "remote.ip", "source.namespace", "source.principal", "source.serviceAccount", "request.auth.principal",
		"request.auth.audiences", "request.auth.presenter", "destination.ip", "destination.port", "connection.sni", "experimental.envoy.filters.network.mysql_proxy[db.table]":
		return true
	}
	return strings.HasPrefix(k, "request.headers[") || strings.HasPrefix(k, "request.auth.claims[")
}
