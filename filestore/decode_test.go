package filestore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
)

func TestDecodeValidFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/valid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	kinds := map[store.Kind]int{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, errs := filestore.Decode(f, data)
		for _, e := range errs {
			t.Errorf("%s", e.Error())
		}
		for _, o := range objs {
			kinds[o.Kind]++
		}
	}
	for _, k := range store.Kinds {
		if kinds[k] == 0 {
			t.Errorf("no fixture of kind %s", k)
		}
	}
}

func TestDecodeFields(t *testing.T) {
	data, err := os.ReadFile("testdata/valid/routing.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, errs := filestore.Decode("routing.yaml", data)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	vs := objs[0].Spec.(*networking.VirtualService)
	if got := vs.Http[1].Timeout.AsDuration().String(); got != "10s" {
		t.Errorf("timeout = %s", got)
	}
	if got := vs.Http[1].Route[1].Weight; got != 25 {
		t.Errorf("weight = %d", got)
	}
	if got := vs.Http[0].Match[0].Headers["end-user"].GetExact(); got != "jason" {
		t.Errorf("header match = %q", got)
	}
	dr := objs[1].Spec.(*networking.DestinationRule)
	if got := dr.TrafficPolicy.OutlierDetection.Interval.AsDuration().String(); got != "5m0s" {
		t.Errorf("interval = %s (Istio's 5m must decode)", got)
	}
	if objs[0].Namespace != "bookinfo" || objs[0].Origin.Line != 1 || objs[1].Origin.Line != 118 {
		t.Errorf("metadata/origin: %+v %+v", objs[0].Key, objs[1].Origin)
	}
	sec, _ := os.ReadFile("testdata/valid/security.yaml")
	objs, errs = filestore.Decode("security.yaml", sec)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pa := objs[1].Spec.(*security.PeerAuthentication)
	if pa.PortLevelMtls[8080].Mode != security.PeerAuthentication_MutualTLS_DISABLE {
		t.Errorf("port-level mTLS: %v", pa.PortLevelMtls)
	}
	wl, _ := os.ReadFile("testdata/valid/workloads.yaml")
	objs, _ = filestore.Decode("workloads.yaml", wl)
	if objs[0].Healthy != nil || objs[1].Healthy == nil || !*objs[1].Healthy {
		t.Errorf("Healthy condition not decoded: %v %v", objs[0].Healthy, objs[1].Healthy)
	}
	if objs[0].Namespace != "bookinfo" {
		t.Errorf("namespace %q", objs[0].Namespace)
	}
}

func TestDecodeDefaultNamespace(t *testing.T) {
	objs, errs := filestore.Decode("a.yaml", []byte("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: a}\nspec: {address: 1.1.1.1}\n"))
	if len(errs) > 0 || len(objs) != 1 || objs[0].Namespace != "default" {
		t.Fatalf("got %v %v", objs, errs)
	}
}

// invalidCase is one document Istio rejects, and the error vmesh must give.
type invalidCase struct {
	name string
	doc  string
	// want is "line: object: field: message fragment"
	line    int
	field   string
	message string
}

const seHead = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se}
spec:
`

const vsHead = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs}
spec:
  hosts: [a.example.com]
`

const drHead = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: dr}
spec:
`

func TestDecodeInvalid(t *testing.T) {
	cases := []invalidCase{
		// Document level.
		{name: "unknown kind", doc: "apiVersion: networking.istio.io/v1\nkind: ServiceEntryy\nmetadata: {name: x}\nspec: {}\n", line: 2, field: "kind", message: `unknown kind "ServiceEntryy": no Istio API defines it`},
		{name: "Istio kind in a version Istio does not serve", doc: "apiVersion: networking.istio.io/v1\nkind: EnvoyFilter\nmetadata: {name: x}\nspec: {}\n", line: 1, field: "apiVersion", message: `"networking.istio.io/v1" is not served for "EnvoyFilter" (want v1alpha3)`},
		{name: "Kubernetes kind", doc: "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {}\n", line: 2, field: "kind", message: `unknown kind "Service": no Istio API defines it`},
		{name: "wrong group", doc: "apiVersion: security.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: x}\nspec: {}\n", line: 1, field: "apiVersion", message: "not served for ServiceEntry"},
		{name: "unknown top-level field", doc: seHead + "  hosts: [a.b]\n  resolution: NONE\nextra: 1\n", line: 7, field: "extra", message: `unknown field "extra"`},
		{name: "bad name", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: Bad_Name}\nspec: {address: 1.1.1.1}\n", line: 3, field: "metadata.name", message: "not a valid name"},
		{name: "missing name", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {namespace: a}\nspec: {address: 1.1.1.1}\n", line: 3, field: "metadata.name", message: "name is required"},
		{name: "bad metadata label", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata:\n  name: a\n  labels: {\"a b\": x}\nspec: {address: 1.1.1.1}\n", line: 5, field: "metadata.labels.a b", message: "invalid label key"},
		{name: "syntax error", doc: "apiVersion: networking.istio.io/v1\nkind: [\n", line: 2, message: "invalid YAML"},
		// ServiceEntry.
		{name: "se no hosts", doc: seHead + "  resolution: NONE\n", line: 4, field: "hosts", message: "at least one host"},
		{name: "se bad host", doc: seHead + "  hosts: [a.example.com, 'bad host']\n  resolution: NONE\n", line: 5, field: "hosts[1]", message: "not a valid domain name"},
		{name: "se star host", doc: seHead + "  hosts: ['*']\n  resolution: NONE\n", line: 5, field: "hosts[0]", message: `"*" is not allowed`},
		{name: "se unknown field", doc: seHead + "  hosts: [a.b]\n  resolution: NONE\n  endpoint: []\n", line: 7, field: "endpoint", message: `unknown field "endpoint" in ServiceEntry`},
		{name: "se bad enum", doc: seHead + "  hosts: [a.b]\n  resolution: MAGIC\n", line: 6, field: "resolution", message: `unknown value "MAGIC"`},
		{name: "se port zero", doc: seHead + "  hosts: [a.b]\n  resolution: STATIC\n  ports:\n  - number: 0\n    name: http\n", line: 8, field: "ports[0].number", message: "1-65535"},
		{name: "se port too big", doc: seHead + "  hosts: [a.b]\n  resolution: STATIC\n  ports:\n  - number: 70000\n    name: http\n", line: 8, field: "ports[0].number", message: "1-65535"},
		{name: "se port name", doc: seHead + "  hosts: [a.b]\n  resolution: STATIC\n  ports:\n  - number: 80\n    name: -bad-\n", line: 9, field: "ports[0].name", message: "invalid port name"},
		{name: "se dup port", doc: seHead + "  hosts: [a.b]\n  resolution: STATIC\n  ports:\n  - {number: 80, name: http}\n  - {number: 80, name: http2}\n", line: 9, field: "ports[1].number", message: "used twice"},
		{name: "se bad protocol", doc: seHead + "  hosts: [a.b]\n  resolution: STATIC\n  ports:\n  - {number: 80, name: http, protocol: SPDY}\n", line: 8, field: "ports[0].protocol", message: "unknown protocol"},
		{name: "se dns round robin endpoints", doc: seHead + "  hosts: [a.b]\n  resolution: DNS_ROUND_ROBIN\n  ports: [{number: 80, name: http}]\n  endpoints: [{address: 1.1.1.1}, {address: 2.2.2.2}]\n", line: 8, field: "endpoints", message: "at most one endpoint"},
		{name: "se none with endpoints", doc: seHead + "  hosts: [a.b]\n  resolution: NONE\n  endpoints:\n  - address: 1.1.1.1\n", line: 7, field: "endpoints", message: "not allowed with resolution NONE"},
		{name: "se static hostname", doc: seHead + "  hosts: [a.b]\n  resolution: STATIC\n  ports: [{number: 80, name: http}]\n  endpoints:\n  - address: foo.com\n", line: 9, field: "endpoints[0].address", message: "must be an IP"},
		{name: "se dns wildcard", doc: seHead + "  hosts: ['*.a.b']\n  resolution: DNS\n  ports: [{number: 80, name: http}]\n", line: 5, field: "hosts[0]", message: "needs endpoints"},
		{name: "se selector and endpoints", doc: seHead + "  hosts: [a.b]\n  resolution: STATIC\n  ports: [{number: 80, name: http}]\n  workloadSelector: {labels: {app: a}}\n  endpoints: [{address: 1.1.1.1}]\n", line: 8, field: "workloadSelector", message: "mutually exclusive"},
		{name: "se bad address", doc: seHead + "  hosts: [a.b]\n  addresses: [300.1.1.1]\n  resolution: NONE\n", line: 6, field: "addresses[0]", message: "not an IP"},
		{name: "se endpoint unknown port name", doc: seHead + "  hosts: [a.b]\n  resolution: STATIC\n  ports: [{number: 80, name: http}]\n  endpoints:\n  - address: 1.1.1.1\n    ports: {grpc: 90}\n", line: 10, field: "endpoints[0].ports.grpc", message: "not one of the ServiceEntry's port names"},
		{name: "se exportTo", doc: seHead + "  hosts: [a.b]\n  resolution: NONE\n  exportTo: ['~', '*']\n", line: 7, field: "exportTo[0]", message: "must be the only"},
		{name: "se wrong type", doc: seHead + "  hosts: a.b\n  resolution: NONE\n", line: 5, field: "hosts", message: "must be a list"},
		// WorkloadEntry.
		{name: "we no address", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: a}\nspec:\n  labels: {app: a}\n", line: 4, field: "address", message: "address is required"},
		{name: "we bad port", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: a}\nspec:\n  address: 1.1.1.1\n  ports:\n    http: 0\n", line: 7, field: "ports.http", message: "1-65535"},
		{name: "we bad label", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: a}\nspec:\n  address: 1.1.1.1\n  labels:\n    version: \"-v1\"\n", line: 7, field: "labels.version", message: "invalid label value"},
		{name: "we negative port", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: a}\nspec:\n  address: 1.1.1.1\n  ports:\n    http: -1\n", line: 7, field: "ports.http", message: "non-negative integer"},
		// WorkloadGroup.
		{name: "wg probe scheme", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadGroup\nmetadata: {name: g}\nspec:\n  template: {}\n  probe:\n    httpGet: {port: 80, scheme: FTP}\n", line: 7, field: "probe.httpGet.scheme", message: `"HTTP" or "HTTPS"`},
		{name: "wg no template", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadGroup\nmetadata: {name: g}\nspec:\n  metadata: {labels: {a: b}}\n", line: 4, field: "template", message: "template is required"},
		{name: "wg probe port", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadGroup\nmetadata: {name: g}\nspec:\n  template: {}\n  probe:\n    tcpSocket:\n      port: 0\n", line: 8, field: "probe.tcpSocket.port", message: "1-65535"},
		{name: "wg empty probe", doc: "apiVersion: networking.istio.io/v1\nkind: WorkloadGroup\nmetadata: {name: g}\nspec:\n  template: {}\n  probe:\n    periodSeconds: 3\n", line: 6, field: "probe", message: "needs one of"},
		// VirtualService.
		{name: "vs weights", doc: vsHead + "  http:\n  - route:\n    - destination: {host: a.example.com, subset: v1}\n      weight: 0\n    - destination: {host: a.example.com, subset: v2}\n      weight: 0\n", line: 9, field: "http[0].route[0].weight", message: "add up to 0"},
		{name: "vs second route weights", doc: vsHead + "  http:\n  - route:\n    - destination: {host: a.example.com}\n  - route:\n    - destination: {host: a.example.com, subset: v1}\n      weight: 0\n    - destination: {host: a.example.com, subset: v2}\n      weight: 0\n", line: 11, field: "http[1].route[0].weight", message: "add up to 0"},
		{name: "vs delegate with gateways", doc: "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs}\nspec:\n  gateways: [mesh]\n  http:\n  - route:\n    - destination: {host: a}\n", line: 5, field: "gateways", message: "must not name gateways"},
		{name: "vs no destination host", doc: vsHead + "  http:\n  - route:\n    - destination: {subset: v1}\n", line: 8, field: "http[0].route[0].destination.host", message: "host is required"},
		{name: "vs no route", doc: vsHead + "  http:\n  - match:\n    - uri: {prefix: /}\n", line: 7, field: "http[0].route", message: "needs route, redirect"},
		{name: "vs bad regex", doc: vsHead + "  http:\n  - match:\n    - uri: {regex: '('}\n    route:\n    - destination: {host: a.example.com}\n", line: 8, field: "http[0].match[0].uri.regex", message: "invalid regular expression"},
		{name: "vs header name", doc: vsHead + "  http:\n  - match:\n    - headers:\n        x user: {exact: a}\n    route:\n    - destination: {host: a.example.com}\n", line: 9, field: "http[0].match[0].headers.x user", message: "not a valid header name"},
		{name: "vs bad timeout", doc: vsHead + "  http:\n  - timeout: 10\n    route:\n    - destination: {host: a.example.com}\n", line: 7, field: "http[0].timeout", message: "invalid duration"},
		{name: "vs abort status", doc: vsHead + "  http:\n  - fault:\n      abort:\n        httpStatus: 700\n        percentage: {value: 50}\n    route:\n    - destination: {host: a.example.com}\n", line: 9, field: "http[0].fault.abort.httpStatus", message: "200-599"},
		{name: "vs fault percent", doc: vsHead + "  http:\n  - fault:\n      delay:\n        fixedDelay: 1s\n        percentage: {value: 150}\n    route:\n    - destination: {host: a.example.com}\n", line: 10, field: "http[0].fault.delay.percentage.value", message: "0-100"},
		{name: "vs retry on", doc: vsHead + "  http:\n  - retries:\n      attempts: 2\n      retryOn: sometimes\n    route:\n    - destination: {host: a.example.com}\n", line: 9, field: "http[0].retries.retryOn", message: "unknown retry condition"},
		{name: "vs mirror percent", doc: vsHead + "  http:\n  - mirror: {host: b.example.com}\n    mirrorPercentage: {value: 101}\n    route:\n    - destination: {host: a.example.com}\n", line: 8, field: "http[0].mirrorPercentage.value", message: "0-100"},
		{name: "vs mirror and mirrors", doc: vsHead + "  http:\n  - mirror: {host: b.example.com}\n    mirrors: [{destination: {host: c.example.com}}]\n    route: [{destination: {host: a.example.com}}]\n", line: 8, field: "http[0].mirrors", message: "mutually exclusive"},
		{name: "vs tcp weights", doc: vsHead + "  tcp:\n  - route:\n    - destination: {host: a.example.com}\n      weight: 0\n    - destination: {host: b.example.com}\n      weight: 0\n", line: 9, field: "tcp[0].route[0].weight", message: "add up to 0"},
		{name: "vs oneof twice", doc: vsHead + "  http:\n  - match:\n    - uri: {prefix: /a, exact: /b}\n    route:\n    - destination: {host: a.example.com}\n", line: 8, field: "http[0].match[0].uri.exact", message: "prefix and exact are mutually exclusive"},
		// DestinationRule.
		{name: "dr no host", doc: drHead + "  subsets: [{name: v1, labels: {v: '1'}}]\n", line: 4, field: "host", message: "host is required"},
		{name: "dr dup subset", doc: drHead + "  host: a.example.com\n  subsets:\n  - name: v1\n  - name: v1\n", line: 8, field: "subsets[1].name", message: "defined twice"},
		{name: "dr subset name", doc: drHead + "  host: a.example.com\n  subsets:\n  - name: V_1\n", line: 7, field: "subsets[0].name", message: "DNS-1123 label"},
		{name: "dr outlier percent", doc: drHead + "  host: a.example.com\n  trafficPolicy:\n    outlierDetection:\n      maxEjectionPercent: 150\n", line: 8, field: "trafficPolicy.outlierDetection.maxEjectionPercent", message: "0-100"},
		{name: "dr cookie without name", doc: drHead + "  host: a.example.com\n  trafficPolicy:\n    loadBalancer:\n      consistentHash: {httpCookie: {ttl: 0s}}\n", line: 8, field: "trafficPolicy.loadBalancer.consistentHash.httpCookie.name", message: "cookie name is required"},
		{name: "dr port level empty", doc: drHead + "  host: a.example.com\n  trafficPolicy:\n    portLevelSettings:\n    - port: {number: 80}\n", line: 8, field: "trafficPolicy.portLevelSettings[0]", message: "must set at least one field"},
		{name: "dr mutual without certs", doc: drHead + "  host: a.example.com\n  trafficPolicy:\n    tls: {mode: MUTUAL}\n", line: 7, field: "trafficPolicy.tls", message: "needs clientCertificate"},
		{name: "dr negative maxRetries", doc: drHead + "  host: a.example.com\n  trafficPolicy:\n    connectionPool:\n      http: {maxRetries: -1}\n", line: 8, field: "trafficPolicy.connectionPool.http.maxRetries", message: "must not be negative"},
		// Sidecar.
		{name: "sidecar host format", doc: "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s}\nspec:\n  egress:\n  - hosts: [foo.com]\n", line: 6, field: "egress[0].hosts[0]", message: "namespace/dnsName"},
		{name: "sidecar catch-all not last", doc: "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s}\nspec:\n  egress:\n  - hosts: ['./*']\n  - port: {number: 80, name: http, protocol: HTTP}\n    hosts: ['./*']\n", line: 6, field: "egress[0].port", message: "only the last"},
		// Gateway.
		{name: "gateway no servers", doc: "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec:\n  selector: {app: gw}\n", line: 4, field: "servers", message: "at least one server"},
		{name: "gateway https without tls", doc: "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec:\n  servers:\n  - port: {number: 443, name: https, protocol: HTTPS}\n    hosts: ['*']\n", line: 6, field: "servers[0].tls", message: "needs tls"},
		// PeerAuthentication.
		{name: "pa port level without selector", doc: "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p}\nspec:\n  portLevelMtls:\n    8080: {mode: DISABLE}\n", line: 5, field: "portLevelMtls", message: "needs a workload selector"},
		{name: "pa bad mode", doc: "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p}\nspec:\n  mtls: {mode: SOMETIMES}\n", line: 5, field: "mtls.mode", message: `unknown value "SOMETIMES"`},
		// AuthorizationPolicy.
		{name: "authz custom without provider", doc: "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p}\nspec:\n  action: CUSTOM\n  rules: [{}]\n", line: 4, field: "provider.name", message: "must not be empty"},
		{name: "authz custom principals", doc: "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p}\nspec:\n  action: CUSTOM\n  provider: {name: ext}\n  rules:\n  - from:\n    - source: {principals: [a]}\n", line: 9, field: "rules[0].from[0].source.principals", message: "not supported with action CUSTOM"},
		{name: "authz bad port", doc: "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - to:\n    - operation:\n        ports: [http]\n", line: 8, field: "rules[0].to[0].operation.ports[0]", message: "not a number"},
		{name: "authz empty source", doc: "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - from:\n    - source: {}\n", line: 7, field: "rules[0].from[0].source", message: "at least one field"},
		{name: "authz service account", doc: "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - from:\n    - source:\n        serviceAccounts: [a/b/c]\n", line: 8, field: "rules[0].from[0].source.serviceAccounts[0]", message: "must be <name> or <namespace>/<name>"},
		{name: "authz when ip", doc: "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - when:\n    - key: source.ip\n      values: [not-an-ip]\n", line: 8, field: "rules[0].when[0].values[0]", message: "not an IP"},
		{name: "authz when key", doc: "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - when:\n    - key: request.colour\n      values: [red]\n", line: 7, field: "rules[0].when[0].key", message: "unknown condition key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs, errs := filestore.Decode("case.yaml", []byte(c.doc))
			if len(objs) != 0 {
				t.Errorf("decoded %d objects from an invalid document", len(objs))
			}
			if len(errs) == 0 {
				t.Fatalf("no error")
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
				if e.File == "case.yaml" && e.Line == c.line && e.Field == c.field && strings.Contains(e.Message, c.message) {
					return
				}
			}
			t.Errorf("want case.yaml:%d field %q message ~%q; got:\n%s", c.line, c.field, c.message, strings.Join(got, "\n"))
		})
	}
}

func TestDecodeMultiDocumentKeepsGoodDocuments(t *testing.T) {
	doc := "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: a}\nspec: {address: 1.1.1.1}\n---\n" +
		"apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: b}\nspec: {address: 1.1.1.1, bogus: 1}\n---\n---\n" +
		"apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: c, namespace: x}\nspec: {address: 1.1.1.2}\n"
	objs, errs := filestore.Decode("m.yaml", []byte(doc))
	if len(objs) != 2 || objs[1].Name != "c" || objs[1].Origin.Line != 12 {
		t.Fatalf("objects: %v", objs)
	}
	if len(errs) != 1 || errs[0].Line != 9 || errs[0].Object != "WorkloadEntry/default/b" {
		t.Fatalf("errors: %v", errs)
	}
	if want := "m.yaml:9: WorkloadEntry/default/b: bogus: unknown field \"bogus\" in WorkloadEntry"; errs[0].Error() != want {
		t.Errorf("got %q want %q", errs[0].Error(), want)
	}
}

func TestDecodeAliasBomb(t *testing.T) {
	doc := "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: x}\nspec:\n  hosts: &a0 [a.b, a.b, a.b, a.b, a.b, a.b, a.b, a.b]\n"
	for i := 1; i < 10; i++ {
		doc += fmt.Sprintf("  x%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	doc += "  addresses: *a9\n"
	_, errs := filestore.Decode("bomb.yaml", []byte(doc))
	if len(errs) == 0 {
		t.Fatal("alias bomb decoded")
	}
}
