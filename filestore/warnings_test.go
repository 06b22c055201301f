package filestore_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/model/analysis"
	"github.com/vmesh/vmesh/store"
)

// where is a warning's place and code, as a test expects it.
type where struct {
	line  int
	field string
	code  string
}

func wheres(ws []store.ConfigError) []where {
	out := make([]where, len(ws))
	for i, w := range ws {
		out[i] = where{w.Line, w.Field, w.Code}
	}
	return out
}

const wasmPluginYAML = `apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata:
  name: mesh-default
  namespace: istio-system
spec:
  url: oci://example.internal/filters/auth:1.0
`

// Config vmesh accepts but does not (fully) enforce decodes, and is a
// warning with its line, field and code; the object still decodes.
func TestDecodeWarnings(t *testing.T) {
	cases := []struct {
		name    string
		doc     string
		objects int
		want    []where
	}{
		{name: "WasmPlugin", doc: wasmPluginYAML, want: []where{{2, "kind", store.CodeKindNotImplemented}}},
		{name: "Telemetry metrics and what proxyless gRPC ignores", objects: 1, doc: `apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: t, namespace: shop}
spec:
  selector:
    matchLabels: {app: ledger}
  tracing:
  - randomSamplingPercentage: 10
  accessLogging:
  - providers: [{name: envoy}]
  metrics:
  - providers: [{name: prometheus}]
    overrides:
    - match: {metric: REQUEST_COUNT}
      disabled: true
    - tagOverrides:
        request_protocol: {operation: REMOVE}
`, want: []where{{12, "metrics[0].providers", store.CodeTelemetryFieldNotApplied},
			{15, "metrics[0].overrides[0].disabled", store.CodeTelemetryFieldNotApplied},
			{17, "metrics[0].overrides[1].tagOverrides.request_protocol", store.CodeTelemetryFieldNotApplied},
			{8, "tracing[0]", store.CodeProxylessIgnores}, {10, "accessLogging[0]", store.CodeProxylessIgnores}, {12, "metrics[0]", store.CodeProxylessIgnores}}},
		{name: "Telemetry targetRefs", objects: 1, doc: "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: t}\nspec:\n  targetRefs: [{kind: Service, group: \"\", name: ledger}]\n  tracing: [{randomSamplingPercentage: 10}]\n",
			want: []where{{5, "targetRefs", store.CodeTelemetryFieldNotApplied}}}, // ignored whole: nothing more to say
		{name: "RequestAuthentication is implemented", objects: 1, doc: "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: jwt}\nspec:\n  jwtRules: [{issuer: x}]\n"},
		{name: "RequestAuthentication targetRefs", objects: 1, doc: "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: jwt}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: edge}]\n  jwtRules: [{issuer: x}]\n",
			want: []where{{5, "targetRefs", store.CodePolicyTargetRefs}}},
		{name: "Gateway API UDPRoute", doc: "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: UDPRoute\nmetadata: {name: r}\nspec: {}\n",
			want: []where{{2, "kind", store.CodeKindNotImplemented}}},
		{name: "grpc-node balances LEAST_REQUEST as round robin", objects: 1, doc: `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: r}
spec:
  host: r.shop.internal
  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}
`, want: []where{{7, "trafficPolicy.loadBalancer.simple", store.CodeProxylessIgnores}}},
		{name: "dry-run", objects: 1, doc: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: deny-all
  annotations:
    istio.io/dry-run: "true"
spec:
  action: DENY
  rules: [{}]
`, want: []where{{6, "metadata.annotations.istio.io/dry-run", store.CodeDryRunShadowOnly}, {8, "action", store.CodeProxylessIgnores}}},
		{name: "requestPrincipals and request.auth.claims", objects: 1, doc: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: jwt, namespace: shop}
spec:
  rules:
  - from:
    - source:
        requestPrincipals: ["issuer/subject"]
  - when:
    - key: request.auth.claims[groups]
      values: [admins]
    - key: source.namespace
      values: [shop]
`, want: []where{{4, "action", store.CodeProxylessIgnores}, {8, "rules[0].from[0].source.requestPrincipals", store.CodeRuleNotEnforced}, {10, "rules[1].when[0].key", store.CodeRuleNotEnforced}}},
		// Whether a router serves a Gateway (VM1008) and its VirtualServices
		// (VM1009) is the analysis' (model/analysis): no object warning.
		{name: "Gateway", objects: 1, doc: `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
`, want: nil},
		{name: "Gateway servers routers do not serve (AUTO_PASSTHROUGH, TLS before tcp routes, certificate files, caCrl and credentialNames are served; a relative path and caCertCredentialName beside a MUTUAL credential are not); TLS fields left out as Istio's gateways do, ecdhCurves and alpnProtocols (unknown to Istio 1.31) where TLS is terminated", objects: 1, doc: `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    hosts: ["*.local"]
    tls: {mode: AUTO_PASSTHROUGH}
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: SIMPLE, serverCertificate: certs/cert.pem, privateKey: /etc/certs/key.pem}
  - port: {number: 8443, name: https-ok, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: SIMPLE, credentialName: ok}
  - port: {number: 31400, name: tls-tcp-ok, protocol: TLS}
    hosts: ["*"]
    tls: {mode: SIMPLE, credentialName: ok}
  - port: {number: 9443, name: https-files-ok, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: MUTUAL, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem, caCertificates: /etc/certs/ca.pem}
  - port: {number: 9444, name: https-crl, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: MUTUAL, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem, caCertificates: /etc/certs/ca.pem, caCrl: /etc/certs/crl.pem}
  - port: {number: 9445, name: https-names, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: MUTUAL, credentialNames: [rsa, ecdsa], verifyCertificateSpki: [abc]}
  - port: {number: 9446, name: https-ca-cred, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: MUTUAL, credentialName: ok, caCertCredentialName: roots}
  - port: {number: 9447, name: https-pins, protocol: HTTPS}
    hosts: ["*"]
    tls:
      mode: MUTUAL
      serverCertificate: /etc/certs/cert.pem
      privateKey: /etc/certs/key.pem
      caCertificates: /etc/certs/ca.pem
      verifyCertificateSpki: [abc]
      verifyCertificateHash: [def]
  - port: {number: 9448, name: https-names-crl, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: OPTIONAL_MUTUAL, credentialNames: [rsa], caCrl: /etc/certs/crl.pem}
  - port: {number: 9449, name: https-curves, protocol: HTTPS}
    hosts: ["*"]
    tls:
      mode: SIMPLE
      credentialName: ok
      ecdhCurves: [P-256]
      alpnProtocols: [h2]
  - port: {number: 9450, name: tls-passthrough, protocol: TLS}
    hosts: ["*"]
    tls: {mode: PASSTHROUGH, ecdhCurves: [P-256], alpnProtocols: [h2]}
`, want: []where{{12, "servers[1].tls", store.CodeGatewayServerNotServed}, {30, "servers[7].tls", store.CodeGatewayServerNotServed},
			{38, "servers[8].tls.verifyCertificateSpki", store.CodeGatewayTLSFieldNotApplied}, {39, "servers[8].tls.verifyCertificateHash", store.CodeGatewayTLSFieldNotApplied},
			{42, "servers[9].tls.caCrl", store.CodeGatewayTLSFieldNotApplied},
			{48, "servers[10].tls.ecdhCurves", store.CodeGatewayTLSFieldNotApplied}, {49, "servers[10].tls.alpnProtocols", store.CodeGatewayTLSFieldNotApplied}}},
		{name: "gateway-only VirtualService", objects: 1, doc: `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: edge, namespace: shop}
spec:
  hosts: [shop.example.com]
  gateways: [edge]
  http: [{route: [{destination: {host: web.shop.internal}}]}]
`, want: nil},
		{name: "Sidecar fields not applied", objects: 1, doc: `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: vm, namespace: shop}
spec:
  workloadSelector: {labels: {app: vm}}
  ingress:
  - port: {number: 9443, protocol: HTTPS, name: https}
    defaultEndpoint: 127.0.0.1:9080
    tls: {mode: SIMPLE, serverCertificate: /etc/vm/cert.pem, privateKey: /etc/vm/key.pem}
  - port: {number: 9090, protocol: HTTP, name: http}
    defaultEndpoint: 127.0.0.1:9090
    bind: 10.0.0.5
    captureMode: NONE
  - port: {number: 9091, protocol: HTTP, name: plain}
    defaultEndpoint: 127.0.0.1:9091
    captureMode: DEFAULT
  - port: {number: 9092, protocol: HTTP, name: captured}
    defaultEndpoint: 127.0.0.1:9092
    captureMode: IPTABLES
  egress:
  - hosts: ["./*"]
    bind: 127.0.0.2
`, want: []where{{22, "egress[0].bind", store.CodeSidecarFieldNotApplied}, {9, "ingress[0].tls", store.CodeSidecarFieldNotApplied},
			{12, "ingress[1].bind", store.CodeSidecarFieldNotApplied}, {13, "ingress[1].captureMode", store.CodeSidecarFieldNotApplied}}},
		{name: "traffic policy fields: not applied, proxyless infos", objects: 1, doc: `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop}
spec:
  host: web.shop.internal
  trafficPolicy:
    loadBalancer:
      simple: ROUND_ROBIN
      warmup: {duration: 30s}
    retryBudget: {percent: 15}
    proxyProtocol: {version: V1}
    connectionPool: {http: {http2MaxRequests: 10, idleTimeout: 30s}}
    portLevelSettings:
    - port: {number: 80}
      connectionPool: {http: {http2MaxRequests: 10}}
    - port: {number: 81}
      connectionPool: {tcp: {maxConnections: 5}}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      tunnel: {protocol: CONNECT, targetHost: egress.internal, targetPort: 8443}
`, want: []where{{10, "trafficPolicy.retryBudget", store.CodeProxylessIgnores}, {11, "trafficPolicy.proxyProtocol", store.CodeProxylessIgnores},
			{12, "trafficPolicy.connectionPool", store.CodeProxylessIgnores}, {9, "trafficPolicy.loadBalancer.warmup", store.CodeProxylessIgnores},
			{17, "trafficPolicy.portLevelSettings[1].connectionPool", store.CodeProxylessIgnores}, {22, "subsets[0].trafficPolicy.tunnel", store.CodeTrafficPolicyNotApplied}}},
		{name: "TLS routes and destinationSubnets are applied", objects: 1, doc: `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: edge, namespace: shop}
spec:
  hosts: [a.example.com]
  tls:
  - match: [{sniHosts: [a.example.com], port: 443}]
    route: [{destination: {host: a.example.com}}]
  tcp:
  - match: [{port: 5000}, {destinationSubnets: [10.0.0.0/8]}]
    route: [{destination: {host: a.example.com}}]
`, want: nil},
		{name: "what proxyless gRPC ignores: infos", objects: 2, doc: `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: [web.shop.internal]
  http:
  - match:
    - queryParams: {q: {exact: x}}
    route: [{destination: {host: web.shop.internal}}]
    mirror: {host: web-shadow.shop.internal}
  - match:
    - sourceLabels: {app: canary}
    route: [{destination: {host: web.shop.internal}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop}
spec:
  host: web.shop.internal
  trafficPolicy:
    loadBalancer: {simple: LEAST_CONN}
    outlierDetection: {consecutive5xxErrors: 5}
`, want: []where{{10, "http[0].mirror", store.CodeProxylessIgnores}, {8, "http[0].match[0].queryParams", store.CodeProxylessIgnores},
			{21, "trafficPolicy.loadBalancer.simple", store.CodeProxylessIgnores}, {22, "trafficPolicy.outlierDetection", store.CodeProxylessIgnores}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := filestore.DecodeFile("w.yaml", []byte(c.doc), filestore.Limits{})
			if len(d.Errors) > 0 || len(d.Objects) != c.objects {
				t.Fatalf("objects %d (want %d), errors %v", len(d.Objects), c.objects, d.Errors)
			}
			if got := wheres(d.Warnings); !slices.Equal(got, c.want) {
				t.Errorf("warnings %v, want %v\n%v", got, c.want, d.Warnings)
			}
			for _, w := range d.Warnings {
				sev := store.SeverityWarning
				if w.Code == store.CodeProxylessIgnores {
					sev = store.SeverityInfo
				}
				if w.Severity != sev || !strings.Contains(w.Error(), "w.yaml:") || !strings.Contains(w.Error(), ": "+sev.String()+" "+w.Code+": ") {
					t.Errorf("rendered %q, want severity %s", w.Error(), sev)
				}
			}
		})
	}
}

// A kind in no Istio API stays an error; so does an Istio kind in a
// version Istio does not serve.
func TestDecodeUnknownKindsStayErrors(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: telemetry.istio.io/v1\nkind: Telemetri\nmetadata: {name: x}\nspec: {}\n",
		"apiVersion: telemetry.istio.io/v2\nkind: Telemetry\nmetadata: {name: x}\nspec: {}\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {}\n",
	} {
		d := filestore.DecodeFile("k.yaml", []byte(doc), filestore.Limits{})
		if len(d.Errors) != 1 || len(d.Warnings) != 0 {
			t.Errorf("%q: errors %v, warnings %v", doc, d.Errors, d.Warnings)
		}
	}
}

// kind: List, as `kubectl get -o yaml` prints it, is unpacked: each item
// is an object with its own line, and an item's problem names its line.
func TestDecodeKubernetesList(t *testing.T) {
	doc := `apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: networking.istio.io/v1
  kind: WorkloadEntry
  metadata: {name: a, namespace: shop}
  spec: {address: 10.0.0.1}
- apiVersion: networking.istio.io/v1
  kind: WorkloadEntry
  metadata:
    name: b
    namespace: shop
  spec:
    address: 10.0.0.2
- apiVersion: extensions.istio.io/v1alpha1
  kind: WasmPlugin
  metadata: {name: t}
  spec: {}
- apiVersion: networking.istio.io/v1
  kind: WorkloadEntry
  metadata: {name: c}
  spec: {adress: 10.0.0.3}
`
	d := filestore.DecodeFile("list.yaml", []byte(doc), filestore.Limits{})
	if len(d.Objects) != 2 || d.Objects[0].Name != "a" || d.Objects[1].Name != "b" {
		t.Fatalf("objects %v", d.Objects)
	}
	if d.Objects[0].Origin.Line != 6 || d.Objects[1].Origin.Line != 10 {
		t.Errorf("lines %d, %d; want 6, 10", d.Objects[0].Origin.Line, d.Objects[1].Origin.Line)
	}
	if got := wheres(d.Warnings); !slices.Equal(got, []where{{18, "kind", store.CodeKindNotImplemented}}) {
		t.Errorf("warnings %v", d.Warnings)
	}
	if len(d.Errors) != 1 || d.Errors[0].Line != 24 || d.Errors[0].Object != "WorkloadEntry/default/c" {
		t.Errorf("errors %v", d.Errors)
	}
}

// A YAML syntax error names the line of the offending token, and a tab is
// called a tab.
func TestYAMLErrorLines(t *testing.T) {
	cases := []struct {
		name, doc string
		line      int
		message   string
	}{
		{name: "key indented between two blocks", doc: `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: r}
spec:
  hosts: [r.shop.internal]
  http:
  - route:
    - destination:
        host: r.shop.internal
       weight: 3
`, line: 10, message: "indentation of this line matches no enclosing block"},
		{name: "key outdented past its block", doc: "apiVersion: v1\nkind: WorkloadEntry\nmetadata:\n  name: a\n namespace: b\nspec: {}\n", line: 5, message: "indentation"},
		{name: "second document", doc: "apiVersion: v1\nkind: List\n---\nmetadata:\n  name: a\n namespace: b\n", line: 6, message: "indentation"},
		{name: "mapping key in a sequence", doc: "spec:\n  hosts:\n  - a\n  - b\n  http: x\n  - c\n", line: 6, message: "invalid YAML"},
		{name: "tab", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata:\n  name: a\nspec:\n  address: 1.1.1.1\n\tweight: 3\n", line: 7,
			message: "tab character in indentation; YAML allows only spaces"},
		{name: "tab before a list item", doc: "spec:\n  hosts:\n\t- x\n", line: 3, message: "tab character in indentation; YAML allows only spaces"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errs := filestore.Decode("y.yaml", []byte(c.doc))
			if len(errs) != 1 || errs[0].Line != c.line || !strings.Contains(errs[0].Message, c.message) {
				t.Errorf("got %v, want line %d ~%q", errs, c.line, c.message)
			}
		})
	}
}

const analysisYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: reviews}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.internal]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: ratings}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings, namespace: shop}
spec:
  host: ratings.shop.internal
  subsets:
  - name: v1
    labels: {version: v1}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings.shop.internal]
  gateways: [mesh, edge]
  http:
  - route:
    - destination:
        host: ratings.shop.internal
        subset: v1
      weight: 50
    - destination:
        host: ratings.shop.internal
        subset: v2
      weight: 50
    - destination:
        host: reviews
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings-too, namespace: shop}
spec:
  hosts: [ratings.shop.internal]
  http:
  - route:
    - destination:
        host: details.shop.internal
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: ratings-1, namespace: shop}
spec:
  address: 10.0.0.1
  labels: {app: ratings, version: v1}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: stray, namespace: shop}
spec:
  address: 10.0.0.2
  labels: {app: stray}
---
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: ledger, namespace: shop}
spec:
  metadata: {labels: {app: ledger}}
  template: {serviceAccount: ledger}
`

// A git commit with a WasmPlugin object (an Istio kind vmesh does not
// implement) and a valid VirtualService is applied; the warning is in the
// source's status, /debug/config and vmesh_config_warnings.
func TestGitCommitWithUnimplementedKindApplied(t *testing.T) {
	ctx := context.Background()
	repo := newGitRepo(t)
	commit := repo.commit("wasm", map[string]string{
		"mesh/wasm.yaml": wasmPluginYAML,
		"mesh/mesh.yaml": analysisYAML,
	})
	src, cs := newGitSource(t, repo.dir, "main", "mesh")
	if err := src.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	snap := cs.Snapshot()
	if src.GoodCommit() != commit || snap.Get(store.Key{Kind: store.KindVirtualService, Namespace: "shop", Name: "ratings"}) == nil {
		t.Fatalf("commit not applied: serving %q, errors %v", src.GoodCommit(), gitStatus(snap).Errors)
	}
	st := gitStatus(snap)
	if len(st.Errors) != 0 || len(st.Warnings) != 1 || st.Warnings[0].Code != store.CodeKindNotImplemented ||
		!strings.HasPrefix(st.Warnings[0].Error(), commit[:12]+":mesh/wasm.yaml:2: WasmPlugin/istio-system/mesh-default: kind: warning VM1001: ") {
		t.Fatalf("status errors %v, warnings %v", st.Errors, st.Warnings)
	}

	rec := httptest.NewRecorder()
	filestore.DebugHandler(cs, new(analysis.Cache).Warnings).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/config", nil))
	var dbg filestore.DebugConfig
	if err := json.Unmarshal(rec.Body.Bytes(), &dbg); err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{}
	for _, w := range dbg.Warnings {
		codes[w.Code]++
		if w.Source != src.Source().Name || w.Commit != commit || w.Severity != store.SeverityWarning {
			t.Errorf("/debug/config warning %+v", w)
		}
	}
	if codes[store.CodeKindNotImplemented] != 1 || codes[store.CodeReferencedResourceNotFound] != 3 {
		t.Errorf("/debug/config warnings by code %v", codes)
	}
	if !strings.Contains(rec.Body.String(), `"severity": "warning"`) {
		t.Errorf("severity is not written by name:\n%s", rec.Body.String())
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(filestore.NewCollector(cs, new(analysis.Cache).Warnings))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "vmesh_config_warnings" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] != src.Source().Name {
				t.Errorf("series of source %q", labels["source"])
			}
			got[labels["code"]] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{}
	for _, c := range store.WarningCodes {
		if !c.Info {
			want[c.Code] = 0 // every code, at 0 when none
		}
	}
	for code, n := range map[string]float64{"VM1001": 1, "IST0101": 3, "IST0109": 2, "VM2001": 1, "VM2003": 1, "VM2004": 1} {
		want[code] = n
	}
	if !maps.Equal(got, want) {
		t.Errorf("vmesh_config_warnings by code %v, want %v", got, want)
	}
}

// A file's warnings are logged once when they appear and once when they
// are gone, not at every change of the folder.
func TestDirSourceLogsWarningsOnce(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "wasm.yaml"), wasmPluginYAML)
	writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("a", "10.0.0.1"))
	// An info (what proxyless gRPC ignores) is not logged.
	writeFile(t, filepath.Join(dir, "dr.yaml"), "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: a}\nspec:\n  host: a.example.internal\n  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 5}}\n")
	var logs testenv.LogBuffer
	cs := runDir(t, dir, logs.Logger(slog.LevelInfo))
	for i, addr := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"} {
		writeFile(t, filepath.Join(dir, "a.yaml"), weYAML("a", addr))
		eventually(t, "edit "+string(rune('1'+i)), func(s *store.Snapshot) bool { return addressOf(s, "a") == addr }, cs)
	}
	if n := len(logs.Lines("config warnings")); n != 1 || strings.Contains(strings.Join(logs.Lines(""), "\n"), "dr.yaml") {
		t.Errorf("warnings logged %d times, want once, and no info:\n%s", n, strings.Join(logs.Lines(""), "\n"))
	}
	must(t, os.Remove(filepath.Join(dir, "wasm.yaml")))
	eventually(t, "the warning cleared", func(s *store.Snapshot) bool {
		for _, st := range s.Sources {
			for _, w := range st.Warnings {
				if w.Severity == store.SeverityWarning {
					return false
				}
			}
		}
		return true
	}, cs)
	if n := len(logs.Lines("config errors cleared")); n != 1 {
		t.Errorf("cleared logged %d times, want once", n)
	}
}

// filestore's list of enforceable condition keys is the model's.
func TestSupportedConditionKeysMatchModel(t *testing.T) {
	for _, k := range []string{"source.ip", "remote.ip", "source.namespace", "source.principal", "source.serviceAccount", "destination.ip",
		"destination.port", "connection.sni", "request.headers[x-user]", "request.auth.claims[groups]", "request.auth.principal",
		"source.trustDomain", "experimental.envoy.filters.network.mysql_proxy[db.table]", "request.headers[", "destination.labels[app]"} {
		doc := "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - when:\n    - key: \"" + k + "\"\n      values: [x]\n"
		d := filestore.DecodeFile("p.yaml", []byte(doc), filestore.Limits{})
		if len(d.Errors) > 0 {
			continue // a key Istio rejects: not a warning
		}
		// The grpc-node info every ALLOW policy gets (VM1101) is no warning about the key.
		warned := slices.ContainsFunc(d.Warnings, func(p store.ConfigError) bool { return p.Code != store.CodeProxylessIgnores })
		if warned == model.SupportedConditionKey(k) {
			t.Errorf("key %q: warned %v, model supports it %v", k, warned, model.SupportedConditionKey(k))
		}
	}
}

var readmeCodeRE = regexp.MustCompile("^\\| `((?:IST|VM)[0-9]{4})` \\|")

// The README's table documents every warning code, and only those.
func TestREADMEDocumentsWarningCodes(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "<!-- warning-codes:begin -->")
	section, _, ok2 := strings.Cut(section, "<!-- warning-codes:end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no <!-- warning-codes:begin --> ... <!-- warning-codes:end --> section")
	}
	var documented, codes []string
	for _, line := range strings.Split(section, "\n") {
		if m := readmeCodeRE.FindStringSubmatch(line); m != nil {
			documented = append(documented, m[1])
			if strings.Count(line, " | ") < 3 {
				t.Errorf("README row for %s needs meaning, example and fix: %s", m[1], line)
			}
		}
	}
	for _, c := range store.WarningCodes {
		codes = append(codes, c.Code)
	}
	if !slices.Equal(documented, codes) {
		t.Errorf("README documents %v, want %v (in order)", documented, codes)
	}
}

// An endpoint with a network and no address (reached, in Istio, through
// that network's gateway) is a warning: vmesh has no network gateways.
func TestEndpointWithoutAddressWarns(t *testing.T) {
	d := filestore.DecodeFile("se.yaml", []byte(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: remote, namespace: default}
spec:
  hosts: [remote.default.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints:
  - address: 10.0.0.1
  - network: net2
    ports: {http: 8080}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: far, namespace: default}
spec:
  network: net2
  labels: {app: remote}
`), filestore.DefaultLimits())
	if len(d.Errors) > 0 {
		t.Fatal(d.Errors)
	}
	want := []where{{10, "endpoints[1]", store.CodeEndpointWithoutAddress}, {10, "endpoints[1].address", store.CodeSchemaWarning},
		{16, "address", store.CodeEndpointWithoutAddress}, {16, "address", store.CodeSchemaWarning}}
	if got := wheres(d.Warnings); !slices.Equal(got, want) {
		t.Errorf("warnings = %v, want %v", got, want)
	}
}

// The warnings Istio's validation gives (IST0133, and IST0130/IST0131 for
// VirtualService rules) are warnings with their line, field and code;
// near misses give none. istio_warning_parity_test.go checks them on
// Istio's own YAML.
func TestIstioValidationWarnings(t *testing.T) {
	const (
		unreachable = store.CodeUnreachableRule
		ineffective = store.CodeIneffectiveMatch
		schema      = store.CodeSchemaWarning
	)
	cases := []struct {
		name string
		doc  string
		want []where
	}{
		{name: "DENY rules with only HTTP attributes", doc: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny, namespace: shop}
spec:
  action: DENY
  rules:
  - to: [{operation: {methods: [DELETE]}}]
  - to: [{operation: {methods: [DELETE], ports: ["8080"]}}]
  - from: [{source: {namespaces: [legacy]}}]
  - from: [{source: {requestPrincipals: [issuer/sub]}}]
    to: [{operation: {ports: ["8080"]}}]
  - from: [{source: {principals: [cluster.local/ns/a/sa/b]}}]
    to: [{operation: {paths: [/admin]}}]
  - when: [{key: "request.headers[x-debug]", values: ["1"]}]
`, want: []where{{5, "action", store.CodeProxylessIgnores}, {10, "rules[3].from[0].source.requestPrincipals", store.CodeRuleNotEnforced}, {7, "rules[0]", schema}, {12, "rules[4]", schema}}},
		{name: "an ALLOW rule with only HTTP attributes is no warning", doc: `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow, namespace: shop}
spec:
  rules: [{to: [{operation: {methods: [GET]}}]}]
`, want: []where{{4, "action", store.CodeProxylessIgnores}}},
		{name: "selectors without labels", doc: `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: pa, namespace: shop}
spec:
  selector: {}
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: ra, namespace: shop}
spec:
  selector: {matchLabels: {}}
  jwtRules: [{issuer: x}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: dr, namespace: shop}
spec:
  host: web.shop.internal
  workloadSelector: {}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: sc, namespace: shop}
spec:
  workloadSelector: {labels: {}}
  egress: [{hosts: ["./*"]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: labelled, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
`, want: []where{{5, "selector", schema}, {12, "selector", schema}, {20, "workloadSelector", schema}, {26, "workloadSelector", schema}, {32, "action", store.CodeProxylessIgnores}}},
		{name: "ServiceEntry", doc: `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: none, namespace: shop}
spec:
  hosts: ["*x.example.com", "*.example.com"]
  ports: [{number: 80, name: http, protocol: HTTP}, {number: 5432, name: db}]
  resolution: NONE
  workloadSelector: {labels: {app: db}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: pair, namespace: shop}
spec:
  hosts: [a.example.com, b.example.com]
  addresses: [10.1.0.1]
  ports:
  - {number: 80, name: http, protocol: HTTP}
  - {number: 443, name: tls, protocol: TLS}
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: fine, namespace: shop}
spec:
  hosts: [c.example.com, d.example.com]
  addresses: [10.1.0.2]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: allocated, namespace: shop}
spec:
  hosts: [e.example.com]
  ports: [{number: 5432, name: db, protocol: TCP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: selected, namespace: shop}
spec:
  hosts: [f.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: f}}
`, want: []where{{6, "ports[1]", schema}, {5, "hosts[0]", schema}, {8, "workloadSelector", schema}, {18, "ports[1]", schema}}},
		{name: "DestinationRule", doc: `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: old, namespace: shop}
spec:
  host: web.shop.internal
  trafficPolicy:
    outlierDetection: {consecutiveErrors: 5}
    loadBalancer:
      consistentHash: {httpHeaderName: x-user, minimumRingSize: 1024}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy: {outlierDetection: {consecutiveErrors: 5}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: failover, namespace: shop}
spec:
  host: web.shop.internal
  trafficPolicy:
    loadBalancer:
      localityLbSetting:
        failover: [{from: us-east, to: eu-west}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ejecting, namespace: shop}
spec:
  host: web.shop.internal
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 5}
    loadBalancer:
      localityLbSetting:
        failover: [{from: us-east, to: eu-west}]
`, want: []where{{7, "trafficPolicy.outlierDetection", store.CodeProxylessIgnores}, {13, "subsets[0].trafficPolicy.outlierDetection", store.CodeProxylessIgnores},
			{7, "trafficPolicy.outlierDetection.consecutiveErrors", schema}, {9, "trafficPolicy.loadBalancer.consistentHash.minimumRingSize", schema},
			{23, "trafficPolicy.loadBalancer.localityLbSetting.failover", schema}, {31, "trafficPolicy.outlierDetection", store.CodeProxylessIgnores}}},
		{name: "Sidecar", doc: `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  ingress:
  - port: {number: 9000, name: db, protocol: TCP}
    defaultEndpoint: 127.0.0.1:9000
    connectionPool: {http: {maxRetries: 3}, tcp: {maxConnections: 10}}
  - port: {number: 8080, name: http, protocol: HTTP}
    defaultEndpoint: 127.0.0.1:8080
    connectionPool: {http: {maxRetries: 3}}
  egress:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: [shop/*, ./web.shop.internal, ~shop/web.shop.internal, other/a.example.com]
  - hosts: ["*/*", "istio-system/*"]
`, want: []where{{8, "ingress[0].connectionPool.http", schema}, {14, "egress[0].hosts[1]", schema}, {15, "egress[1].hosts[0]", schema}}},
		{name: "Gateway TLS", doc: `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop}
spec:
  servers:
  - port: {number: 443, name: passthrough, protocol: TLS}
    hosts: ["*.example.com"]
    tls: {mode: PASSTHROUGH, credentialName: edge-cert}
  - port: {number: 8443, name: https, protocol: HTTPS}
    hosts: ["*.example.com"]
    tls:
      mode: SIMPLE
      credentialName: edge-cert
      httpsRedirect: true
      minProtocolVersion: TLSV1_0
  - port: {number: 9443, name: https-2, protocol: HTTPS}
    hosts: ["*.example.com"]
    tls:
      mode: SIMPLE
      credentialName: edge-cert
      minProtocolVersion: TLSV1_1
      cipherSuites: [ECDHE-RSA-AES128-SHA, not-a-suite, ECDHE-RSA-AES128-SHA, "-AES128-SHA"]
  - port: {number: 10443, name: https-3, protocol: HTTPS}
    hosts: ["*.example.com"]
    tls: {mode: SIMPLE, credentialName: edge-cert, minProtocolVersion: TLSV1_2, cipherSuites: [AES128-SHA, ECDHE-RSA-AES128-SHA]}
`, want: []where{{8, "servers[0].tls.credentialName", schema},
			{15, "servers[1].tls.minProtocolVersion", schema}, {14, "servers[1].tls.httpsRedirect", schema},
			{22, "servers[2].tls.cipherSuites[1]", schema}, {22, "servers[2].tls.cipherSuites[2]", schema}}},
		{name: "VirtualService fields", doc: `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: [web.shop.internal]
  gateways: [edge.shop, mesh]
  http:
  - route: [{destination: {host: web.shop.internal}}]
    mirror: {host: web-shadow.shop.internal}
    mirrorPercent: 10
  tls:
  - match: [{sniHosts: [10.0.0.1], port: 443}]
    route: [{destination: {host: web.shop.internal}}]
`, want: []where{{9, "http[0].mirror", store.CodeProxylessIgnores}, {6, "gateways[0]", schema}, {10, "http[0].mirrorPercent", schema},
			{12, "tls[0].match[0].sniHosts[0]", schema}}},
		{name: "a large direct response", doc: "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: big, namespace: shop}\nspec:\n  hosts: [big.shop.internal]\n  http:\n  - directResponse:\n      status: 200\n      body: {string: " + strings.Repeat("x", 100<<10+1) + "}\n",
			want: []where{{7, "http[0].directResponse", store.CodeProxylessIgnores}, {9, "http[0].directResponse.body", schema}}},
		{name: "private keys in an inline jwks", doc: `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: shop}
spec:
  jwtRules:
  - issuer: a
    jwks: '{"keys": [{"kty": "EC", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}, {"kty": "oct", "k": "c2VjcmV0"}]}'
  - issuer: b
    jwks: '{"keys": [{"kty": "EC", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}'
`, want: []where{{7, "jwtRules[0].jwks", schema}}},
		{name: "unreachable rules and ineffective matches", doc: `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: rules, namespace: shop}
spec:
  hosts: [rules.shop.internal]
  http:
  - name: api
    match:
    - uri: {prefix: /api}
    - uri: {prefix: /api/v1}
    - uri: {prefix: /api/v2}
      headers: {x-canary: {exact: "1"}}
    route: [{destination: {host: rules.shop.internal}}]
  - match:
    - name: same
      uri: {prefix: /api}
    route: [{destination: {host: rules.shop.internal}}]
  - match: [{uri: {exact: /health}}]
    route: [{destination: {host: rules.shop.internal}}]
  - route: [{destination: {host: rules.shop.internal}}]
  - route: [{destination: {host: rules.shop.internal}}]
  - match: [{uri: {exact: /late}}, {uri: {exact: /later}}]
    route: [{destination: {host: rules.shop.internal}}]
  tcp:
  - route: [{destination: {host: rules.shop.internal}}]
  - match: [{port: 5432}]
    route: [{destination: {host: rules.shop.internal}}]
`, want: []where{{15, "http[1].match[0]", ineffective}, {14, "http[1]", unreachable}, {21, "http[4]", unreachable},
			{22, "http[5].match[0]", unreachable}, {22, "http[5].match[1]", unreachable}, {10, "http[0].match[1]", ineffective},
			{26, "tcp[1].match[0]", unreachable}}},
		{name: "rules that are reached", doc: `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: fine, namespace: shop}
spec:
  hosts: [fine.shop.internal]
  http:
  - match: [{uri: {prefix: /api/v1}}, {uri: {prefix: /api}, headers: {x-user: {exact: a}}}]
    route: [{destination: {host: fine.shop.internal}}]
  - match: [{uri: {prefix: /api}, port: 8080}, {uri: {prefix: /api}}]
    route: [{destination: {host: fine.shop.internal}}]
  - route: [{destination: {host: fine.shop.internal}}]
`},
	}
	infos := map[string]bool{}
	for _, c := range store.WarningCodes {
		infos[c.Code] = c.Info
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := filestore.DecodeFile("w.yaml", []byte(c.doc), filestore.Limits{})
			if len(d.Errors) > 0 || len(d.Objects) == 0 {
				t.Fatalf("objects %d, errors %v", len(d.Objects), d.Errors)
			}
			if got := wheres(d.Warnings); !slices.Equal(got, c.want) {
				t.Errorf("warnings %v, want %v\n%v", got, c.want, d.Warnings)
			}
			for _, w := range d.Warnings {
				sev := store.SeverityWarning
				if infos[w.Code] {
					sev = store.SeverityInfo
				}
				if w.Severity != sev || w.Message == "" {
					t.Errorf("%s: severity %s, want %s: %v", w.Field, w.Severity, sev, w)
				}
			}
		})
	}
}
