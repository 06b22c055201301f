package gatewayapi

import (
	"encoding/json"
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
	cases := []struct {
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
	}
	for _, c := range cases {
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
