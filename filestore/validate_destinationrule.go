package filestore

//lint:file-ignore SA1019 Istio's deprecated fields (consecutiveErrors, minimumRingSize) are validated because Istio still accepts them

import (
	"fmt"
	"math"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

func validateDestinationRule(v *validator, namespace string, dr *networking.DestinationRule) {
	v.check("host", checkWildcardDomain(dr.Host))
	validateTrafficPolicy(v, "trafficPolicy", namespace, dr.TrafficPolicy)
	names := map[string]bool{}
	for i, s := range dr.Subsets {
		path := at("subsets", i)
		if s == nil {
			v.add(path, "a subset must not be null")
			continue
		}
		if names[s.Name] {
			v.add(path+".name", "subset %s is defined twice", quote(s.Name))
		}
		names[s.Name] = true
		switch {
		case s.Name == "":
			v.add(path+".name", "subset name is required")
		case !isIstioLabel(s.Name):
			v.add(path+".name", "subset name %s is not a valid DNS-1123 label", quote(s.Name))
		}
		checkSpecLabels(v, path+".labels", s.Labels)
		validateTrafficPolicy(v, path+".trafficPolicy", namespace, s.TrafficPolicy)
	}
	validateExportTo(v, namespace, dr.ExportTo, false, dr.WorkloadSelector != nil)
	if dr.WorkloadSelector != nil {
		checkSelectorLabels(v, "workloadSelector.matchLabels", dr.WorkloadSelector.MatchLabels)
	}
}

// validateExportTo: entries are ".", "*" or a namespace ("~", exported to
// no one, only for ServiceEntries), without repeats ("." repeats the
// object's own namespace); "*" and "~" stand alone; a DestinationRule with
// a workload selector is exported to its own namespace only.
func validateExportTo(v *validator, namespace string, exportTo []string, serviceEntry, drWithSelector bool) {
	if len(exportTo) == 0 {
		return
	}
	set := map[string]bool{}
	for i, e := range exportTo {
		key := e
		if e == "." {
			key = namespace
		}
		switch {
		case set[key]:
			v.add(at("exportTo", i), "exportTo names %s twice", quote(key))
		case serviceEntry && e == "~":
			set[key] = true
		case key == "~":
			v.add(at("exportTo", i), `exportTo "~" (no one) is only allowed for ServiceEntries`)
		case key != "*" && !isIstioLabel(key):
			v.add(at("exportTo", i), `exportTo entry %s must be ".", "*" or a namespace`, quote(e))
		default:
			set[key] = true
		}
	}
	if drWithSelector && len(set) > 0 {
		if !set[namespace] {
			v.add("exportTo", "a DestinationRule with a workload selector cannot be exported beyond its own namespace")
		} else if len(set) > 1 {
			v.add("exportTo", "a DestinationRule with a workload selector cannot have several exportTo entries")
		}
	}
	if len(exportTo) > 1 {
		for i, e := range exportTo {
			if e == "*" || (e == "~" && set["~"]) {
				v.add(at("exportTo", i), "exportTo %s must be the only entry", quote(e))
				break
			}
		}
	}
}

func validateTrafficPolicy(v *validator, path, namespace string, tp *networking.TrafficPolicy) {
	if tp == nil {
		return
	}
	if tp.OutlierDetection == nil && tp.ConnectionPool == nil && tp.LoadBalancer == nil && tp.Tls == nil &&
		tp.PortLevelSettings == nil && tp.Tunnel == nil && tp.ProxyProtocol == nil && tp.RetryBudget == nil {
		v.add(path, "a traffic policy must set at least one field")
		return
	}
	if tp.Tunnel != nil && tp.ProxyProtocol != nil {
		v.add(path, "tunnel and proxyProtocol are mutually exclusive")
		return
	}
	checkOutlierDetection(v, path+".outlierDetection", tp.OutlierDetection)
	checkConnectionPool(v, path+".connectionPool", tp.ConnectionPool)
	checkLoadBalancer(v, path+".loadBalancer", tp.LoadBalancer, tp.OutlierDetection)
	checkClientTLS(v, path+".tls", namespace, tp.Tls)
	for i, pl := range tp.PortLevelSettings {
		pp := at(path+".portLevelSettings", i)
		if pl == nil {
			v.add(pp, "a port traffic policy must not be null")
			continue
		}
		if pl.Port == nil {
			v.add(pp+".port", "port is required")
		}
		if pl.OutlierDetection == nil && pl.ConnectionPool == nil && pl.LoadBalancer == nil && pl.Tls == nil {
			v.add(pp, "a port traffic policy must set at least one field")
			continue
		}
		checkOutlierDetection(v, pp+".outlierDetection", pl.OutlierDetection)
		checkConnectionPool(v, pp+".connectionPool", pl.ConnectionPool)
		checkLoadBalancer(v, pp+".loadBalancer", pl.LoadBalancer, pl.OutlierDetection)
		checkClientTLS(v, pp+".tls", namespace, pl.Tls)
	}
	if t := tp.Tunnel; t != nil {
		if t.Protocol != "" && t.Protocol != "CONNECT" && t.Protocol != "POST" {
			v.add(path+".tunnel.protocol", `tunnel protocol must be "CONNECT" or "POST"`)
		}
		if checkFQDN(t.TargetHost) != "" && !isIP(t.TargetHost) {
			v.add(path+".tunnel.targetHost", "tunnel target host %s must be a domain name or an IP address", quote(t.TargetHost))
		}
		v.check(path+".tunnel.targetPort", checkIstioPort(int64(t.TargetPort)))
	}
	if pp := tp.ProxyProtocol; pp != nil && pp.Version != 0 && pp.Version != 1 {
		v.add(path+".proxyProtocol.version", "unknown proxy protocol version %d", pp.Version)
	}
}

func checkOutlierDetection(v *validator, path string, od *networking.OutlierDetection) {
	if od == nil {
		return
	}
	checkIstioDuration(v, path+".baseEjectionTime", od.BaseEjectionTime)
	if !od.SplitExternalLocalOriginErrors && od.ConsecutiveLocalOriginFailures.GetValue() > 0 {
		v.add(path+".consecutiveLocalOriginFailures", "consecutiveLocalOriginFailures needs splitExternalLocalOriginErrors")
	}
	checkIstioDuration(v, path+".interval", od.Interval)
	if od.MaxEjectionPercent < 0 || od.MaxEjectionPercent > 100 {
		v.add(path+".maxEjectionPercent", "%d must be in 0-100", od.MaxEjectionPercent)
	}
	if od.MinHealthPercent < 0 || od.MinHealthPercent > 100 {
		v.add(path+".minHealthPercent", "%d must be in 0-100", od.MinHealthPercent)
	}
}

func checkConnectionPool(v *validator, path string, cp *networking.ConnectionPoolSettings) {
	if cp == nil {
		return
	}
	if cp.Http == nil && cp.Tcp == nil {
		v.add(path, "a connection pool must set tcp or http")
		return
	}
	if h := cp.Http; h != nil {
		hp := path + ".http"
		for _, f := range []struct {
			name string
			n    int32
		}{{"http1MaxPendingRequests", h.Http1MaxPendingRequests}, {"http2MaxRequests", h.Http2MaxRequests},
			{"maxRequestsPerConnection", h.MaxRequestsPerConnection}, {"maxRetries", h.MaxRetries}, {"maxConcurrentStreams", h.MaxConcurrentStreams}} {
			if f.n < 0 {
				v.add(hp+"."+f.name, "must not be negative")
			}
		}
		checkIstioDuration(v, hp+".idleTimeout", h.IdleTimeout)
		if h.H2UpgradePolicy == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE && h.UseClientProtocol {
			v.add(hp+".useClientProtocol", "useClientProtocol cannot be true with h2UpgradePolicy UPGRADE")
		}
		if ka := h.Http2KeepAlive; ka != nil {
			if ka.Interval == nil {
				v.add(hp+".http2KeepAlive.interval", "interval is required")
			}
			checkIstioDuration(v, hp+".http2KeepAlive.interval", ka.Interval)
			if ka.Timeout == nil {
				v.add(hp+".http2KeepAlive.timeout", "timeout is required")
			}
			checkIstioDuration(v, hp+".http2KeepAlive.timeout", ka.Timeout)
		}
	}
	if t := cp.Tcp; t != nil {
		tp := path + ".tcp"
		if t.MaxConnections < 0 {
			v.add(tp+".maxConnections", "must not be negative")
		}
		checkIstioDuration(v, tp+".connectTimeout", t.ConnectTimeout)
		checkIstioDuration(v, tp+".maxConnectionDuration", t.MaxConnectionDuration)
		if t.IdleTimeout != nil && t.IdleTimeout.AsDuration().Milliseconds() != 0 { // 0s disables it
			checkIstioDuration(v, tp+".idleTimeout", t.IdleTimeout)
		}
		if ka := t.TcpKeepalive; ka != nil {
			checkIstioDuration(v, tp+".tcpKeepalive.time", ka.Time)
			checkIstioDuration(v, tp+".tcpKeepalive.interval", ka.Interval)
		}
	}
}

func checkLoadBalancer(v *validator, path string, lb *networking.LoadBalancerSettings, od *networking.OutlierDetection) {
	if lb == nil {
		return
	}
	if ch := lb.GetConsistentHash(); ch != nil {
		cp := path + ".consistentHash"
		if c := ch.GetHttpCookie(); c != nil {
			if c.Name == "" {
				v.add(cp+".httpCookie.name", "cookie name is required")
			}
			seen := map[string]bool{}
			for i, a := range c.Attributes {
				switch {
				case a.GetName() == "":
					v.add(at(cp+".httpCookie.attributes", i)+".name", "cookie attribute name must not be empty")
				case seen[a.GetName()]:
					v.add(at(cp+".httpCookie.attributes", i)+".name", "cookie attribute %s is given twice", quote(a.GetName()))
				}
				seen[a.GetName()] = true
			}
		}
		if ch.MinimumRingSize != 0 && ch.GetHashAlgorithm() != nil {
			v.add(cp+".minimumRingSize", "minimumRingSize and maglev/ringHash are mutually exclusive")
		}
		if ml := ch.GetMaglev(); ml != nil {
			switch {
			case ml.TableSize == 0:
				v.add(cp+".maglev.tableSize", "tableSize is required for maglev")
			case ml.TableSize >= 5000011:
				v.add(cp+".maglev.tableSize", "tableSize must be less than 5000011")
			}
			if !isPrime(ml.TableSize) {
				v.add(cp+".maglev.tableSize", "tableSize must be a prime number")
			}
		}
	}
	if lb.LocalityLbSetting != nil && lb.ZoneAwareLbSetting != nil {
		v.add(path, "localityLbSetting and zoneAwareLbSetting are mutually exclusive")
	}
	checkLocalityLB(v, path+".localityLbSetting", lb.LocalityLbSetting)
	if z := lb.ZoneAwareLbSetting; z != nil {
		zp := path + ".zoneAwareLbSetting"
		for i, l := range z.FailoverPriority {
			if isTopologyLabel(l) {
				v.add(at(zp+".failoverPriority", i), "zone-aware failoverPriority must not use topology label %s", quote(l))
			}
		}
		for i, f := range z.Failover {
			checkFailover(v, at(zp+".failover", i), f.GetFrom(), f.GetTo())
		}
	}
	if w := lb.Warmup; w != nil {
		if w.Duration == nil {
			v.add(path+".warmup.duration", "duration is required")
		}
		checkIstioDuration(v, path+".warmup.duration", w.Duration)
		if w.MinimumPercent.GetValue() > 100 {
			v.add(path+".warmup.minimumPercent", "minimumPercent must be at most 100")
		}
		if w.Aggression != nil && w.Aggression.GetValue() <= 0 {
			v.add(path+".warmup.aggression", "aggression must be greater than 0")
		}
	}
}

func isTopologyLabel(l string) bool {
	switch l {
	case "topology.kubernetes.io/region", "topology.kubernetes.io/zone", "topology.istio.io/subzone":
		return true
	}
	return false
}

func checkFailover(v *validator, path, from, to string) {
	if from == to {
		v.add(path, "failover must name different regions")
	}
	if strings.Contains(from, "/") || strings.Contains(to, "/") {
		v.add(path, "failover names regions only")
	}
	if strings.Contains(from, "*") || strings.Contains(to, "*") {
		v.add(path, "failover regions cannot contain a '*' wildcard")
	}
}

func checkLocalityLB(v *validator, path string, lb *networking.LocalityLoadBalancerSetting) {
	if lb == nil {
		return
	}
	if len(lb.Distribute) > 0 && len(lb.Failover) > 0 {
		v.add(path, "distribute and failover are mutually exclusive")
		return
	}
	if len(lb.Failover) > 0 {
		for i, l := range lb.FailoverPriority {
			if isTopologyLabel(l) {
				v.add(at(path+".failoverPriority", i), "failover and the topology label %s in failoverPriority are mutually exclusive", quote(l))
				return
			}
		}
	}
	var from []string
	for i, d := range lb.Distribute {
		from = append(from, d.GetFrom())
		var total uint32
		var to []string
		for loc, w := range d.GetTo() {
			to = append(to, loc)
			if w == 0 || w > 100 {
				v.add(at(path+".distribute", i)+".to."+loc, "locality weight must be in 1-100")
				return
			}
			total += w
		}
		if total != 100 {
			v.add(at(path+".distribute", i)+".to", "locality weights add up to %d, not 100", total)
			return
		}
		v.check(at(path+".distribute", i)+".to", checkLocalities(to))
	}
	v.check(path+".distribute", checkLocalities(from))
	for i, f := range lb.Failover {
		checkFailover(v, at(path+".failover", i), f.GetFrom(), f.GetTo())
	}
}

// checkLocalities: region[/zone[/subzone]] with at most one trailing '*',
// no empty part, and none overlapping another.
func checkLocalities(locs []string) string {
	seen := map[string]bool{}
	for _, l := range locs {
		if n := strings.Count(l, "*"); n > 1 || (n == 1 && !strings.HasSuffix(l, "*")) {
			return fmt.Sprintf("locality %s: at most one '*', at the end", quote(l))
		}
		if seen["*"] {
			return fmt.Sprintf("locality %s overlaps another", quote(l))
		}
		parts := strings.SplitN(l, "/", 3)
		for _, p := range parts {
			if p == "" {
				return fmt.Sprintf("locality %s has an empty region, zone or subzone", quote(l))
			}
		}
		// A locality overlaps a wider one already given, or the same one.
		for i := 1; i <= len(parts); i++ {
			wider := strings.Join(parts[:i], "/")
			if seen[wider] || (i < len(parts) && seen[wider+"/*"]) {
				return fmt.Sprintf("locality %s overlaps another", quote(l))
			}
		}
		if seen[strings.TrimSuffix(l, "*")+"*"] {
			return fmt.Sprintf("locality %s overlaps another", quote(l))
		}
		seen[l] = true
		if strings.HasSuffix(l, "/*") || l == "*" {
			seen[strings.TrimSuffix(strings.TrimSuffix(l, "*"), "/")] = true
		}
	}
	return ""
}

// isPrime is Envoy's primality test for maglev table sizes.
func isPrime(x uint64) bool {
	if x != 0 && x < 4 {
		return true
	}
	if x&1 == 0 {
		return false
	}
	limit := uint64(math.Sqrt(float64(x)))
	for f := uint64(3); f <= limit; f += 2 {
		if x%f == 0 {
			return false
		}
	}
	return true
}

func checkClientTLS(v *validator, path, namespace string, tls *networking.ClientTLSSettings) {
	if tls == nil {
		return
	}
	// A CA bundle from a (Kubernetes) ConfigMap: configmap://<namespace>/<name>,
	// in the rule's own namespace.
	if ref, ok := strings.CutPrefix(tls.CredentialName, "configmap://"); ok {
		ns, name, _ := strings.Cut(ref, "/")
		switch {
		case ns == "" || name == "":
			v.add(path+".credentialName", "credentialName %s must be configmap://<namespace>/<name>", quote(tls.CredentialName))
		case ns != namespace:
			v.add(path+".credentialName", "credentialName %s must be in the rule's namespace %s", quote(tls.CredentialName), quote(namespace))
		}
	}
	if tls.GetInsecureSkipVerify().GetValue() {
		switch tls.Mode {
		case networking.ClientTLSSettings_SIMPLE:
			if tls.CaCertificates != "" || tls.CredentialName != "" || tls.SubjectAltNames != nil {
				v.add(path+".insecureSkipVerify", "insecureSkipVerify excludes caCertificates, credentialName and subjectAltNames")
			}
		case networking.ClientTLSSettings_MUTUAL:
			if tls.CaCertificates != "" || tls.SubjectAltNames != nil {
				v.add(path+".insecureSkipVerify", "insecureSkipVerify excludes caCertificates and subjectAltNames")
			}
		}
	}
	if (tls.Mode == networking.ClientTLSSettings_SIMPLE || tls.Mode == networking.ClientTLSSettings_MUTUAL) && tls.CredentialName != "" {
		if tls.ClientCertificate != "" || tls.CaCertificates != "" || tls.PrivateKey != "" || tls.CaCrl != "" {
			v.add(path+".credentialName", "credentialName excludes clientCertificate, privateKey, caCertificates and caCrl")
		}
		return
	}
	if tls.Mode == networking.ClientTLSSettings_MUTUAL && (tls.ClientCertificate == "" || tls.PrivateKey == "") {
		v.add(path, "mode MUTUAL needs clientCertificate and privateKey (or credentialName)")
	}
}
