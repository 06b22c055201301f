package gatewayapi

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func specNode(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	return n.Content[0]
}

// TestDecodeSpecDefaults: a valid HTTPRoute decodes with the CRD's
// defaults filled in, and fits the upstream Go type.
func TestDecodeSpecDefaults(t *testing.T) {
	d := DecodeSpec("HTTPRoute", "v1", specNode(t, `
parentRefs: [{name: edge}]
rules:
- backendRefs: [{name: echo, port: 80}]
`))
	if len(d.Problems) > 0 {
		t.Fatalf("problems: %v", d.Problems)
	}
	b, err := json.Marshal(d.Spec)
	if err != nil {
		t.Fatal(err)
	}
	var spec gwv1.HTTPRouteSpec
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		t.Fatalf("the upstream type refuses the decoded spec: %v", err)
	}
	pr := spec.ParentRefs[0]
	if pr.Group == nil || *pr.Group != Group || pr.Kind == nil || *pr.Kind != "Gateway" {
		t.Errorf("parentRef group/kind not defaulted: %s", b)
	}
	r := spec.Rules[0]
	if len(r.Matches) != 1 || r.Matches[0].Path == nil || *r.Matches[0].Path.Type != gwv1.PathMatchPathPrefix || *r.Matches[0].Path.Value != "/" {
		t.Errorf("rule matches not defaulted to PathPrefix /: %s", b)
	}
	be := r.BackendRefs[0]
	if be.Weight == nil || *be.Weight != 1 || be.Kind == nil || *be.Kind != "Service" {
		t.Errorf("backendRef weight/kind not defaulted: %s", b)
	}
}

// TestDecodeSpecProblems: each invalid variant is refused at the field the
// CRD's schema or rule names, with its message.
func TestDecodeSpecProblems(t *testing.T) {
	for _, c := range problemCases {
		t.Run(c.name, func(t *testing.T) {
			d := DecodeSpec(c.kind, c.version, specNode(t, c.spec))
			if d.Spec != nil {
				t.Fatalf("accepted: %v", d.Spec)
			}
			for _, p := range d.Problems {
				if p.Field == c.field && strings.Contains(p.Message, c.message) {
					return
				}
			}
			t.Fatalf("want %s: %q..., got %+v", c.field, c.message, d.Problems)
		})
	}
}

// problemCases are invalid specs, each with the field and message the
// CRD's schema or rule refuses it with.
var problemCases = []struct {
	name, kind, version, spec string
	field, message            string
}{
	{"unknown field", "HTTPRoute", "v1", "rules: [{backendRef: []}]", "rules[0].backendRef", `unknown field "backendRef" (did you mean "backendRefs"?)`},
	{"wrong type", "HTTPRoute", "v1", "hostnames: example.com", "hostnames", "must be a list"},
	{"enum", "HTTPRoute", "v1", "rules: [{matches: [{method: FETCH}]}]", "rules[0].matches[0].method", `unknown value "FETCH"`},
	{"pattern", "HTTPRoute", "v1", "hostnames: [Example.COM]", "hostnames[0]", "does not match"},
	{"maximum", "HTTPRoute", "v1", "rules: [{backendRefs: [{name: a, port: 80, weight: 1000001}]}]", "rules[0].backendRefs[0].weight", "must be at most 1e+06"},
	{"maxItems", "HTTPRoute", "v1", "parentRefs: [" + strings.Repeat("{name: a, sectionName: s},", 33) + "]", "parentRefs", "at most 32 items"},
	{"required", "GRPCRoute", "v1", "rules: [{matches: [{headers: [{value: x}]}]}]", "rules[0].matches[0].headers[0].name", "name is required"},
	{"list map keys", "GRPCRoute", "v1", "rules: [{matches: [{headers: [{name: a, value: x}, {name: a, value: y}]}]}]", "rules[0].matches[0].headers[1]", "duplicate entry name=a"},
	{"CEL: redirect with backends", "HTTPRoute", "v1", "rules: [{backendRefs: [{name: a, port: 80}], filters: [{type: RequestRedirect, requestRedirect: {statusCode: 301}}]}]", "rules[0]", "RequestRedirect filter must not be used together with backendRefs"},
	{"CEL: relative path", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: Exact, value: api}}]}]", "rules[0].matches[0].path", "must be an absolute path"},
	{"CEL: timeouts", "HTTPRoute", "v1", "rules: [{timeouts: {request: 1s, backendRequest: 2s}}]", "rules[0].timeouts", "backendRequest timeout cannot be longer than request timeout"},
	{"CEL: filter without its field", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestHeaderModifier}]}]", "rules[0].filters[0]", "filter.requestHeaderModifier must be specified"},
	{"CEL: parentRefs need sectionName", "HTTPRoute", "v1", "parentRefs: [{name: gw}, {name: gw}]", "parentRefs", "must be unique when parentRefs includes 2 or more references to the same parent"},
	{"CEL: grpc method", "GRPCRoute", "v1", "rules: [{matches: [{method: {type: Exact}}]}]", "rules[0].matches[0].method", "One or both of 'service' or 'method' must be specified"},
	{"CEL: grpc service characters", "GRPCRoute", "v1", "rules: [{matches: [{method: {service: 'a-b'}}]}]", "rules[0].matches[0].method", "service must only contain valid characters"},
	{"CEL: TLSRoute IP hostname (isIP)", "TLSRoute", "v1", "parentRefs: [{name: gw}]\nhostnames: ['1.2.3.4']\nrules: [{backendRefs: [{name: a, port: 443}]}]", "hostnames", "Hostnames cannot contain an IP"},
	{"CEL: listener names unique", "Gateway", "v1", "gatewayClassName: istio\nlisteners: [{name: a, port: 80, protocol: HTTP}, {name: a, port: 81, protocol: HTTP}]", "listeners[1]", "duplicate entry name=a"},
	{"CEL: listener tls on HTTP", "Gateway", "v1", "gatewayClassName: istio\nlisteners: [{name: a, port: 80, protocol: HTTP, tls: {mode: Terminate, certificateRefs: [{name: c}]}}]", "listeners", "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']"},
	{"CEL: namespace escaped", "Gateway", "v1", "gatewayClassName: istio\nlisteners: [{name: a, port: 80, protocol: TCP, hostname: a.example}]", "listeners", "hostname must not be specified for protocols ['TCP', 'UDP']"},
	{"oneOf: IP address", "Gateway", "v1", "gatewayClassName: istio\naddresses: [{type: IPAddress, value: 1.2.3}]\nlisteners: [{name: a, port: 80, protocol: HTTP}]", "addresses[0]", `value "1.2.3" is not an IP address`},
	{"minimum", "Gateway", "v1", "gatewayClassName: istio\nlisteners: [{name: a, port: 0, protocol: HTTP}]", "listeners[0].port", "must be at least 1"},
	{"GatewayClass controllerName", "GatewayClass", "v1", "controllerName: istio", "controllerName", "does not match"},
	{"ReferenceGrant required", "ReferenceGrant", "v1beta1", "from: [{group: '', kind: HTTPRoute}]\nto: [{group: '', kind: Service}]", "from[0].namespace", "namespace is required"},
	{"TCPRoute backendRefs", "TCPRoute", "v1", "parentRefs: [{name: gw}]\nrules: [{backendRefs: [{name: a}]}]", "rules[0].backendRefs[0]", "Must have port for Service reference"},
	{"CEL: filter field of another type", "HTTPRoute", "v1", "rules: [{filters: [{type: URLRewrite, requestHeaderModifier: {set: [{name: a, value: b}]}}]}]", "rules[0].filters[0]", "filter.requestHeaderModifier must be nil if the filter.type is not RequestHeaderModifier"},
	{"CEL: response header filter", "HTTPRoute", "v1", "rules: [{filters: [{type: ResponseHeaderModifier}]}]", "rules[0].filters[0]", "filter.responseHeaderModifier must be specified"},
	{"CEL: response header filter of another type", "HTTPRoute", "v1", "rules: [{filters: [{type: URLRewrite, urlRewrite: {}, responseHeaderModifier: {remove: [a]}}]}]", "rules[0].filters[0]", "filter.responseHeaderModifier must be nil"},
	{"CEL: mirror filter", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestMirror}]}]", "rules[0].filters[0]", "filter.requestMirror must be specified"},
	{"CEL: mirror of another type", "HTTPRoute", "v1", "rules: [{filters: [{type: URLRewrite, urlRewrite: {}, requestMirror: {backendRef: {name: a, port: 80}}}]}]", "rules[0].filters[0]", "filter.requestMirror must be nil"},
	{"CEL: redirect filter", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestRedirect}]}]", "rules[0].filters[0]", "filter.requestRedirect must be specified"},
	{"CEL: redirect of another type", "HTTPRoute", "v1", "rules: [{filters: [{type: URLRewrite, urlRewrite: {}, requestRedirect: {}}]}]", "rules[0].filters[0]", "filter.requestRedirect must be nil"},
	{"CEL: rewrite filter", "HTTPRoute", "v1", "rules: [{filters: [{type: URLRewrite}]}]", "rules[0].filters[0]", "filter.urlRewrite must be specified"},
	{"CEL: rewrite of another type", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestRedirect, requestRedirect: {}, urlRewrite: {}}]}]", "rules[0].filters[0]", "filter.urlRewrite must be nil"},
	{"CEL: extensionRef filter", "HTTPRoute", "v1", "rules: [{filters: [{type: ExtensionRef}]}]", "rules[0].filters[0]", "filter.extensionRef must be specified"},
	{"CEL: extensionRef of another type", "HTTPRoute", "v1", "rules: [{filters: [{type: URLRewrite, urlRewrite: {}, extensionRef: {group: g, kind: k, name: n}}]}]", "rules[0].filters[0]", "filter.extensionRef must be nil"},
	{"CEL: header modifier of another type (set)", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestHeaderModifier, requestHeaderModifier: {}}, {type: RequestHeaderModifier, requestHeaderModifier: {}}]}]", "rules[0].filters", "RequestHeaderModifier filter cannot be repeated"},
	{"CEL: response modifier repeated", "HTTPRoute", "v1", "rules: [{filters: [{type: ResponseHeaderModifier, responseHeaderModifier: {}}, {type: ResponseHeaderModifier, responseHeaderModifier: {}}]}]", "rules[0].filters", "ResponseHeaderModifier filter cannot be repeated"},
	{"CEL: redirect repeated", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestRedirect, requestRedirect: {}}, {type: RequestRedirect, requestRedirect: {}}]}]", "rules[0].filters", "RequestRedirect filter cannot be repeated"},
	{"CEL: rewrite repeated", "HTTPRoute", "v1", "rules: [{filters: [{type: URLRewrite, urlRewrite: {}}, {type: URLRewrite, urlRewrite: {}}]}]", "rules[0].filters", "URLRewrite filter cannot be repeated"},
	{"CEL: redirect and rewrite", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestRedirect, requestRedirect: {}}, {type: URLRewrite, urlRewrite: {}}]}]", "rules[0].filters", "May specify either httpRouteFilterRequestRedirect or httpRouteFilterRequestRewrite"},
	{"CEL: replaceFullPath missing", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath}}}]}]", "rules[0].filters[0].requestRedirect.path", "replaceFullPath must be specified when type is set to 'ReplaceFullPath'"},
	{"CEL: replaceFullPath of another type", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /a, replaceFullPath: /b}}}]}]", "rules[0].filters[0].requestRedirect.path", "type must be 'ReplaceFullPath' when replaceFullPath is set"},
	{"CEL: replacePrefixMatch missing", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch}}}]}]", "rules[0].filters[0].requestRedirect.path", "replacePrefixMatch must be specified when type is set to 'ReplacePrefixMatch'"},
	{"CEL: replacePrefixMatch of another type", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /a, replacePrefixMatch: /b}}}]}]", "rules[0].filters[0].requestRedirect.path", "type must be 'ReplacePrefixMatch' when replacePrefixMatch is set"},
	{"CEL: redirect prefix needs one PathPrefix match", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: Exact, value: /a}}], filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}}]}]", "rules[0]", "When using RequestRedirect filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified"},
	{"CEL: rewrite prefix needs one PathPrefix match", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: Exact, value: /a}}], filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}}]}]", "rules[0]", "When using URLRewrite filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified"},
	{"CEL: mirror percent and fraction", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestMirror, requestMirror: {backendRef: {name: a, port: 80}, percent: 5, fraction: {numerator: 1}}}]}]", "rules[0].filters[0].requestMirror", "Only one of percent or fraction may be specified"},
	{"CEL: mirror fraction", "HTTPRoute", "v1", "rules: [{filters: [{type: RequestMirror, requestMirror: {backendRef: {name: a, port: 80}, fraction: {numerator: 5, denominator: 2}}}]}]", "rules[0].filters[0].requestMirror.fraction", "numerator must be less than or equal to denominator"},
	{"CEL: path with //", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: PathPrefix, value: /a//b}}]}]", "rules[0].matches[0].path", "must not contain '//'"},
	{"CEL: path with /./", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: PathPrefix, value: /a/./b}}]}]", "rules[0].matches[0].path", "must not contain '/./'"},
	{"CEL: path with /../", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: PathPrefix, value: /a/../b}}]}]", "rules[0].matches[0].path", "must not contain '/../'"},
	{"CEL: path with %2f", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: PathPrefix, value: /a%2fb}}]}]", "rules[0].matches[0].path", "must not contain '%2f'"},
	{"CEL: path with %2F", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: PathPrefix, value: /a%2Fb}}]}]", "rules[0].matches[0].path", "must not contain '%2F'"},
	{"CEL: path with #", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: PathPrefix, value: '/a#b'}}]}]", "rules[0].matches[0].path", "must not contain '#'"},
	{"CEL: path ending /..", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: PathPrefix, value: /a/..}}]}]", "rules[0].matches[0].path", "must not end with '/..'"},
	{"CEL: path ending /.", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: PathPrefix, value: /a/.}}]}]", "rules[0].matches[0].path", "must not end with '/.'"},
	{"CEL: path characters", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: PathPrefix, value: '/a b'}}]}]", "rules[0].matches[0].path", "must only contain valid characters"},
	{"CEL: grpc method characters", "GRPCRoute", "v1", "rules: [{matches: [{method: {service: a.B, method: 'c-d'}}]}]", "rules[0].matches[0].method", "method must only contain valid characters"},
	{"CEL: listener tls mode for HTTPS", "Gateway", "v1", "gatewayClassName: istio\nlisteners: [{name: a, port: 443, protocol: HTTPS, tls: {mode: Passthrough}}]", "listeners", "tls mode must be Terminate for protocol HTTPS"},
	{"CEL: listener tls mode for TLS", "Gateway", "v1", "gatewayClassName: istio\nlisteners: [{name: a, port: 443, protocol: TLS}]", "listeners", "tls mode must be set for protocol TLS"},
	{"CEL: listener port/protocol/hostname unique", "Gateway", "v1", "gatewayClassName: istio\nlisteners: [{name: a, port: 80, protocol: HTTP}, {name: b, port: 80, protocol: HTTP}]", "listeners", "Combination of port, protocol and hostname must be unique for each listener"},
	{"CEL: listener terminate needs certificates", "Gateway", "v1", "gatewayClassName: istio\nlisteners: [{name: a, port: 443, protocol: HTTPS, tls: {mode: Terminate, certificateRefs: [], options: {}}}]", "listeners[0].tls", "certificateRefs or options must be specified when mode is Terminate"},
	{"CEL: addresses unique", "Gateway", "v1", "gatewayClassName: istio\naddresses: [{type: IPAddress, value: 1.2.3.4}, {type: IPAddress, value: 1.2.3.4}]\nlisteners: [{name: a, port: 80, protocol: HTTP}]", "addresses", "IPAddress values must be unique"},
	{"CEL: hostname addresses unique", "Gateway", "v1", "gatewayClassName: istio\naddresses: [{type: Hostname, value: a.example}, {type: Hostname, value: a.example}]\nlisteners: [{name: a, port: 80, protocol: HTTP}]", "addresses", "Hostname values must be unique"},
	{"CEL: hostname address characters", "Gateway", "v1", "gatewayClassName: istio\naddresses: [{type: Hostname, value: A_B}]\nlisteners: [{name: a, port: 80, protocol: HTTP}]", "addresses[0]", "Hostname value must be empty or contain only valid characters"},
	{"CEL: infrastructure annotation keys", "Gateway", "v1", "gatewayClassName: istio\ninfrastructure: {annotations: {'-bad': x}}\nlisteners: [{name: a, port: 80, protocol: HTTP}]", "infrastructure.annotations", "Annotation keys must be in the form"},
	{"CEL: sectionName required for two refs", "HTTPRoute", "v1", "parentRefs: [{name: gw, sectionName: a}, {name: gw}]", "parentRefs", "sectionName must be specified when parentRefs includes 2 or more references to the same parent"},
	{"CEL: CORS filter", "HTTPRoute", "v1", "rules: [{filters: [{type: CORS}]}]", "rules[0].filters[0]", "filter.cors must be specified for CORS filter.type"},
	{"CEL: CORS of another type", "HTTPRoute", "v1", "rules: [{filters: [{type: URLRewrite, urlRewrite: {}, cors: {}}]}]", "rules[0].filters[0]", "filter.cors must be nil if the filter.type is not CORS"},
	{"CEL: CORS repeated", "HTTPRoute", "v1", "rules: [{filters: [{type: CORS, cors: {}}, {type: CORS, cors: {}}]}]", "rules[0].filters", "CORS filter cannot be repeated"},
	{"CEL: CORS allowHeaders wildcard", "HTTPRoute", "v1", "rules: [{filters: [{type: CORS, cors: {allowHeaders: ['*', x-a]}}]}]", "rules[0].filters[0].cors.allowHeaders", "AllowHeaders cannot contain '*' alongside other"},
	{"CEL: backend redirect prefix needs one PathPrefix match", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: Exact, value: /a}}], backendRefs: [{name: a, port: 80, filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}}]}]}]", "rules[0]", "Within backendRefs, when using RequestRedirect filter with path.replacePrefixMatch"},
	{"CEL: backend rewrite prefix needs one PathPrefix match", "HTTPRoute", "v1", "rules: [{matches: [{path: {type: Exact, value: /a}}], backendRefs: [{name: a, port: 80, filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}}]}]}]", "rules[0]", "Within backendRefs, When using URLRewrite filter with path.replacePrefixMatch"},
	{"CEL: total HTTP matches", "HTTPRoute", "v1", "rules: [" + strings.Repeat("{matches: ["+strings.Repeat("{method: GET},", 30)+"]},", 5) + "]", "rules", "While 16 rules and 64 matches per rule are allowed, the total number of matches"},
	{"CEL: total gRPC matches", "GRPCRoute", "v1", "rules: [" + strings.Repeat("{matches: ["+strings.Repeat("{headers: [{name: a, value: b}]},", 30)+"]},", 5) + "]", "rules", "While 16 rules and 64 matches per rule are allowed, the total number of matches"},
	{"CEL: annotation prefix length", "Gateway", "v1", "gatewayClassName: istio\ninfrastructure: {annotations: {'" + strings.Repeat("a.", 127) + "a/b': x}}\nlisteners: [{name: a, port: 80, protocol: HTTP}]", "infrastructure.annotations", "the annotation key's prefix must be a DNS subdomain not longer than 253"},
	{"list map keys: per-port TLS unique", "Gateway", "v1", "gatewayClassName: istio\ntls: {frontend: {default: {validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: c}]}}, perPort: [{port: 443, tls: {validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: c}]}}}, {port: 443, tls: {validation: {caCertificateRefs: [{group: '', kind: ConfigMap, name: c}]}}}]}}\nlisteners: [{name: a, port: 80, protocol: HTTP}]", "tls.frontend.perPort[1]", "duplicate entry port=443"},
	{"CEL: GRPCRoute parentRefs", "GRPCRoute", "v1", "parentRefs: [{name: gw}, {name: gw}]", "parentRefs", "must be unique when parentRefs includes 2 or more references to the same parent"},
	{"CEL: GRPCRoute parentRefs sectionName", "GRPCRoute", "v1", "parentRefs: [{name: gw, sectionName: a}, {name: gw}]", "parentRefs", "must be specified when parentRefs includes 2 or more references to the same parent"},
	{"CEL: TCPRoute parentRefs", "TCPRoute", "v1alpha2", "parentRefs: [{name: gw}, {name: gw}]\nrules: [{backendRefs: [{name: a, port: 80}]}]", "parentRefs", "must be unique when parentRefs includes 2 or more references to the same parent"},
	{"CEL: TCPRoute parentRefs sectionName", "TCPRoute", "v1alpha2", "parentRefs: [{name: gw, sectionName: a}, {name: gw}]\nrules: [{backendRefs: [{name: a, port: 80}]}]", "parentRefs", "must be specified when parentRefs includes 2 or more references to the same parent"},
}

// TestDecodeSpecValidKinds: one valid spec of each kind decodes.
func TestDecodeSpecValidKinds(t *testing.T) {
	cases := map[string]string{
		"GatewayClass":   "controllerName: istio.io/gateway-controller",
		"Gateway":        "gatewayClassName: istio\nlisteners: [{name: http, port: 80, protocol: HTTP, hostname: '*.example.com'}]",
		"HTTPRoute":      "parentRefs: [{name: echo, kind: ServiceEntry, group: networking.istio.io}]\nrules: [{matches: [{headers: [{name: x-v, value: '2'}]}], backendRefs: [{name: echo, port: 80}], timeouts: {request: 5s}}]",
		"GRPCRoute":      "parentRefs: [{name: echo}]\nrules: [{matches: [{method: {service: echo.Echo, method: Call}}], backendRefs: [{name: echo, port: 80, weight: 80}]}]",
		"TCPRoute":       "parentRefs: [{name: gw}]\nrules: [{backendRefs: [{name: a, port: 9000}]}]",
		"TLSRoute":       "parentRefs: [{name: gw}]\nhostnames: ['*.example.com']\nrules: [{backendRefs: [{name: a, port: 443}]}]",
		"ReferenceGrant": "from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: edge}]\nto: [{group: '', kind: Service}]",
	}
	for kind, spec := range cases {
		d := DecodeSpec(kind, "v1", specNode(t, spec))
		if len(d.Problems) > 0 || d.Spec == nil {
			t.Errorf("%s: %+v", kind, d.Problems)
		}
	}
	if got := Versions("TCPRoute"); strings.Join(got, ",") != "v1,v1alpha2" {
		t.Errorf("TCPRoute versions = %v", got)
	}
}

// notExercised are the CRDs' CEL rules no case of problemCases fails, and
// why: each is a rule left to exercise, or one that cannot fail.
var notExercised = map[string]string{
	// Shadowed: the hostnames' item pattern refuses first (the rules of a
	// list run only when its items are valid).
	"self.all(h, !h.contains('*') ? h.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$') : true)": "shadowed by the items' pattern",
	// Shadowed: the list's map keys (name) refuse a duplicate first.
	"self.all(l1, !has(l1.name) || self.exists_one(l2, has(l2.name) && l1.name == l2.name))": "shadowed by x-kubernetes-list-map-keys",
	"self.all(l1, self.exists_one(l2, l1.name == l2.name))":                                  "shadowed by x-kubernetes-list-map-keys",
	"self.all(t1, self.exists_one(t2, t1.port == t2.port))":                                  "shadowed by x-kubernetes-list-map-keys (port)",
	// Shadowed: the type's enum refuses any other value first.
	"self.type in ['Exact','PathPrefix'] || self.type == 'RegularExpression'":                                                                                        "shadowed by the enum",
	"self.all(h, h.contains('*') ? (h.startsWith('*.') && h.substring(2).matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$')) : true)": "shadowed by the items' pattern",
}

// TestCELRuleCoverage: every CEL rule of the CRDs (but the transition
// rules) fails for at least one case of problemCases, or is listed in
// notExercised with the reason.
func TestCELRuleCoverage(t *testing.T) {
	failed := map[string]bool{}
	for _, c := range problemCases {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(c.spec), &n); err != nil {
			t.Fatal(err)
		}
		decodeSpecRules(c.kind, c.version, n.Content[0], failed)
	}
	cs, err := loadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]bool{}
	var walk func(s *schema)
	walk = func(s *schema) {
		if s == nil {
			return
		}
		for _, r := range s.Validations {
			if !r.transition {
				all[r.Rule] = true
			}
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.additional)
	}
	for _, versions := range cs.specs {
		for _, s := range versions {
			walk(s)
		}
	}
	var missing []string
	for r := range all {
		if !failed[r] && notExercised[r] == "" {
			missing = append(missing, r)
		}
	}
	slices.Sort(missing)
	t.Logf("%d rules, %d exercised, %d listed as not exercisable", len(all), len(failed), len(notExercised))
	for _, r := range missing {
		t.Errorf("no case fails rule %s", r)
	}
	// A listed rule must still be a rule of the CRDs, and one no case
	// fails (else the entry is stale).
	for r, why := range notExercised {
		switch {
		case !all[r]:
			t.Errorf("notExercised lists a rule the CRDs no longer have (%s): %s", why, r)
		case failed[r]:
			t.Errorf("notExercised lists a rule a case fails (%s): %s", why, r)
		}
	}
	if len(all) == 0 || len(failed)+len(notExercised) != len(all) {
		t.Errorf("%d rules: %d exercised + %d listed", len(all), len(failed), len(notExercised))
	}
}
