package console_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/cmd/internal/console"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// fakeProxies returns n proxies p000..: every seventh NACKs EDS, every
// fifth is in namespace "shop", the rest in "default".
func fakeProxies(n int) []xds.SyncStatus {
	var out []xds.SyncStatus
	for i := range n {
		ns := "default"
		if i%5 == 0 {
			ns = "shop"
		}
		eds := &xds.TypeStatus{Sent: "r3", Acked: "r3", Resources: 1}
		if i%7 == 0 {
			eds = &xds.TypeStatus{Sent: "r3", Acked: "", Nack: "duplicate endpoint 10.0.0.1:80", NackVersion: "r3"}
		}
		out = append(out, xds.SyncStatus{
			ID: fmt.Sprintf("p%03d", i), Kind: xds.KindGRPC, Namespace: ns, Protocol: "sotw", Connected: time.Now(),
			Types: map[string]*xds.TypeStatus{"LDS": {Sent: "r3", Acked: "r3", Resources: 1}, "EDS": eds},
		})
	}
	return out
}

// newConsole serves a running console of src (a *store.Store alone, or
// console.Sources).
func newConsole(t *testing.T, of any) *httptest.Server {
	t.Helper()
	var src console.Sources
	switch v := of.(type) {
	case *store.Store:
		src.Store = v
	case console.Sources:
		src = v
	}
	if src.Store == nil {
		src.Store = store.NewStore()
	}
	c, err := console.New(src, console.WithPageSize(50))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, c)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		srv.Close()
	})
	// Run has started once the history holds the state it found.
	eventually(t, 5*time.Second, "the console running", func() bool {
		_, body := getPage(t, srv.URL+"/ui/changes")
		return strings.Contains(body, "(at start:")
	})
	return srv
}

func getPage(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

var rowID = regexp.MustCompile(`<tr class="proxy" data-id="([^"]*)"`)

func rowIDs(body string) []string {
	var out []string
	for _, m := range rowID.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestProxiesPaginationAndSearch(t *testing.T) {
	all := fakeProxies(120)
	srv := newConsole(t, console.Sources{Syncz: func() []xds.SyncStatus { return all }})
	for _, tc := range []struct {
		query      string
		first      string
		rows       int
		total      string
		prev, next bool
	}{
		{query: "", first: "p000", rows: 50, total: "120", next: true},
		{query: "?page=2", first: "p050", rows: 50, total: "120", prev: true, next: true},
		{query: "?page=3", first: "p100", rows: 20, total: "120", prev: true},
		{query: "?page=99", first: "p100", rows: 20, total: "120", prev: true}, // clamped to the last page
		{query: "?page=-4", first: "p000", rows: 50, total: "120", next: true},
		{query: "?q=shop", first: "p000", rows: 24, total: "24"},
		{query: "?q=NACK", first: "p000", rows: 18, total: "18"},               // 0, 7, ..., 119
		{query: "?q=shop+nack", first: "p000", rows: 4, total: "4"},            // 0, 35, 70, 105
		{query: "?q=duplicate+endpoint", first: "p000", rows: 18, total: "18"}, // the NACK message
		{query: "?q=P11", first: "p110", rows: 10, total: "10"},                // case-insensitive
		{query: "?q=nothing-matches", rows: 0},
	} {
		code, body := getPage(t, srv.URL+"/ui/proxies"+tc.query)
		if code != http.StatusOK {
			t.Fatalf("%s: status %d", tc.query, code)
		}
		ids := rowIDs(body)
		if len(ids) != tc.rows {
			t.Errorf("%s: %d rows, want %d", tc.query, len(ids), tc.rows)
		}
		if tc.rows > 0 && ids[0] != tc.first {
			t.Errorf("%s: first row %s, want %s", tc.query, ids[0], tc.first)
		}
		if tc.total != "" && !strings.Contains(body, `<b class="total">`+tc.total+`</b>`) {
			t.Errorf("%s: no total %s in the page", tc.query, tc.total)
		}
		if got := strings.Contains(body, `class="prev"`); got != tc.prev {
			t.Errorf("%s: previous link %v, want %v", tc.query, got, tc.prev)
		}
		if got := strings.Contains(body, `class="next"`); got != tc.next {
			t.Errorf("%s: next link %v, want %v", tc.query, got, tc.next)
		}
	}
	// The next link keeps the search.
	_, body := getPage(t, srv.URL+"/ui/proxies?q=default")
	if !strings.Contains(body, `href="/ui/proxies?page=2&amp;q=default"`) {
		t.Errorf("next link of a search does not keep ?q=: %s", regexp.MustCompile(`<a class="next"[^>]*>`).FindString(body))
	}
	if !strings.Contains(body, `value="default"`) {
		t.Error("the search box does not show the search")
	}
}

func TestProxyStatesAndEscaping(t *testing.T) {
	evil := xds.SyncStatus{ID: `<script>alert(1)</script>`, Kind: xds.KindSidecar, Namespace: "default", Protocol: "delta",
		Types: map[string]*xds.TypeStatus{
			"CDS": {Sent: "r4@abc", Acked: "r3@abc"},
			"EDS": {Sent: "r4@abc", Nack: `<img src=x onerror=alert(1)>`, NackVersion: "r4@abc"},
			"LDS": {Sent: "r4@abc", Acked: "r4@abc"},
		}}
	srv := newConsole(t, console.Sources{Syncz: func() []xds.SyncStatus { return []xds.SyncStatus{evil} }})
	_, body := getPage(t, srv.URL+"/ui/proxies")
	for _, bad := range []string{"<script>alert", "<img src=x"} {
		if strings.Contains(body, bad) {
			t.Errorf("page carries unescaped %q", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;", "<b>SYNCED</b> <code>r4@abc</code>", "<b>STALE</b> <code>r4@abc</code>", "<b>NACK</b> <code>r4@abc</code>", "&lt;img src=x"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	code, _ := getPage(t, srv.URL+"/ui/proxy?id=nobody")
	if code != http.StatusNotFound {
		t.Errorf("unknown proxy: status %d, want 404", code)
	}
}

func TestServicesSearch(t *testing.T) {
	st := store.NewStore()
	src := store.Source{Name: "dir:test", Class: store.ClassConfig}
	var objs []*store.Object
	for i := range 30 {
		ns := "default"
		if i%3 == 0 {
			ns = "shop"
		}
		host := fmt.Sprintf("svc%02d.internal", i)
		objs = append(objs, &store.Object{
			Key:    store.Key{Kind: store.KindServiceEntry, Namespace: ns, Name: fmt.Sprintf("svc%02d", i)},
			Spec:   &networking.ServiceEntry{Hosts: []string{host}, Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}, Resolution: networking.ServiceEntry_STATIC, Endpoints: []*networking.WorkloadEntry{{Address: "10.0.0.1"}}},
			Origin: store.Origin{Source: src.Name, File: "services.yaml", Line: 1 + 10*i},
		})
	}
	if err := st.Replace(src, objs); err != nil {
		t.Fatal(err)
	}
	c, err := console.New(console.Sources{Store: st}, console.WithPageSize(10))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	for _, tc := range []struct {
		query string
		want  []string
		total string
	}{
		{"", []string{"svc00.internal", "svc09.internal"}, "30"},
		{"?page=3", []string{"svc20.internal", "svc29.internal"}, "30"},
		{"?q=shop", []string{"svc00.internal", "svc27.internal"}, "10"},
		{"?q=svc1", []string{"svc10.internal", "svc19.internal"}, "10"},
	} {
		_, body := getPage(t, srv.URL+"/ui/services"+tc.query)
		for _, w := range tc.want {
			if !strings.Contains(body, "<h2>"+w+"</h2>") {
				t.Errorf("%s: no %s", tc.query, w)
			}
		}
		if !strings.Contains(body, `<b class="total">`+tc.total+`</b>`) {
			t.Errorf("%s: no total %s", tc.query, tc.total)
		}
	}
	_, body := getPage(t, srv.URL+"/ui/services?q=svc01.internal")
	if !strings.Contains(body, "<code>services.yaml:11</code>") {
		t.Error("services page lacks the ServiceEntry's file:line")
	}
}

// The event stream ticks at once with the change counter, and again when
// a source's status changes (which notifies no Store subscriber).
func TestEventsTickOnStatusChange(t *testing.T) {
	st := store.NewStore()
	srv := newConsole(t, console.Sources{Store: st})
	resp, err := http.Get(srv.URL + "/ui/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				lines <- d
			}
		}
		close(lines)
	}()
	next := func() string {
		select {
		case d, ok := <-lines:
			if !ok {
				t.Fatal("event stream ended")
			}
			return d
		case <-time.After(5 * time.Second):
			t.Fatal("no tick within 5s")
		}
		return ""
	}
	first := next()
	st.SetStatus(store.Source{Name: "dir:x", Class: store.ClassConfig}, "", []store.ConfigError{{File: "a.yaml", Line: 3, Message: "bad"}})
	if second := next(); second == first {
		t.Errorf("second tick carries the same counter %s", first)
	}
	_, body := getPage(t, srv.URL+"/ui/")
	if !strings.Contains(body, `<code class="loc">a.yaml:3</code>`) {
		t.Error("overview lacks the error's file:line")
	}
}

func TestReadOnly(t *testing.T) {
	srv := newConsole(t, console.Sources{})
	resp, err := http.Post(srv.URL+"/ui/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
	for path, want := range map[string]int{"/ui/static/console.js": 200, "/ui/static/console.css": 200, "/ui/nope": 404, "/ui/changes": 200} {
		if code, _ := getPage(t, srv.URL+path); code != want {
			t.Errorf("%s: %d, want %d", path, code, want)
		}
	}
}

// An endpoint its agent reports unhealthy shows the probe's reason beside
// UNHEALTHY (issue 45).
func TestServicesShowProbeReason(t *testing.T) {
	st := store.NewStore()
	src := store.Source{Name: "dir:test", Class: store.ClassConfig}
	se := &store.Object{
		Key: store.Key{Kind: store.KindServiceEntry, Namespace: "demo", Name: "greeter"},
		Spec: &networking.ServiceEntry{Hosts: []string{"greeter.internal"}, Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
			Resolution: networking.ServiceEntry_STATIC, WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "greeter"}}},
		Origin: store.Origin{Source: src.Name, File: "services.yaml", Line: 1},
	}
	we := &store.Object{
		Key:         store.Key{Kind: store.KindWorkloadEntry, Namespace: "demo", Name: "vm-1"},
		Annotations: map[string]string{meshlabels.HealthChecksAnnotation: "true"},
		Spec:        &networking.WorkloadEntry{Address: "10.0.0.1", Labels: map[string]string{"app": "greeter"}},
		Origin:      store.Origin{Source: src.Name, File: "workloads.yaml", Line: 1},
	}
	if err := st.Replace(src, []*store.Object{se, we}); err != nil {
		t.Fatal(err)
	}
	unhealthy := false
	st.SetHealthReason(we.Key, &unhealthy, "HTTP GET http://10.0.0.1:8080/healthz: 503 Service Unavailable")
	c, err := console.New(console.Sources{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	_, body := getPage(t, srv.URL+"/ui/services")
	if !strings.Contains(body, `UNHEALTHY: <span class="reason">HTTP GET http://10.0.0.1:8080/healthz: 503 Service Unavailable</span>`) {
		t.Errorf("services page lacks the probe's reason:\n%s", body)
	}
}

// A held commit shows on the overview by SHA, with the reason and who
// rejected it; no rollout configured shows nothing.
func TestOverviewShowsHeldRollout(t *testing.T) {
	held := &xds.RolloutStatus{Phase: xds.PhaseHeld, Good: "aaaaaaaaaaaa", Candidate: "bbbbbbbbbbbb",
		Reason: "NACK from client-0 (EDS): duplicate endpoint", Rejected: []string{"client-0", "client-1"}, Bake: "5m0s"}
	srv := newConsole(t, console.Sources{Rollout: func() *xds.RolloutStatus { return held }})
	_, body := getPage(t, srv.URL+"/ui/")
	for _, want := range []string{`id="rollout" class="bad"`, "commit bbbbbbbbbbbb HELD", "NACK from client-0 (EDS): duplicate endpoint", "every proxy serves aaaaaaaaaaaa", "rejected by client-0, client-1"} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	_, body = getPage(t, newConsole(t, console.Sources{}).URL+"/ui/")
	if strings.Contains(body, `id="rollout"`) {
		t.Error("overview shows a rollout none is configured")
	}
}

// A VM's agent and its application share a node id: the proxies page
// shows one row per stream, the agent's own marked as the VM agent and the
// application's as its app.
func TestProxiesShowAgentAndApp(t *testing.T) {
	streams := []xds.SyncStatus{
		{ID: "vm-1.shop", Kind: xds.KindGRPC, Namespace: "shop", Protocol: "sotw", Connected: time.Now(),
			Types: map[string]*xds.TypeStatus{"NDS": {Sent: "r3", Acked: "r3"}, "WorkloadGroup": {Sent: "r3", Acked: "r3"}}},
		{ID: "vm-1.shop", Kind: xds.KindGRPC, Namespace: "shop", Protocol: "sotw", Connected: time.Now(),
			Types: map[string]*xds.TypeStatus{"LDS": {Sent: "r3", Acked: "r3"}}},
		{ID: "lone.shop", Kind: xds.KindGRPC, Namespace: "shop", Protocol: "sotw", Connected: time.Now(),
			Types: map[string]*xds.TypeStatus{"LDS": {Sent: "r3", Acked: "r3"}}},
	}
	srv := newConsole(t, console.Sources{Syncz: func() []xds.SyncStatus { return streams }})
	_, body := getPage(t, srv.URL+"/ui/proxies")
	for _, want := range []string{
		`data-id="vm-1.shop" data-state="SYNCED" data-role="agent"`, `<td class="kind">VM agent</td>`,
		`data-id="vm-1.shop" data-state="SYNCED" data-role="app"`, `<td class="kind">grpc app of the VM agent</td>`,
		`data-id="lone.shop" data-state="SYNCED" data-role="app"`, `<td class="kind">grpc</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("proxies page lacks %s", want)
		}
	}
}

// TestOverviewShowsSourceConnection: a config source with a server
// connection (MeshConfig configSources) shows its state beside its name,
// with its version, and what it holds while disconnected.
func TestOverviewShowsSourceConnection(t *testing.T) {
	st := store.NewStore()
	src := store.Source{Name: "mcp:xds://istiod:15010", Class: store.ClassConfig}
	st.SetConnection(src, "disconnected: connection refused")
	st.SetStatusHeld(src, "v42", []store.ConfigError{{Message: "xds://istiod:15010: disconnected: connection refused"}}, "xds://istiod:15010 not connected: keeping its 3 objects (version v42)")
	_, body := getPage(t, newConsole(t, st).URL+"/ui/")
	for _, want := range []string{`mcp:xds://istiod:15010 <span class="bad">(disconnected: connection refused)</span>`, "v42", "keeping its 3 objects (version v42)"} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	st.SetConnection(src, "connected")
	_, body = getPage(t, newConsole(t, st).URL+"/ui/")
	if !strings.Contains(body, `mcp:xds://istiod:15010 <span class="ok">(connected)</span>`) {
		t.Error("overview lacks the connected state")
	}
}

// TestProxiesShowMCPClient: an MCP client (kind mcp, /debug/syncz) is a
// row of the proxies page with the identity it was let in as, the kinds it
// reads and its NACK; its page shows the identity and the state per kind
// without asking for a config dump (an MCP client has none).
func TestProxiesShowMCPClient(t *testing.T) {
	streams := []xds.SyncStatus{{ID: "istiod-1.istio-system", Kind: xds.KindMCP, Namespace: "istio-system", Group: "mcp",
		Identity: "spiffe://cluster.local/ns/istio-system/sa/istiod", Protocol: "sotw", Connected: time.Now(),
		Types: map[string]*xds.TypeStatus{
			"VirtualService":           {Sent: "r3@abc", Acked: "r3@abc", Resources: 1},
			"DestinationRule":          {Sent: "r3@abc", Nack: "bad <rule>", NackVersion: "r3@abc"},
			"core/v1alpha1/MeshConfig": {Sent: "r3@abc", Acked: "r3@abc"},
		}}}
	srv := newConsole(t, console.Sources{Syncz: func() []xds.SyncStatus { return streams }})
	_, body := getPage(t, srv.URL+"/ui/proxies")
	for _, want := range []string{
		`data-id="istiod-1.istio-system" data-state="NACK" data-role="mcp"`, `<td class="kind">mcp (MCP client: reads config)</td>`,
		`<td class="identity">spiffe://cluster.local/ns/istio-system/sa/istiod</td>`,
		`reads 2 kinds: <span class="kinds">DestinationRule, VirtualService</span>; 1 other types answered empty`,
		`DestinationRule r3@abc: bad &lt;rule&gt;`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("proxies page lacks %s", want)
		}
	}
	if _, body := getPage(t, srv.URL+"/ui/proxies?q=sa/istiod"); len(rowIDs(body)) != 1 {
		t.Errorf("searching the identity finds %v", rowIDs(body))
	}
	code, body := getPage(t, srv.URL+"/ui/proxy?id=istiod-1.istio-system")
	for _, want := range []string{"<code>spiffe://cluster.local/ns/istio-system/sa/istiod</code> (who it was let in as", "<td>VirtualService</td>",
		"<td>core/v1alpha1/MeshConfig</td>", `id="mcp-reads"`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("MCP client's page (%d) lacks %s", code, want)
		}
	}
	if strings.Contains(body, "config dump") {
		t.Error("MCP client's page shows a config-dump error")
	}
}

// TestOverviewShowsRouteStatus: the Gateway API routes' status, which an
// API server would hold, is a table of the overview: one row per route and
// parentRef, Accepted and ResolvedRefs with their reasons, a route whose
// backend nothing defines marked bad.
func TestOverviewShowsRouteStatus(t *testing.T) {
	const doc = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: web, namespace: shop}
spec:
  hosts: [web.shop.svc.cluster.local]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.5}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: web, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: broken, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: gone, port: 8080}]}]
`
	objs, errs := filestore.Decode("routes.yaml", []byte(doc))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "files", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	_, body := getPage(t, newConsole(t, st).URL+"/ui/")
	for _, want := range []string{
		`<table id="routes">`,
		`<tr class="ok"><td>HTTPRoute/shop/web</td><td><code class="loc">routes.yaml:17</code></td><td>Gateway/shop/edge</td><td>True (Accepted)</td><td>True (ResolvedRefs)</td></tr>`,
		`<tr class="bad"><td>HTTPRoute/shop/broken</td><td><code class="loc">routes.yaml:24</code></td><td>Gateway/shop/edge</td><td>True (Accepted)</td><td>False (BackendNotFound: no ServiceEntry defines gone.shop.svc.cluster.local)</td></tr>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
	// Without routes there is no table.
	_, body = getPage(t, newConsole(t, store.NewStore()).URL+"/ui/")
	if strings.Contains(body, `id="routes"`) {
		t.Error("overview shows a routes table without routes")
	}
}
