package analysis_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/model/analysis"
	"github.com/vmesh/vmesh/store"
)

// analyze runs the analysis on objs as vmesh validate does: built into a
// model snapshot.
func analyze(t *testing.T, objs []*store.Object, complete bool) []store.ConfigError {
	t.Helper()
	ws, err := analysis.Objects(objs, nil, complete)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

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

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
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

// The analysis finds, across objects, what no object alone shows, with
// Istio's codes where Istio has one.
func TestAnalyze(t *testing.T) {
	objs, errs := filestore.Decode("mesh.yaml", []byte(analysisYAML))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := analyze(t, objs, true)
	want := []where{
		{32, "hosts[0]", store.CodeConflictingVirtualServices},
		{33, "gateways[1]", store.CodeReferencedResourceNotFound},
		{42, "http[0].route[1].destination.subset", store.CodeReferencedResourceNotFound},
		{45, "http[0].route[2].destination.host", store.CodeShortHostMismatch},
		{51, "hosts[0]", store.CodeConflictingVirtualServices},
		{55, "http[0].route[0].destination.host", store.CodeReferencedResourceNotFound},
		{64, "", store.CodeWorkloadEntryUnselected},
		{75, "metadata", store.CodeWorkloadGroupUnselected},
	}
	if !slices.Equal(wheres(got), want) {
		t.Errorf("analysis:\n%v\nwant\n%v", wheres(got), want)
		for _, w := range got {
			t.Log(w.Error())
		}
	}
	for _, w := range got {
		if w.Severity != store.SeverityWarning {
			t.Errorf("%s: severity %s", w.Error(), w.Severity)
		}
	}
	// Without the registries, a host no file defines may be a registry's:
	// an info, not a warning.
	for _, w := range analyze(t, objs, false) {
		wantSev := store.SeverityWarning
		if w.Line == 55 {
			wantSev = store.SeverityInfo
		}
		if w.Severity != wantSev {
			t.Errorf("partial: %s: severity %s, want %s", w.Error(), w.Severity, wantSev)
		}
	}
}

// A tcp route that would take a TLS or HTTPS port of its host is not
// applied there (sidecars route such ports by tls routes only, as Istio's
// do): VM1017 at the route. One on a TCP port only, or on a host without a
// TLS port, is applied.
func TestAnalyzeTCPRouteOnTLSPort(t *testing.T) {
	objs, errs := filestore.Decode("l4.yaml", []byte(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: edge, namespace: shop}
spec:
  hosts: [edge.example.com]
  ports:
  - {number: 443, name: tls, protocol: TLS}
  - {number: 5000, name: tcp, protocol: TCP}
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.example.com]
  ports:
  - {number: 5432, name: tcp, protocol: TCP}
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: edge, namespace: shop}
spec:
  hosts: [edge.example.com]
  tcp:
  - match: [{port: 5000}]
    route: [{destination: {host: edge.example.com}}]
  - match: [{port: 443}]
    route: [{destination: {host: edge.example.com}}]
  - route: [{destination: {host: edge.example.com}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.example.com]
  tcp:
  - route: [{destination: {host: db.example.com}}]
`))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := analyze(t, objs, true)
	want := []where{{28, "tcp[1]", store.CodeL4RouteNotApplied}, {30, "tcp[2]", store.CodeL4RouteNotApplied}}
	if !slices.Equal(wheres(got), want) {
		t.Errorf("analysis:\n%v\nwant\n%v", wheres(got), want)
	}
	for _, w := range got {
		if !strings.Contains(w.Message, "port 443") {
			t.Errorf("%s: want the TLS port named", w.Error())
		}
	}
}

// VirtualServices for one host that no namespace sees together do not
// conflict; two Sidecars without a selector in one namespace do.
func TestAnalyzeExportToAndSidecars(t *testing.T) {
	doc := `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: r, namespace: a}
spec:
  hosts: [r.example.internal]
  exportTo: ["."]
  http: [{route: [{destination: {host: r.example.internal}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: r, namespace: b}
spec:
  hosts: [r.example.internal]
  exportTo: ["."]
  http: [{route: [{destination: {host: r.example.internal}}]}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: r, namespace: a}
spec:
  hosts: [r.example.internal]
  ports: [{number: 80, name: http}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: one, namespace: a}
spec:
  egress: [{hosts: ["./*"]}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: two, namespace: a}
spec:
  egress: [{hosts: ["*/*"]}]
`
	objs, errs := filestore.Decode("x.yaml", []byte(doc))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := analyze(t, objs, true)
	if want := []where{{25, "", store.CodeSidecarsWithoutSelector}, {31, "", store.CodeSidecarsWithoutSelector}}; !slices.Equal(wheres(got), want) {
		t.Errorf("analysis %v, want %v\n%v", wheres(got), want, got)
	}
}

// The analysis is logged once per change, not per push: a change that
// leaves the warnings as they are logs nothing; one that clears a warning
// says so.
func TestLogAnalysisOncePerChange(t *testing.T) {
	objs, errs := filestore.Decode("mesh.yaml", []byte(analysisYAML))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cs := store.NewStore()
	src := store.Source{Name: "dir:x", Class: store.ClassConfig}
	must(t, cs.Replace(src, objs))
	var logs testenv.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- analysis.Log(ctx, cs, &analysis.Cache{}, logs.Logger(slog.LevelInfo)) }()
	defer func() { cancel(); <-done }()
	waitLines := func(msg string, n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for len(logs.Lines(msg)) < n && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if got := len(logs.Lines(msg)); got != n {
			t.Fatalf("%d %q lines, want %d:\n%s", got, msg, n, strings.Join(logs.Lines(""), "\n"))
		}
	}
	waitLines("config analysis warnings", 1)
	if !strings.Contains(logs.Lines("config analysis warnings")[0], `"total":8`) {
		t.Errorf("first line: %s", logs.Lines("")[0])
	}
	// A change that leaves the warnings as they are (one more endpoint of
	// a selected service): analysed again, nothing logged.
	extra, errs := filestore.Decode("extra.yaml", []byte("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: ratings-2, namespace: shop}\nspec: {address: 10.0.0.9, labels: {app: ratings}}\n"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	objs = append(objs, extra...)
	must(t, cs.Replace(src, objs))
	time.Sleep(1500 * time.Millisecond) // past the next analysis
	if n := len(logs.Lines("")); n != 1 {
		t.Errorf("an unchanged analysis was logged:\n%s", strings.Join(logs.Lines(""), "\n"))
	}
	// Drop the stray WorkloadEntry: its warning clears.
	var kept []*store.Object
	for _, o := range objs {
		if o.Name != "stray" {
			kept = append(kept, o)
		}
	}
	must(t, cs.Replace(src, kept))
	waitLines("config analysis warnings cleared", 1)
	if n := len(logs.Lines("config analysis warnings")); n != 1 {
		t.Errorf("analysis logged %d times, want once:\n%s", n, strings.Join(logs.Lines(""), "\n"))
	}
}

// A destination port no ServiceEntry of the host has is IST0101 too.
func TestAnalyzeDestinationPort(t *testing.T) {
	doc := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: r, namespace: a}
spec:
  hosts: [r.example.internal]
  ports: [{number: 80, name: http}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: r, namespace: a}
spec:
  hosts: [r.example.internal]
  http:
  - route:
    - destination: {host: r.example.internal, port: {number: 80}}
      weight: 50
    - destination:
        host: r.example.internal
        port: {number: 8080}
      weight: 50
`
	objs, errs := filestore.Decode("p.yaml", []byte(doc))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := analyze(t, objs, true)
	if want := []where{{20, "http[0].route[1].destination.port.number", store.CodeReferencedResourceNotFound}}; !slices.Equal(wheres(got), want) {
		t.Errorf("analysis %v, want %v\n%v", wheres(got), want, got)
	}
}

// A root route's delegate that does not exist, or is not exported to the
// root's namespace, is a warning on the route (the model drops it).
func TestDelegateWarnings(t *testing.T) {
	objs, errs := filestore.Decode("vs.yaml", []byte(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews.default.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: root, namespace: default}
spec:
  hosts: [reviews.default.svc.cluster.local]
  http:
  - delegate: {name: missing}
  - delegate: {name: private, namespace: team}
  - match: [{uri: {prefix: /api}}]
    delegate: {name: public, namespace: team}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: private, namespace: team}
spec:
  exportTo: ["."]
  http:
  - route:
    - destination: {host: reviews.default.svc.cluster.local}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: public, namespace: team}
spec:
  http:
  - match: [{uri: {prefix: /api/v2}}]
    route:
    - destination: {host: reviews.default.svc.cluster.local}
  - match: [{uri: {prefix: /other}}]
    route:
    - destination: {host: reviews.default.svc.cluster.local}
`))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := []where{
		{15, "http[0].delegate", store.CodeReferencedResourceNotFound},
		{16, "http[1].delegate", store.CodeDelegateNotExported},
		{18, "http[2].delegate", store.CodeDelegateRouteConflicts},
	}
	if got := wheres(analyze(t, objs, true)); !slices.Equal(got, want) {
		t.Errorf("delegate warnings = %v, want %v", got, want)
	}
}

// TestGatewayServed: a Gateway whose selector no WorkloadEntry's labels
// match (no gateway VM) is VM1008 and a VirtualService bound only to it
// VM1009; once a gateway VM with those labels exists (a router runs
// there) neither is: the router serves them.
func TestGatewayServed(t *testing.T) {
	const doc = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: [web.example.com]
  gateways: [istio-system/edge]
  http: [{route: [{destination: {host: web.shop.internal}}]}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: web, namespace: shop}
spec:
  hosts: [web.shop.internal]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
`
	const vm = `
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: ingress-vm, namespace: istio-system}
spec:
  address: 10.0.5.1
  labels: {istio: ingressgateway, app: istio-ingressgateway}
`
	const otherVM = `
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: egress-vm, namespace: istio-system}
spec:
  address: 10.0.5.2
  labels: {istio: egressgateway}
`
	for _, tc := range []struct {
		name string
		doc  string
		want []where
	}{
		{"no gateway VM", doc, []where{{1, "", store.CodeGatewayNotServed}, {13, "gateways", store.CodeGatewayOnlyRoutes}}},
		{"a gateway VM with other labels", doc + otherVM, []where{{1, "", store.CodeGatewayNotServed}, {13, "gateways", store.CodeGatewayOnlyRoutes}}},
		{"a gateway VM", doc + vm, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, errs := filestore.Decode("gw.yaml", []byte(tc.doc))
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			var got []store.ConfigError
			for _, w := range analyze(t, objs, true) {
				if w.Code == store.CodeGatewayNotServed || w.Code == store.CodeGatewayOnlyRoutes {
					got = append(got, w)
				}
			}
			if !slices.Equal(wheres(got), tc.want) {
				t.Errorf("analysis %v, want %v\n%v", wheres(got), tc.want, got)
			}
		})
	}
}

// vmesh analyze names the Telemetry providers vmesh's proxies do not use:
// one no extension provider has, an access log provider of another kind
// (the built-in prometheus), a tracing provider that is not zipkin or
// opentelemetry; the built-in envoy provider is used.
func TestAnalyzeTelemetryProviders(t *testing.T) {
	objs, errs := filestore.Decode("telemetry.yaml", []byte(`apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  accessLogging:
  - providers:
    - name: envoy
    - name: prometheus
    - name: nowhere
  tracing:
  - providers:
    - name: stackdriver
`))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := analyze(t, objs, true)
	want := []where{{8, "accessLogging[0].providers[1]", store.CodeTelemetryFieldNotApplied},
		{9, "accessLogging[0].providers[2]", store.CodeTelemetryFieldNotApplied}, {12, "tracing[0].providers[0]", store.CodeTelemetryFieldNotApplied}}
	if !slices.Equal(wheres(got), want) {
		t.Errorf("analysis:\n%v\nwant\n%v", wheres(got), want)
	}
}

// Two Telemetries without a selector in one namespace: each is named
// (Istio's IST0160), the first by name being the one vmesh applies; a
// selector Telemetry and another namespace's are not.
func TestAnalyzeTelemetriesWithoutSelector(t *testing.T) {
	objs, errs := filestore.Decode("telemetry.yaml", []byte(`apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  accessLogging: [{providers: [{name: envoy}]}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: logs, namespace: istio-system}
spec:
  accessLogging: [{disabled: true}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: one, namespace: istio-system}
spec:
  selector: {matchLabels: {app: a}}
  accessLogging: [{disabled: true}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: shop, namespace: shop}
spec:
  accessLogging: [{disabled: true}]
`))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := analyze(t, objs, true)
	want := []where{{1, "", store.CodeTelemetriesWithoutSelector}, {7, "", store.CodeTelemetriesWithoutSelector}}
	if !slices.Equal(wheres(got), want) {
		t.Errorf("analysis:\n%v\nwant\n%v", wheres(got), want)
	}
	for _, w := range got {
		if !strings.Contains(w.Message, `vmesh applies "logs"`) {
			t.Errorf("message %q does not name the Telemetry vmesh applies", w.Message)
		}
	}
}
