package console_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmesh/vmesh/cmd/internal/console"
)

// fakePrometheus answers /api/v1/query as Prometheus's HTTP API does,
// with the series of the first rule whose text the query contains.
func fakePrometheus(t *testing.T, answer func(query string) []map[string]any) (*httptest.Server, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		_ = r.ParseForm()
		q := r.Form.Get("query")
		mu.Lock()
		queries = append(queries, q)
		mu.Unlock()
		var result []any
		for _, s := range answer(q) {
			v := s["value"]
			delete(s, "value")
			result = append(result, map[string]any{"metric": s, "value": []any{float64(time.Now().Unix()), v}})
		}
		if result == nil {
			result = []any{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
	}))
	t.Cleanup(srv.Close)
	return srv, &queries
}

func graphConsole(t *testing.T, promURL string) *httptest.Server {
	t.Helper()
	c, err := console.New(console.Sources{Store: graphStore(t, graphYAML), Syncz: graphProxies}, console.WithPrometheus(promURL, 5*time.Second, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return srv
}

// TestGraphRates: grpc-go's series (by grpc.target) and Envoy's (by
// cluster name, its host cut at the first dot as upstream Envoy's tag
// extractor does) become the rates of the edges from their callers (by
// the vmesh_node target label, else an unknown caller), and a subset's
// rates those of the route edge to it; the queries use the window; what
// the series name is escaped.
func TestGraphRates(t *testing.T) {
	prom, queries := fakePrometheus(t, func(q string) []map[string]any {
		switch {
		case strings.Contains(q, "grpc_client_attempt_duration_seconds_count{grpc_status!=\"OK\"}"):
			return []map[string]any{{"vmesh_node": "frontend-1", "grpc_target": "xds:///reviews.graph.internal:9080", "value": "2"}}
		case strings.Contains(q, "grpc_client_attempt_duration_seconds_count"):
			return []map[string]any{
				{"vmesh_node": "frontend-1", "grpc_target": "xds:///reviews.graph.internal:9080", "value": "4"},
				{"grpc_target": "xds:///<script>alert(1)</script>:80", "value": "1"},
			}
		case strings.Contains(q, "envoy_response_code_class"):
			return nil
		case strings.Contains(q, "upstream_rq_total"):
			return []map[string]any{
				{"vmesh_node": "batch-<b>x</b>", "envoy_cluster_name": "outbound|9080|v1|reviews", "vmesh_host_rest": "graph.internal", "value": "3"},
			}
		}
		return nil
	})
	srv := graphConsole(t, prom.URL)
	_, body := getPage(t, srv.URL+"/ui/graph")
	es := edges(body)
	reviews := console.ServiceNodeID("reviews.graph.internal")
	for _, w := range []struct{ key, has string }{
		{console.ServiceNodeID("frontend.graph.internal") + " -> " + reviews, `data-rate="4" data-errors="2"`},
		{console.ServiceNodeID("frontend.graph.internal") + " -> " + reviews, "2.00 rps (50%)"},
		{"wl:jobs/batch -> " + reviews, `data-rate="3" data-errors="0"`},
		{"wl:jobs/batch -> " + reviews, `data-denied="denied"`},
		{reviews + " -> " + console.SubsetNodeID("reviews.graph.internal", "v1"), `data-rate="3"`},
		{reviews + " -> " + console.SubsetNodeID("reviews.graph.internal", "v2"), `data-rate="0"`},
		{"unknown -> ext:&lt;script&gt;alert(1)&lt;/script&gt;", `data-rate="1"`},
	} {
		row, ok := es[w.key]
		if !ok {
			t.Errorf("no edge %s; edges: %v", w.key, keys(es))
			continue
		}
		if !strings.Contains(row, w.has) {
			t.Errorf("edge %s lacks %q:\n%s", w.key, w.has, row)
		}
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "<b>x</b>") {
		t.Error("a series' labels are in the page unescaped")
	}
	if !strings.Contains(body, "Rates from Prometheus <code>"+prom.URL+"</code>, averaged over 5s") {
		t.Error("the page does not say where the rates come from")
	}
	if !strings.Contains(body, `data-refresh-every="1250"`) {
		t.Error("the graph with rates does not refresh itself every quarter window")
	}
	all := strings.Join(*queries, "\n")
	for _, want := range []string{"[5s]", "envoy_cluster_graph_internal_upstream_rq_total", `"vmesh_host_rest", "graph.internal"`, "sum by (vmesh_node, grpc_target)"} {
		if !strings.Contains(all, want) {
			t.Errorf("the queries lack %q:\n%s", want, all)
		}
	}
}

// TestGraphPrometheusDown: an unreachable Prometheus, or one answering
// an error, is a message on the page; the graph from the config stays.
func TestGraphPrometheusDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"parse error <img src=x onerror=alert(1)>"}`))
	}))
	defer failing.Close()
	for _, tc := range []struct{ url, want string }{
		{down, "connection refused"},
		{failing.URL, "parse error &lt;img src=x onerror=alert(1)&gt;"},
	} {
		srv := graphConsole(t, tc.url)
		code, body := getPage(t, srv.URL+"/ui/graph")
		if code != http.StatusOK {
			t.Errorf("%s: status %d", tc.url, code)
		}
		if !strings.Contains(body, `<p id="traffic" class="traffic bad"><b>No rates:</b> querying Prometheus:`) || !strings.Contains(body, tc.want) {
			t.Errorf("%s: the page does not say why there are no rates (%q)", tc.url, tc.want)
		}
		if strings.Contains(body, "<img") {
			t.Errorf("%s: Prometheus's answer is in the page unescaped", tc.url)
		}
		if len(edges(body)) != 3 {
			t.Errorf("%s: the route edges are gone: %v", tc.url, keys(edges(body)))
		}
	}
	if _, err := console.New(console.Sources{Store: graphStore(t, graphYAML)}, console.WithPrometheus("ftp://x", 0, 0)); err == nil {
		t.Error("console.New took a Prometheus URL that is not http(s)")
	}
}
