package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/vmesh/vmesh/xds"
)

// A VM's agent and its application share a node id: status shows one row
// for them, the application's kind and types with the agent's own stream
// (NDS, WorkloadGroups) in the AGENT column; two applications under one id
// are counted; a lone agent is shown as such (issue 45).
func TestStatusOneRowPerProxy(t *testing.T) {
	vm := "sidecar~10.0.0.1~vm-1.demo~demo.svc.cluster.local"
	synced := func(v string) *xds.TypeStatus { return &xds.TypeStatus{Sent: v, Acked: v} }
	st := []xds.SyncStatus{
		{ID: vm, Kind: xds.KindGRPC, Namespace: "demo", Group: "g", Types: map[string]*xds.TypeStatus{"LDS": synced("r3"), "RDS": synced("r3")}},
		{ID: vm, Kind: xds.KindGRPC, Namespace: "demo", Group: "g", Types: map[string]*xds.TypeStatus{"NDS": synced("r3"), "WorkloadGroup": synced("r2")}},
		{ID: "shared", Kind: xds.KindGRPC, Namespace: "demo", Types: map[string]*xds.TypeStatus{"LDS": synced("r3")}},
		{ID: "shared", Kind: xds.KindGRPC, Namespace: "demo", Types: map[string]*xds.TypeStatus{"LDS": {Sent: "r3", Acked: "r2", Nack: "bad listener", NackVersion: "r3"}}},
		{ID: "lonely-agent", Kind: xds.KindSidecar, Namespace: "demo", Types: map[string]*xds.TypeStatus{"NDS": synced("r3")}},
	}
	rows := proxyRows("replica", st)
	if len(rows) != 3 {
		t.Fatalf("rows: %+v, want one per node id", rows)
	}
	byID := map[string]proxyStatus{}
	for _, r := range rows {
		byID[r.Proxy] = r
	}
	if r := byID[vm]; r.Kind != "grpc" || r.Apps != 1 || r.Types["LDS"] != "SYNCED r3" || r.Agent != "SYNCED r3 NDS, SYNCED r2 WORKLOADGROUP" {
		t.Errorf("the VM's row: %+v", r)
	}
	if r := byID["shared"]; r.Apps != 2 || r.Types["LDS"] != "NACK: bad listener" || r.Agent != "" {
		t.Errorf("two applications under one id: %+v, want both counted and the NACK shown", r)
	}
	if r := byID["lonely-agent"]; r.Kind != "agent" || r.Apps != 0 || len(r.Types) != 0 || r.Agent != "SYNCED r3 NDS" {
		t.Errorf("an agent alone: %+v", r)
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', 0)
	if err := statusTable(tw, statusReport{Proxies: rows}); err != nil {
		t.Fatal(err)
	}
	tw.Flush()
	if !strings.Contains(sb.String(), "AGENT") || !strings.Contains(sb.String(), "grpc ×2") || strings.Count(sb.String(), vm) != 1 {
		t.Errorf("status table:\n%s", sb.String())
	}
}

// proxy-config takes a node id, or an IP or id prefix naming one node;
// several nodes sharing the IP is an error naming them, not a merge.
func TestProxyConfigUnambiguous(t *testing.T) {
	a := "sidecar~10.0.0.2~app-a.demo~demo.svc.cluster.local"
	b := "sidecar~10.0.0.2~app-b.demo~demo.svc.cluster.local"
	c := "sidecar~10.0.0.3~app-c.demo~demo.svc.cluster.local"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/debug/syncz":
			_ = json.NewEncoder(w).Encode([]xds.SyncStatus{
				{ID: a, Kind: xds.KindGRPC, Types: map[string]*xds.TypeStatus{"LDS": {}}},
				{ID: b, Kind: xds.KindGRPC, Types: map[string]*xds.TypeStatus{"LDS": {}}},
				{ID: c, Kind: xds.KindGRPC, Types: map[string]*xds.TypeStatus{"LDS": {}}},
				{ID: c, Kind: xds.KindGRPC, Types: map[string]*xds.TypeStatus{"NDS": {}}},
			})
		case "/debug/config_dump":
			if r.URL.Query().Get("proxy") != c {
				http.Error(w, "no such proxy", http.StatusNotFound)
				return
			}
			_ = json.NewEncoder(w).Encode(xds.ConfigDump{Proxy: &xds.Proxy{ID: c}})
		}
	}))
	defer srv.Close()
	_, _, err := execVMesh("proxy-config", "listeners", "10.0.0.2", "--server", srv.URL)
	if err == nil || !strings.Contains(err.Error(), "ambiguous: 2 connected proxies match it ("+a+", "+b+")") {
		t.Errorf("two proxies on 10.0.0.2: %v", err)
	}
	if _, stderr, err := execVMesh("proxy-config", "listeners", "10.0.0.3", "--server", srv.URL); err != nil || strings.Contains(stderr, "share the node id") {
		t.Errorf("the one proxy on 10.0.0.3 (its agent's stream is not an application): %v %s", err, stderr)
	}
	if _, _, err := execVMesh("proxy-config", "listeners", "10.9.9.9", "--server", srv.URL); err == nil || !strings.Contains(err.Error(), "no connected proxy") {
		t.Errorf("no proxy: %v", err)
	}
}

// An MCP client (an istiod reading vmesh's config, issue 50) is a row like
// a proxy's: kind mcp, the identity it was let in as, and its config
// kinds summed up (worst state first) where a proxy has LDS to EDS.
func TestStatusShowsMCPClient(t *testing.T) {
	id := "sidecar~10.0.0.9~istiod-1.istio-system~istio-system.svc.cluster.local"
	st := []xds.SyncStatus{{ID: id, Kind: xds.KindMCP, Namespace: "istio-system", Group: "mcp", Identity: "spiffe://cluster.local/ns/istio-system/sa/istiod",
		Types: map[string]*xds.TypeStatus{
			"VirtualService":  {Sent: "r2@abc", Acked: "r2@abc"},
			"DestinationRule": {Sent: "r2@abc", Acked: "r1@abc", Nack: "bad rule", NackVersion: "r2@abc"},
		}}}
	rows := proxyRows("replica", st)
	if len(rows) != 1 || rows[0].Kind != "mcp" || rows[0].Group != "mcp spiffe://cluster.local/ns/istio-system/sa/istiod" || rows[0].Types["VIRTUALSERVICE"] != "SYNCED r2@abc" {
		t.Fatalf("rows: %+v", rows)
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', 0)
	if err := statusTable(tw, statusReport{Proxies: rows}); err != nil {
		t.Fatal(err)
	}
	tw.Flush()
	if !strings.Contains(sb.String(), "2 types: NACK: bad rule") || !strings.Contains(sb.String(), " mcp ") {
		t.Errorf("status table:\n%s", sb.String())
	}
}
