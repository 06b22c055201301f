package console_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats/opentelemetry"
	"google.golang.org/grpc/status"

	"github.com/vmesh/vmesh/cmd/internal/console"
	"github.com/vmesh/vmesh/cmd/internal/controlplane"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/internal/xdstest"
)

var updateDocs = flag.Bool("update-docs", false, "also write the graph's screenshots to docs/ (the README shows them)")

// ratesYAML: two services, each selecting its grpc-go app by label, and a
// route to the echo service.
const ratesYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: frontend, namespace: default}
spec:
  hosts: [frontend.graph.internal]
  location: MESH_INTERNAL
  ports: [{number: 8080, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: frontend}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.graph.internal]
  location: MESH_INTERNAL
  ports: [{number: 50051, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-route, namespace: default}
spec:
  hosts: [echo.graph.internal]
  http:
  - route:
    - destination: {host: echo.graph.internal, port: {number: 50051}}
`

// flakyEcho answers UnaryCall, and fails every second call once told to.
type flakyEcho struct {
	testpb.UnimplementedTestServiceServer
	failHalf atomic.Bool
	calls    atomic.Int64
}

func (s *flakyEcho) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if s.failHalf.Load() && s.calls.Add(1)%2 == 0 {
		return nil, status.Error(codes.Internal, "told to fail half the calls")
	}
	return &testpb.SimpleResponse{ServerId: "echo-1"}, nil
}

// appMetrics starts one app's OpenTelemetry metrics, exported for
// Prometheus (the OpenTelemetry Prometheus exporter on its own registry)
// at /metrics on a loopback port from the kernel, and returns grpc-go's
// OpenTelemetry options recording into them and the address.
func appMetrics(t *testing.T) (opentelemetry.Options, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = mp.Shutdown(context.Background())
	})
	return opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: mp}}, l.Addr().String()
}

// edgeRates is an edge's row in the edges table: whether it is there,
// its requests and failed requests per second, and how the table writes
// them.
type edgeRates struct {
	Found          bool
	Rate, Errors   float64
	RateText, Errs string
}

// readEdge reads the row of the graph's edge from -> to in the open page.
func readEdge(t *testing.T, ctx context.Context, from, to string) edgeRates {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := chromedp.Run(c, chromedp.Evaluate[edgeRates](edgeExpr(from, to, `({Found: true, Rate: Number(e.dataset.rate), Errors: Number(e.dataset.errors),
		RateText: e.querySelector("td.rate").innerText, Errs: e.querySelector("td.errors").innerText})`, `({Found: false})`)))
	if err != nil {
		t.Fatalf("reading edge %s -> %s: %v", from, to, err)
	}
	return r
}

// edgeExpr is a script that finds the edge's row (e) and evaluates found,
// or missing when there is none.
func edgeExpr(from, to, found, missing string) string {
	f, _ := json.Marshal(from)
	tt, _ := json.Marshal(to)
	return fmt.Sprintf(`(() => { const e = [...document.querySelectorAll("#edges tr.edge")].find(r => r.dataset.from === %s && r.dataset.to === %s);
		return e ? %s : %s; })()`, f, tt, found, missing)
}

// waitEdge polls the page (every 20 ms, within d) until cond, a script
// expression over the edge's rate r and error rate x, holds.
func waitEdge(t *testing.T, ctx context.Context, d time.Duration, from, to, cond string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	expr := edgeExpr(from, to, fmt.Sprintf(`(r => x => (%s))(Number(e.dataset.rate))(Number(e.dataset.errors))`, cond), "false")
	if _, err := chromedp.Run(c, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(d))); err != nil {
		t.Fatalf("waiting %s for edge %s -> %s to show %s: %v; edges:\n%s", d, from, to, cond, err, text(t, ctx, "#edges"))
	}
}

// TestGraphRatesInBrowser: two proxyless grpc-go apps (a client calling
// a server through vmesh's xDS) export grpc-go's OpenTelemetry metrics,
// the real Prometheus (Debian's package) scrapes them every second with
// each app's xDS node id as its vmesh_node label, and vmesh serve points
// its console at that Prometheus. In headless chromium the graph's edge
// from the frontend service to the echo service shows a non-zero request
// rate within two scrape intervals of the first sample Prometheus holds
// of the client's calls, and, once the server fails every second call,
// an error rate of half the requests. Screenshots: graph-rates.png,
// graph-errors.png (docs/ with -update-docs).
func TestGraphRatesInBrowser(t *testing.T) {
	// scrape is Prometheus's scrape interval; window, the console's rate
	// range, holds four scrapes, and the page refreshes itself every
	// quarter window: once a scrape interval.
	const scrape = time.Second
	const window = 4 * scrape
	start := time.Now()
	ctx := browser(t)
	shots := artifacts(t)

	clientOTel, clientMetrics := appMetrics(t)
	serverOTel, serverMetrics := appMetrics(t)
	prom := testenv.StartPrometheus(t, testenv.PrometheusScrapeConfig(scrape,
		testenv.PrometheusTarget{Addr: clientMetrics, Labels: map[string]string{console.SourceLabel: "frontend-1"}},
		testenv.PrometheusTarget{Addr: serverMetrics, Labels: map[string]string{console.SourceLabel: "echo-1"}}))

	dir := t.TempDir()
	writeFile(t, dir, "mesh.yaml", ratesYAML)
	cp := startPlaneWith(t, func(cfg *controlplane.Config) {
		cfg.ConfigDir = dir
		cfg.Prometheus = controlplane.PrometheusConfig{URL: prom.URL, Window: window, Timeout: 2 * time.Second}
	})
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: askedScript}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, 10*time.Second, "open graph", chromedp.Navigate("http://"+cp.HTTPAddr()+"/ui/graph"))
	live(t, ctx)
	waitText(t, ctx, 5*time.Second, "#traffic", "Rates from Prometheus", prom.URL, "averaged over 4s")

	// The server app, then its WorkloadEntry (its port is the kernel's).
	echo := &flakyEcho{}
	port := xdstest.StartServer(t, cp.XDSAddr(), xdstest.Node{ID: "echo-1", Namespace: "default", Labels: map[string]string{"app": "echo"}}, echo,
		opentelemetry.ServerOption(serverOTel))
	writeFile(t, dir, "echo-1.yaml", fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: echo-1, namespace: default}
spec: {address: 127.0.0.1, ports: {grpc: %d}, labels: {app: echo}}
`, port))

	// The client app calls every 25 ms (at most 40 calls a second), until
	// the test ends (at most 4000 calls).
	const every = 25 * time.Millisecond
	client := xdstest.DialWith(t, cp.XDSAddr(), xdstest.Node{ID: "frontend-1", Namespace: "default", Labels: map[string]string{"app": "frontend"}},
		"echo.graph.internal:50051", opentelemetry.DialOption(clientOTel))
	// The first call waits until vmesh's xDS has given the client the
	// server's endpoint (wait-for-ready): no failed attempt counts before
	// the server is told to fail.
	ready, cancelReady := context.WithTimeout(context.Background(), 20*time.Second)
	resp, err := client.UnaryCall(ready, &testpb.SimpleRequest{}, grpc.WaitForReady(true))
	cancelReady()
	if err != nil || resp.GetServerId() != "echo-1" {
		t.Fatalf("first call: %v, answered by %q; want echo-1", err, resp.GetServerId())
	}
	callCtx, stopCalls := context.WithCancel(context.Background())
	calling := make(chan struct{})
	go func() {
		defer close(calling)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for range 4000 {
			select {
			case <-callCtx.Done():
				return
			case <-tick.C:
			}
			c, cancel := context.WithTimeout(callCtx, 2*time.Second)
			_, _ = client.UnaryCall(c, &testpb.SimpleRequest{})
			cancel()
		}
	}()
	t.Cleanup(func() {
		stopCalls()
		<-calling
	})
	t.Logf("mesh, Prometheus and traffic up in %s", time.Since(start).Round(time.Millisecond))

	from, to := console.ServiceNodeID("frontend.graph.internal"), console.ServiceNodeID("echo.graph.internal")
	route := console.SubsetNodeID("echo.graph.internal", "")

	// A non-zero request rate on the edge within two scrape intervals of
	// the first sample Prometheus holds of the calls: rate() needs two
	// samples, and the second comes one scrape interval after the first;
	// the page asks for itself again at most a quarter window (here one
	// scrape interval) later. The bound is on when the browser asked for
	// the page that first shows the rate (0.5 s more for Prometheus to
	// store the scrape and for the browser's timer); how long that page
	// then took to fetch and render depends on the machine's load and is
	// logged.
	asked := waitAsked(t, ctx, 30*time.Second, from, to, "r > 0")
	shown := time.Now()
	first := firstSample(t, prom.URL, `grpc_client_attempt_duration_seconds_count{vmesh_node="frontend-1", grpc_target="xds:///echo.graph.internal:50051"}`)
	bound := 2*scrape + 500*time.Millisecond
	t.Logf("the first sample at %s; the page showing the edge's rate asked for %s after it (bound %s), shown %s after it",
		first.Format("15:04:05.000"), asked.Sub(first).Round(time.Millisecond), bound, shown.Sub(first).Round(time.Millisecond))
	if took := asked.Sub(first); took > bound {
		t.Errorf("the page that first showed the edge's rate was asked for %s after Prometheus's first sample of the calls, want within %s (two scrape intervals)", took.Round(time.Millisecond), bound)
	}
	e := readEdge(t, ctx, from, to)
	maxRate := 1.5 * float64(time.Second/every) // rate() extrapolates to the window's ends
	if e.Rate <= 0 || e.Rate > maxRate || e.Errors != 0 {
		t.Errorf("edge %s -> %s: rate %v, errors %v; want a rate in (0, %v] and no errors", from, to, e.Rate, e.Errors, maxRate)
	}
	if got := readEdge(t, ctx, to, route); !got.Found || got.Rate <= 0 {
		t.Errorf("the route edge %s -> %s has no rate: %+v", to, route, got)
	}
	if label := drawnEdge(t, ctx, from, to); !strings.Contains(label, "rps") {
		t.Errorf("the drawing's edge %s -> %s is labelled %q, want its rate", from, to, label)
	}
	screenshot(t, ctx, shots, "graph-rates")
	docsScreenshot(t, ctx, "graph-rates")

	// The server fails every second call: the edge shows errors, then,
	// once the window holds only calls after the switch, half the
	// requests (48-52%) as errors.
	echo.failHalf.Store(true)
	switched := time.Now()
	waitEdge(t, ctx, 30*time.Second, from, to, "x > 0")
	t.Logf("errors shown %s after the switch", time.Since(switched).Round(time.Millisecond))
	waitEdge(t, ctx, 30*time.Second, from, to, "r > 0 && x / r >= 0.48 && x / r <= 0.52")
	t.Logf("half the requests shown as errors %s after the switch", time.Since(switched).Round(time.Millisecond))
	e = readEdge(t, ctx, from, to)
	t.Logf("edge %s -> %s: %s, errors %s", from, to, e.RateText, e.Errs)
	if e.Errs == "" || e.RateText == "" {
		t.Errorf("the edges table does not write the rates: %+v", e)
	}
	if label := drawnEdge(t, ctx, from, to); !strings.Contains(label, "err ") {
		t.Errorf("the drawing's edge %s -> %s is labelled %q, want its error rate", from, to, label)
	}
	failing, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`!!document.querySelector('#graph g.edge.traffic.failing[data-from=%q][data-to=%q]')`, from, to)))
	if err != nil || !failing {
		t.Errorf("the drawing's edge %s -> %s is not marked failing (%v)", from, to, err)
	}
	// The longest labels (a route's weight, rate and errors) stay between
	// the boxes they join: none is drawn under a node.
	overlaps, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](labelOverlaps))
	if err != nil {
		t.Fatalf("measuring the drawing: %v", err)
	}
	if len(overlaps) > 0 {
		t.Errorf("edge labels drawn under nodes: %v", overlaps)
	}
	screenshot(t, ctx, shots, "graph-errors")
	docsScreenshot(t, ctx, "graph-errors")
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

// labelOverlaps lists, as "label / node", each edge label of the drawing
// whose rendered box overlaps a node's box.
const labelOverlaps = `(() => {
	const out = [];
	const rects = [...document.querySelectorAll('#graph g.node')].map(n => [n.dataset.id, n.querySelector('rect').getBBox()]);
	for (const t of document.querySelectorAll('#graph g.edge text')) {
		const b = t.getBBox();
		for (const [id, r] of rects) {
			if (b.x < r.x + r.width && r.x < b.x + b.width && b.y < r.y + r.height && r.y < b.y + b.height) {
				out.push(t.textContent + " / " + id);
			}
		}
	}
	return out;
})()`

// askedScript runs in the page before its own script: it records, each
// time the page swaps in a fresh #data, when the browser asked for it
// (the start of the fetch, which console.js runs one at a time), as
// window.__vmeshAsked in milliseconds since the epoch (0 until then).
const askedScript = `(() => {
	let last = 0;
	window.__vmeshAsked = 0;
	const fetch0 = window.fetch;
	window.fetch = function (...args) {
		const asked = Date.now();
		return fetch0.apply(this, args).then(r => { last = asked; return r; });
	};
	new MutationObserver(muts => {
		if (muts.some(m => [...m.addedNodes].some(n => n.id === "data"))) { window.__vmeshAsked = last; }
	}).observe(document, {childList: true, subtree: true});
})();`

// waitAsked is waitEdge that returns when the browser asked for the page
// that first met cond (askedScript). That page must be one the page
// fetched itself, not its first load.
func waitAsked(t *testing.T, ctx context.Context, d time.Duration, from, to, cond string) time.Time {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	expr := edgeExpr(from, to, fmt.Sprintf(`((r => x => (%s))(Number(e.dataset.rate))(Number(e.dataset.errors)) ? (window.__vmeshAsked || -1) : 0)`, cond), "0")
	ms, err := chromedp.Run(c, chromedp.Poll[float64](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(d)))
	if err != nil {
		t.Fatalf("waiting %s for edge %s -> %s to show %s: %v; edges:\n%s", d, from, to, cond, err, text(t, ctx, "#edges"))
	}
	if ms < 0 {
		t.Fatalf("edge %s -> %s shows %s in a page the browser did not fetch after its load", from, to, cond)
	}
	return time.UnixMilli(int64(ms))
}

// drawnEdge returns the label the drawing (the SVG) writes on the edge
// from -> to of kind traffic.
func drawnEdge(t *testing.T, ctx context.Context, from, to string) string {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	label, err := chromedp.Run(c, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector('#graph g.edge.traffic[data-from=%q][data-to=%q] text') || {textContent: ""}).textContent`, from, to)))
	if err != nil {
		t.Fatalf("reading the drawing's edge %s -> %s: %v", from, to, err)
	}
	return label
}

// firstSample returns the time of the oldest sample Prometheus holds of
// the series (the scrape that first saw them).
func firstSample(t *testing.T, url, series string) time.Time {
	t.Helper()
	client, err := promapi.NewClient(promapi.Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, _, _, err := promv1.NewAPI(client).Query(ctx, series+"[5m]", time.Now())
	if err != nil {
		t.Fatalf("querying Prometheus for %s: %v", series, err)
	}
	m, ok := v.(model.Matrix)
	if !ok || len(m) == 0 {
		t.Fatalf("Prometheus holds no samples of %s: %v", series, v)
	}
	var first model.Time
	for _, s := range m {
		if len(s.Values) > 0 && (first == 0 || s.Values[0].Timestamp < first) {
			first = s.Values[0].Timestamp
		}
	}
	return first.Time()
}

// docsScreenshot, with -update-docs, saves the page as docs/NAME.png, the
// pictures the README shows.
func docsScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if !*updateDocs {
		return
	}
	dir := filepath.Join(".", "docs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, dir, name)
}
