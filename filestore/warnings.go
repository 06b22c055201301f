package filestore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/internal/filecert"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"

	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// unimplementedKinds are the kinds of Istio's schema (the CRDs istio.io/api
// publishes, and the Kubernetes Gateway API kinds Istio reads) that vmesh
// does not implement, by group, with the versions served: a document of
// one is accepted and ignored with a VM1001 warning, so a repository
// shared with an Istio cluster applies. A kind no Istio API defines stays
// an error.
var unimplementedKinds = map[string]map[string][]string{
	"networking.istio.io": {
		"EnvoyFilter": {"v1alpha3"},
		"ProxyConfig": {"v1beta1"},
	},
	"extensions.istio.io": {
		"WasmPlugin":       {"v1alpha1"},
		"TrafficExtension": {"v1alpha1"},
	},
	"gateway.networking.k8s.io": {
		"UDPRoute":         {"v1alpha2"},
		"BackendTLSPolicy": {"v1", "v1alpha3"},
		"ListenerSet":      {"v1"},
	},
	"gateway.networking.x-k8s.io": {
		"XBackendTrafficPolicy": {"v1alpha1"},
		"XListenerSet":          {"v1alpha1"},
	},
	"inference.networking.k8s.io": {
		"InferencePool": {"v1"},
	},
}

// unimplementedKind reports whether apiVersion/kind is an Istio kind vmesh
// does not implement; versions lists the ones served when the group and
// kind are known but the version is not.
func unimplementedKind(apiVersion, kind string) (ok bool, versions []string) {
	group, version, _ := strings.Cut(apiVersion, "/")
	vs, known := unimplementedKinds[group][kind]
	if !known {
		return false, nil
	}
	return slices.Contains(vs, version), vs
}

// lineKept reports whether the decoder keeps a field path's line on the
// object for the analysis (model/analysis) to point at: hosts, gateways,
// ports, subsets and selectors, not every field (a 10,000-object Store would
// carry every line of every file).
func lineKept(path string) bool {
	leaf := path[strings.LastIndexByte(path, '.')+1:]
	if i := strings.IndexByte(leaf, '['); i >= 0 {
		leaf = leaf[:i]
	}
	switch leaf {
	case "host", "hosts", "subset", "port", "gateways", "workloadSelector", "metadata", "template", "delegate", "tcp", "providers":
		return true
	}
	return false
}

// objectWarnings returns what one decoded, valid object asks for that
// vmesh does not (fully) enforce. It reads the object alone; model/analysis
// checks it against the rest of the config.
func objectWarnings(o *store.Object) []Problem {
	w := &warner{}
	switch spec := o.Spec.(type) {
	case *security.AuthorizationPolicy:
		warnAuthorizationPolicy(w, o, spec)
	case *security.RequestAuthentication:
		warnRequestAuthentication(w, spec)
	case *security.PeerAuthentication:
		if len(spec.GetPortLevelMtls()) > 0 && len(spec.GetSelector().GetMatchLabels()) == 0 {
			w.add("portLevelMtls", store.CodePortLevelMTLSIgnored, "portLevelMtls is ignored: it applies only to a policy with a selector (add selector.matchLabels, or set mtls.mode for the namespace)")
		}
	case *networking.Gateway:
		for i, sv := range spec.GetServers() {
			if why := gatewayServerNotServed(sv); why != "" {
				w.add(fmt.Sprintf("servers[%d].tls", i), store.CodeGatewayServerNotServed, "not served by vmesh's routers: %s; the router has no filter chain for this server (fails closed)", why)
				continue
			}
			for _, u := range gatewayTLSNotApplied(sv) {
				w.add(fmt.Sprintf("servers[%d].tls.%s", i, u.Field), store.CodeGatewayTLSFieldNotApplied, "%s", u.Why)
			}
		}
	case *networking.VirtualService:
		if gws := spec.GetGateways(); len(gws) > 0 && !slices.Contains(gws, "mesh") {
			// Routes of routers only (no proxyless client reads them):
			// whether a router serves them is the analysis' (VM1009).
			break
		}
		proxylessVirtualService(w, spec)
	case *networking.DestinationRule:
		proxylessTrafficPolicy(w, "trafficPolicy", spec.GetTrafficPolicy())
		for i, ss := range spec.GetSubsets() {
			proxylessTrafficPolicy(w, fmt.Sprintf("subsets[%d].trafficPolicy", i), ss.GetTrafficPolicy())
		}
	case *networking.ServiceEntry:
		for i, e := range spec.GetEndpoints() {
			if e.GetAddress() == "" {
				w.add(fmt.Sprintf("endpoints[%d]", i), store.CodeEndpointWithoutAddress, "endpoint without an address (network %s): it is reached through its network's gateway, which vmesh does not have, so it is not used", quote(e.GetNetwork()))
			}
		}
	case *telemetry.Telemetry:
		telemetryWarnings(w, spec)
	case *networking.WorkloadEntry:
		if spec.GetAddress() == "" {
			w.add("address", store.CodeEndpointWithoutAddress, "no address (network %s): the entry is reached through its network's gateway, which vmesh does not have, so it is no service's endpoint", quote(spec.GetNetwork()))
		}
	case *networking.Sidecar:
		for i, l := range spec.GetEgress() {
			for j, h := range l.GetHosts() {
				if !strings.Contains(h, "/") {
					w.add(fmt.Sprintf("egress[%d].hosts[%d]", i, j), store.CodeSidecarEgressHostIgnored, "egress host %s is ignored: write it as namespace/host (./%s, */%s)", quote(h), h, h)
				}
			}
			sidecarListenerNotApplied(w, fmt.Sprintf("egress[%d]", i), l.GetBind(), l.GetCaptureMode())
		}
		for i, l := range spec.GetIngress() {
			path := fmt.Sprintf("ingress[%d]", i)
			if l.GetTls() != nil {
				w.add(path+".tls", store.CodeSidecarFieldNotApplied, "not applied: vmesh's sidecars terminate only mesh mTLS on inbound ports, so TLS from a client outside the mesh reaches the workload undecrypted (PERMISSIVE) or is refused (STRICT)")
			}
			sidecarListenerNotApplied(w, path, l.GetBind(), l.GetCaptureMode())
		}
	}
	schemaWarnings(w, o)
	return w.problems
}

// warner collects one object's warnings.
type warner struct{ problems []Problem }

// info adds an info: a field some proxies apply and others ignore.
func (w *warner) info(field, code, format string, args ...any) {
	w.problems = append(w.problems, Problem{Field: field, Code: code, Severity: store.SeverityInfo, Message: fmt.Sprintf(format, args...)})
}

// proxylessVirtualService notes what grpc-go cannot do, so the proxyless
// generator (xds/grpc) emits nothing for it: Envoy sidecars apply it,
// proxyless gRPC clients do not (xds/README.md). Whether it matters depends
// on the proxies that connect, which config does not say: an info (vmesh
// analyze), not a warning. proxylessTrafficPolicy does the same for a
// DestinationRule's policies.
func proxylessVirtualService(w *warner, vs *networking.VirtualService) {
	for i, r := range vs.GetHttp() {
		path := fmt.Sprintf("http[%d].", i)
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"mirror", r.GetMirror() != nil}, {"mirrors", len(r.GetMirrors()) > 0}, {"rewrite", r.GetRewrite() != nil},
			{"redirect", r.GetRedirect() != nil}, {"directResponse", r.GetDirectResponse() != nil},
			{"corsPolicy", r.GetCorsPolicy() != nil}, {"headers", r.GetHeaders() != nil},
		} {
			if f.set {
				w.info(path+f.name, store.CodeProxylessIgnores, "proxyless gRPC clients ignore %s (grpc-go has no equivalent); Envoy sidecars apply it", f.name)
			}
		}
		for j, m := range r.GetMatch() {
			mpath := fmt.Sprintf("%smatch[%d].", path, j)
			if len(m.GetQueryParams()) > 0 {
				w.info(mpath+"queryParams", store.CodeProxylessIgnores, "proxyless gRPC clients leave this match out (grpc-go ignores a route that matches query parameters: gRPC has no query); Envoy sidecars apply it")
			}
			if m.GetScheme() != nil {
				w.info(mpath+"scheme", store.CodeProxylessIgnores, "proxyless gRPC clients ignore scheme, so the match applies to every one of them; Envoy sidecars apply it")
			}
		}
	}
}

func proxylessTrafficPolicy(w *warner, path string, tp *networking.TrafficPolicy) {
	check := func(path string, lb *networking.LoadBalancerSettings, od *networking.OutlierDetection, cp *networking.ConnectionPoolSettings) {
		if cp != nil && (cp.GetTcp() != nil || onlyMaxRequests(cp.GetHttp()) != nil) {
			w.info(path+".connectionPool", store.CodeProxylessIgnores, "proxyless gRPC clients apply only connectionPool.http.http2MaxRequests (a circuit breaker on concurrent requests); Envoy sidecars apply the rest")
		}
		switch lb.GetSimple() {
		//lint:ignore SA1019 Istio still accepts LEAST_CONN
		case networking.LoadBalancerSettings_RANDOM, networking.LoadBalancerSettings_PASSTHROUGH, networking.LoadBalancerSettings_LEAST_CONN:
			w.info(path+".loadBalancer.simple", store.CodeProxylessIgnores, "proxyless gRPC clients balance %s as ROUND_ROBIN (grpc-go has no equivalent); Envoy sidecars apply it", lb.GetSimple())
		case networking.LoadBalancerSettings_LEAST_REQUEST:
			w.info(path+".loadBalancer.simple", store.CodeProxylessIgnores, "grpc-node clients balance LEAST_REQUEST as ROUND_ROBIN (grpc-node has no least request, gRFC A48: the cluster lists round robin after it); grpc-go clients and Envoy sidecars apply it")
		}
		//lint:ignore SA1019 Istio still accepts consecutiveErrors
		if od.GetConsecutive_5XxErrors() != nil || od.GetConsecutiveGatewayErrors() != nil || od.GetConsecutiveErrors() > 0 {
			w.info(path+".outlierDetection", store.CodeProxylessIgnores, "proxyless gRPC clients eject no endpoint on consecutive errors (grpc-go ejects on success rate and failure percentage only); Envoy sidecars do")
		}
		if lb.GetWarmup() != nil || lb.GetWarmupDurationSecs() != nil {
			w.info(path+".loadBalancer.warmup", store.CodeProxylessIgnores, "proxyless gRPC clients give a new endpoint its full share at once (grpc-go has no slow start); Envoy sidecars ramp it up")
		}
	}
	if tp == nil {
		return
	}
	if tp.GetRetryBudget() != nil {
		w.info(path+".retryBudget", store.CodeProxylessIgnores, "proxyless gRPC clients bound retries only by each route's retry policy (grpc-go has no retry budget); Envoy sidecars apply it")
	}
	if tp.GetTunnel() != nil {
		w.add(path+".tunnel", store.CodeTrafficPolicyNotApplied, "not applied: vmesh's proxies do not tunnel upstream connections (HTTP CONNECT or POST), so traffic goes to the endpoints directly")
	}
	if tp.GetProxyProtocol() != nil {
		w.info(path+".proxyProtocol", store.CodeProxylessIgnores, "proxyless gRPC clients send no PROXY protocol header (grpc-go has none), so the endpoints see no client address from it; Envoy sidecars send it")
	}
	check(path, tp.GetLoadBalancer(), tp.GetOutlierDetection(), tp.GetConnectionPool())
	for i, pl := range tp.GetPortLevelSettings() {
		check(fmt.Sprintf("%s.portLevelSettings[%d]", path, i), pl.GetLoadBalancer(), pl.GetOutlierDetection(), pl.GetConnectionPool())
	}
}

// onlyMaxRequests returns h without http2MaxRequests, nil when nothing
// else is set: the HTTP pool settings proxyless gRPC clients ignore.
func onlyMaxRequests(h *networking.ConnectionPoolSettings_HTTPSettings) *networking.ConnectionPoolSettings_HTTPSettings {
	if h == nil {
		return nil
	}
	rest := proto.Clone(h).(*networking.ConnectionPoolSettings_HTTPSettings)
	rest.Http2MaxRequests = 0
	if proto.Size(rest) == 0 {
		return nil
	}
	return rest
}

// sidecarListenerNotApplied warns about a Sidecar listener's bind address
// and capture mode NONE, which vmesh's sidecars do not apply: the agent
// captures every port of the VM with iptables (agents/capture, what
// IPTABLES and DEFAULT mean), and the listeners take the traffic it
// redirects.
func sidecarListenerNotApplied(w *warner, path, bind string, mode networking.CaptureMode) {
	if bind != "" {
		w.add(path+".bind", store.CodeSidecarFieldNotApplied, "not applied: the listener takes the traffic the VM's capture redirects, whatever its address (bind %s)", quote(bind))
	}
	if mode == networking.CaptureMode_NONE {
		w.add(path+".captureMode", store.CodeSidecarFieldNotApplied, "not applied: the VM's agent captures every port with iptables, so the listener's traffic is captured all the same (captureMode NONE is not honoured)")
	}
}

func (w *warner) add(field, code, format string, args ...any) {
	w.problems = append(w.problems, Problem{Field: field, Code: code, Severity: store.SeverityWarning, Message: fmt.Sprintf(format, args...)})
}

// dryRunAnnotation is Istio's annotation for an AuthorizationPolicy that is
// only evaluated and logged, never enforced.
const dryRunAnnotation = "istio.io/dry-run"

func warnAuthorizationPolicy(w *warner, o *store.Object, ap *security.AuthorizationPolicy) {
	if strings.EqualFold(o.Annotations[dryRunAnnotation], "true") {
		w.add("metadata.annotations."+dryRunAnnotation, store.CodeDryRunShadowOnly,
			"dry run: not enforced; Envoy sidecars evaluate it as shadow rules (istio_dry_run_* stats), proxyless gRPC clients not at all")
	}
	switch ap.GetAction() {
	case security.AuthorizationPolicy_ALLOW, security.AuthorizationPolicy_DENY:
		if ap.GetTargetRef() == nil && len(ap.GetTargetRefs()) == 0 {
			w.info("action", store.CodeProxylessIgnores, "grpc-node servers apply %s only with GRPC_XDS_EXPERIMENTAL_RBAC=true (grpc-node turns gRFC A41 off by default): without it they refuse the listener and the port never serves; grpc-go servers and Envoy sidecars enforce it", ap.GetAction())
		}
	case security.AuthorizationPolicy_AUDIT:
		w.add("action", store.CodePolicyActionPartial, "action AUDIT: Envoy sidecars mark the requests it matches for audit logging (RBAC action LOG, as Istio); proxyless gRPC servers ignore it")
	case security.AuthorizationPolicy_CUSTOM:
		w.add("action", store.CodePolicyActionPartial, "action CUSTOM: Envoy sidecars ask extension provider %q (ext_authz) about the requests its rules match, or deny them when the mesh config defines no such envoyExtAuthzHttp/envoyExtAuthzGrpc provider; proxyless gRPC servers deny them (no ext_authz in grpc-go)", ap.GetProvider().GetName())
	default:
		return
	}
	if len(ap.GetTargetRefs()) > 0 || ap.GetTargetRef() != nil {
		field := "targetRefs"
		if ap.GetTargetRef() != nil {
			field = "targetRef"
		}
		w.add(field, store.CodePolicyTargetRefs, "%s names Kubernetes Gateway API resources, which vmesh does not have: the policy is ignored (use selector.matchLabels)", field)
		return
	}
	effect := "the rule is dropped: it allows nothing"
	if ap.GetAction() != security.AuthorizationPolicy_ALLOW {
		effect = "the field is ignored: the rule matches more, never less"
	}
	jwtEffect := "proxyless gRPC servers cannot check JWTs (grpc-go has no JWT filter): there " + effect + "; Envoy sidecars enforce it (with a RequestAuthentication for the issuer)"
	for i, r := range ap.GetRules() {
		for j, f := range r.GetFrom() {
			s := f.GetSource()
			path := fmt.Sprintf("rules[%d].from[%d].source.", i, j)
			if len(s.GetRequestPrincipals()) > 0 {
				w.add(path+"requestPrincipals", store.CodeRuleNotEnforced, "requestPrincipals: %s", jwtEffect)
			}
			if len(s.GetNotRequestPrincipals()) > 0 {
				w.add(path+"notRequestPrincipals", store.CodeRuleNotEnforced, "notRequestPrincipals: %s", jwtEffect)
			}
		}
		for k, c := range r.GetWhen() {
			switch {
			case supportedConditionKey(c.GetKey()):
			case jwtConditionKey(c.GetKey()):
				w.add(fmt.Sprintf("rules[%d].when[%d].key", i, k), store.CodeRuleNotEnforced, "%s: %s", quote(c.GetKey()), jwtEffect)
			default:
				w.add(fmt.Sprintf("rules[%d].when[%d].key", i, k), store.CodeRuleNotEnforced, "%s vmesh cannot enforce this condition: %s", quote(c.GetKey()), effect)
			}
		}
	}
}

// warnRequestAuthentication: a RequestAuthentication with targetRef(s) is
// ignored (it names Gateway API resources); requests carrying its tokens
// are then not authenticated, so rules needing a request principal do not
// match them (fail closed).
func warnRequestAuthentication(w *warner, ra *security.RequestAuthentication) {
	if len(ra.GetTargetRefs()) > 0 || ra.GetTargetRef() != nil {
		field := "targetRefs"
		if ra.GetTargetRef() != nil {
			field = "targetRef"
		}
		w.add(field, store.CodePolicyTargetRefs, "%s names Kubernetes Gateway API resources, which vmesh does not have: the policy is ignored, so no token it names authenticates a request (use selector.matchLabels)", field)
	}
}

// jwtConditionKey is model.JWTConditionKey: the request.auth.* keys Envoy
// sidecars enforce from the JWT filter's metadata.
func jwtConditionKey(k string) bool {
	switch k {
	case "request.auth.principal", "request.auth.audiences", "request.auth.presenter":
		return true
	}
	return strings.HasPrefix(k, "request.auth.claims[") && strings.HasSuffix(k, "]")
}

// supportedConditionKey is model.SupportedConditionKey (filestore cannot
// import model; a test keeps the two equal).
func supportedConditionKey(k string) bool {
	switch k {
	case "source.ip", "remote.ip", "source.namespace", "source.principal", "source.serviceAccount",
		"destination.ip", "destination.port", "connection.sni":
		return true
	}
	return strings.HasPrefix(k, "request.headers[") && strings.HasSuffix(k, "]")
}

// gatewayTLSNotApplied lists the TLS fields of a Gateway server xds/router
// terminates TLS for that it leaves out, as Istio's gateways
// (filecert.NotApplied).
func gatewayTLSNotApplied(sv *networking.Server) []filecert.Unapplied {
	if !terminatesTLS(sv) {
		return nil
	}
	return filecert.NotApplied(sv.GetTls())
}

// terminatesTLS reports whether xds/router terminates TLS for a Gateway
// server: HTTPS, or TLS in front of tcp routes (TLS, TCP, MONGO), in a
// mode that is not passthrough.
func terminatesTLS(sv *networking.Server) bool {
	t := sv.GetTls()
	if t == nil {
		return false
	}
	switch t.GetMode() {
	case networking.ServerTLSSettings_AUTO_PASSTHROUGH, networking.ServerTLSSettings_PASSTHROUGH:
		return false
	}
	switch strings.ToUpper(sv.GetPort().GetProtocol()) {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB":
		return false
	}
	return true
}

// gatewayServerNotServed says why xds/router makes no filter chain for a
// Gateway server it otherwise serves; "" when it serves it. Passthrough
// and plaintext servers are served (AUTO_PASSTHROUGH: SNI-DNAT to the
// mesh's services, as Istio's; a plaintext server's tls carries
// httpsRedirect only); of the terminating ones, ISTIO_MUTUAL, credentials
// and certificate files (the router's agent reads the files, in the
// directories it allows), but for filecert.ServerProblem.
func gatewayServerNotServed(sv *networking.Server) string {
	if !terminatesTLS(sv) {
		return ""
	}
	return filecert.ServerProblem(sv.GetTls())
}
