package main

import (
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/vmesh/vmesh/writers/credentials"
	"github.com/vmesh/vmesh/xds"
)

// TestStatusMissingCredentials: a proxy whose agent lacks a credential
// its config names (the replica's /debug/credentials) gets it on its row
// (JSON) and in the table's MISSING CREDENTIAL lines, with the object,
// field, file and line; other proxies get none.
func TestStatusMissingCredentials(t *testing.T) {
	gw := "router~10.0.0.9~gw-1.edge~edge.svc.cluster.local"
	rows := proxyRows("replica", []xds.SyncStatus{
		{ID: gw, Kind: xds.KindRouter, Namespace: "edge", Types: map[string]*xds.TypeStatus{"LDS": {Sent: "r2", Acked: "r2"}}},
		{ID: "sidecar~10.0.0.1~vm-1.demo~demo.svc.cluster.local", Kind: xds.KindSidecar, Namespace: "demo", Types: map[string]*xds.TypeStatus{"LDS": {Sent: "r2", Acked: "r2"}}},
	})
	missingCredentials(rows, []credentials.Proxy{{ID: gw, Missing: []credentials.Missing{{Secret: "gw-cred", Credential: "gw-cred",
		Object: "Gateway/edge/ingress", Field: "servers[0].tls.credentialName", File: "mesh/gw.yaml", Line: 4}}}})
	if len(rows[0].MissingCredentials) != 1 || len(rows[1].MissingCredentials) != 0 {
		t.Fatalf("rows %+v", rows)
	}
	var out strings.Builder
	tw := tabwriter.NewWriter(&out, 0, 4, 2, ' ', 0)
	if err := statusTable(tw, statusReport{Proxies: rows}); err != nil {
		t.Fatal(err)
	}
	tw.Flush()
	want := gw + "  gw-cred (mesh/gw.yaml:4: Gateway/edge/ingress servers[0].tls.credentialName)"
	if !strings.Contains(out.String(), "MISSING CREDENTIAL") || !strings.Contains(out.String(), want) {
		t.Errorf("status table:\n%s\nwant a line %q", out.String(), want)
	}
}
