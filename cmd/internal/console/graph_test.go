package console_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/cmd/internal/console"
	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// graphYAML: frontend calls reviews, whose VirtualService splits 80/20
// between subsets v1 and v2 and sends a header match to v3, which no
// DestinationRule defines; reviews allows only frontend's identity, and
// ratings denies everything from namespace default.
const graphYAML = `
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
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews.graph.internal]
  location: MESH_INTERNAL
  ports: [{number: 9080, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: reviews}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: default}
spec:
  hosts: [ratings.graph.internal]
  location: MESH_INTERNAL
  ports: [{number: 9080, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: ratings}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews.graph.internal
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews.graph.internal]
  http:
  - name: canary
    match: [{headers: {x-canary: {exact: "1"}}}]
    route:
    - destination: {host: reviews.graph.internal, subset: v3}
  - route:
    - destination: {host: reviews.graph.internal, subset: v1}
      weight: 80
    - destination: {host: reviews.graph.internal, subset: v2}
      weight: 20
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: reviews-callers, namespace: default}
spec:
  selector: {matchLabels: {app: reviews}}
  action: ALLOW
  rules:
  - from: [{source: {principals: ["cluster.local/ns/default/sa/frontend"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ratings-lockdown, namespace: default}
spec:
  selector: {matchLabels: {app: ratings}}
  action: DENY
  rules:
  - from: [{source: {namespaces: ["default"]}}]
`

func graphProxies() []xds.SyncStatus {
	synced := map[string]*xds.TypeStatus{"LDS": {Sent: "r1", Acked: "r1", Resources: 1}}
	return []xds.SyncStatus{
		{ID: "frontend-1", Kind: xds.KindGRPC, Namespace: "default", Labels: "app=frontend", ServiceAccount: "frontend", Types: synced},
		{ID: "reviews-v1-1", Kind: xds.KindGRPC, Namespace: "default", Labels: "app=reviews,version=v1", ServiceAccount: "reviews", Types: synced},
		{ID: "reviews-v2-1", Kind: xds.KindGRPC, Namespace: "default", Labels: "app=reviews,version=v2", ServiceAccount: "reviews", Types: synced},
		{ID: "batch-<b>x</b>", Kind: xds.KindGRPC, Namespace: "jobs", Labels: "app=batch", ServiceAccount: "batch", Types: synced},
	}
}

func graphStore(t *testing.T, yaml string) *store.Store {
	t.Helper()
	objs, errs := filestore.Decode("graph.yaml", []byte(strings.TrimLeft(yaml, "\n")))
	if len(errs) > 0 {
		t.Fatalf("decoding: %v", errs)
	}
	for _, o := range objs {
		o.Origin.Source = "dir:test"
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "dir:test", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	return st
}

var edgeRow = regexp.MustCompile(`(?s)<tr class="edge (\w+)" data-from="([^"]*)" data-to="([^"]*)".*?</tr>`)

// edges returns each edge row of a graph page by "from -> to".
func edges(body string) map[string]string {
	out := map[string]string{}
	for _, m := range edgeRow.FindAllStringSubmatch(body, -1) {
		out[m[2]+" -> "+m[3]] = m[0]
	}
	return out
}

// TestGraphFromConfigAndSyncState: the services as nodes with their
// connected proxies, a VirtualService's routes as weighted edges to its
// subsets (one naming a subset no DestinationRule defines), the
// AuthorizationPolicies on each service and the callers they deny, and
// an SVG drawing; names are escaped.
func TestGraphFromConfigAndSyncState(t *testing.T) {
	c, err := console.New(console.Sources{Store: graphStore(t, graphYAML), Syncz: graphProxies})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	code, body := getPage(t, srv.URL+"/ui/graph")
	if code != http.StatusOK {
		t.Fatalf("status %d:\n%s", code, body)
	}
	es := edges(body)
	reviews := console.ServiceNodeID("reviews.graph.internal")
	for _, w := range []struct{ to, has string }{
		{console.SubsetNodeID("reviews.graph.internal", "v1"), "default/reviews http[1] 80%"},
		{console.SubsetNodeID("reviews.graph.internal", "v2"), "default/reviews http[1] 20%"},
		{console.SubsetNodeID("reviews.graph.internal", "v3"), "no DestinationRule defines subset v3 of reviews.graph.internal"},
	} {
		row, ok := es[reviews+" -> "+w.to]
		if !ok {
			t.Errorf("no edge %s -> %s; edges: %v", reviews, w.to, keys(es))
			continue
		}
		if !strings.Contains(row, w.has) {
			t.Errorf("edge to %s lacks %q:\n%s", w.to, w.has, row)
		}
	}
	if row := es[reviews+" -> "+console.SubsetNodeID("reviews.graph.internal", "v3")]; !strings.Contains(row, `default/reviews http[0] &#34;canary&#34; 100%`) {
		t.Errorf("the canary route is not named with its weight:\n%s", row)
	}
	if len(es) != 3 {
		t.Errorf("%d edges, want the 3 routes: %v", len(es), keys(es))
	}
	for _, want := range []string{
		// nodes with their proxies and identities
		`<a href="/ui/proxy?id=reviews-v1-1">reviews-v1-1</a>, <a href="/ui/proxy?id=reviews-v2-1">reviews-v2-1</a>`,
		"spiffe://cluster.local/ns/default/sa/frontend",
		// a proxy no ServiceEntry selects is a workload node, its id escaped
		`data-id="wl:jobs/batch"`, "batch-&lt;b&gt;x&lt;/b&gt;",
		// policies, and whom they deny
		"<b>ALLOW</b> default/reviews-callers: denies every request no ALLOW rule matches",
		"batch: denied by default/reviews-callers",
		"<b>DENY</b> default/ratings-lockdown: denies the requests its rules match",
		"frontend.graph.internal: denied by default/ratings-lockdown",
		"graph.yaml:",
		// the drawing
		`<svg id="graph"`, `class="edge route failing"`, `>80%</text>`,
		"No rates: start vmesh with <code>--prometheus URL</code>",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("graph page lacks %q", want)
		}
	}
	// frontend is allowed into reviews; batch (another namespace) is not
	// denied by ratings' namespace rule.
	for _, not := range []string{"frontend.graph.internal: denied by default/reviews-callers", "batch: denied by default/ratings-lockdown", "<b>x</b>"} {
		if strings.Contains(body, not) {
			t.Errorf("graph page shows %q", not)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
