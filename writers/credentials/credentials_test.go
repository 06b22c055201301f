package credentials_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/credentials"
)

const gatewayYAML = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: edge}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [a.example.com]
    tls: {mode: MUTUAL, credentialName: gw-cred}
`

// TestWarningsFollowReports: two routers whose agents lack gw-cred's roots
// give one warning on the Gateway's field naming both; a report holding
// it clears that router; a closed stream is forgotten, so the warning
// goes once no reporting proxy lacks the credential.
func TestWarningsFollowReports(t *testing.T) {
	objs, errs := filestore.Decode("gw.yaml", []byte(gatewayYAML))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "files", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	gw := store.Key{Kind: store.KindGateway, Namespace: "edge", Name: "ingress"}
	needs := func(_ *model.Snapshot, w model.Workload) []model.CredentialUse {
		return []model.CredentialUse{
			{Secret: "gw-cred", Credential: "gw-cred", Object: gw, Field: "servers[0].tls.credentialName"},
			{Secret: "gw-cred-cacert", Credential: "gw-cred", Object: gw, Field: "servers[0].tls.credentialName"},
		}
	}
	c := credentials.New(st, needs, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	c.Snapshot(model.Build(st.Snapshot()))

	router := func(id string) model.Workload {
		return model.Workload{ID: id, Kind: model.KindRouter, Namespace: "edge", Labels: map[string]string{"istio": "ingressgateway", "vm": id}}
	}
	warnings := func() []store.ConfigError {
		for _, s := range st.Snapshot().Sources {
			if s.Source == credentials.Source.Name {
				return s.Warnings
			}
		}
		return nil
	}
	waitFor := func(what string, cond func([]store.ConfigError) bool) []store.ConfigError {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			w := warnings()
			if cond(w) {
				return w
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %v", what, w)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	c.Report(1, router("router~a"), []string{"gw-cred"})
	c.Report(2, router("router~b"), []string{"gw-cred"})
	ws := waitFor("one warning naming both routers", func(ws []store.ConfigError) bool {
		return len(ws) == 1 && strings.Contains(ws[0].Message, "router~a") && strings.Contains(ws[0].Message, "router~b")
	})
	w := ws[0]
	if w.Code != store.CodeCredentialNotHeld || w.Object != gw.String() || w.Field != "servers[0].tls.credentialName" || w.File != "gw.yaml" || w.Line != 1 ||
		!strings.Contains(w.Message, "gw-cred-cacert") || !strings.Contains(w.Message, "ca.crt") {
		t.Errorf("warning %s", w.Error())
	}
	c.Report(2, router("router~b"), []string{"gw-cred", "gw-cred-cacert"})
	waitFor("router~b no longer named", func(ws []store.ConfigError) bool {
		return len(ws) == 1 && !strings.Contains(ws[0].Message, "router~b")
	})
	var ids []string
	for _, p := range c.Proxies() {
		ids = append(ids, p.ID)
	}
	if !slices.Equal(ids, []string{"router~a"}) {
		t.Errorf("proxies missing credentials: %v", ids)
	}
	c.Closed(1)
	waitFor("no warning once router~a's stream closed", func(ws []store.ConfigError) bool { return len(ws) == 0 })
}

// TestCertificateFilesWarnOnceRefused: a router's certificate files
// (file-cert:/file-root:) are not missing while its agent has not been
// asked for them (no warning on a fresh config), nor once it serves them;
// when the agent reports them refused, the Gateway's field is warned about
// with the agent's reason, and the proxy lists them with it.
func TestCertificateFilesWarnOnceRefused(t *testing.T) {
	objs, errs := filestore.Decode("gw.yaml", []byte(gatewayYAML))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "files", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	gw := store.Key{Kind: store.KindGateway, Namespace: "edge", Name: "ingress"}
	const pair = "file-cert:/etc/certs/tls.crt~/etc/certs/tls.key"
	needs := func(*model.Snapshot, model.Workload) []model.CredentialUse {
		return []model.CredentialUse{{Secret: pair, Object: gw, Field: "servers[0].tls.serverCertificate"}}
	}
	c := credentials.New(st, needs, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	c.Snapshot(model.Build(st.Snapshot()))
	router := model.Workload{ID: "router~a", Kind: model.KindRouter, Namespace: "edge", Labels: map[string]string{"istio": "ingressgateway"}}
	checked := func(report []string, wantWarning bool) []store.ConfigError {
		t.Helper()
		c.Report(1, router, report)
		deadline := time.Now().Add(10 * time.Second)
		for {
			var ws []store.ConfigError
			for _, s := range st.Snapshot().Sources {
				if s.Source == credentials.Source.Name {
					ws = s.Warnings
				}
			}
			if (len(ws) > 0) == wantWarning && (len(c.Proxies()) > 0) == wantWarning {
				return ws
			}
			if time.Now().After(deadline) {
				t.Fatalf("report %q: warnings %v, proxies %v; want a warning: %v", report, ws, c.Proxies(), wantWarning)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	const why = "/etc/certs/tls.crt (/etc/certs/tls.crt) is outside the directories the agent may read certificate files from"
	ws := checked([]string{"refused:" + pair + "\t" + why}, true)
	if len(ws) != 1 || ws[0].Code != store.CodeCredentialNotHeld || ws[0].Field != "servers[0].tls.serverCertificate" ||
		!strings.Contains(ws[0].Message, pair) || !strings.Contains(ws[0].Message, why) || !strings.Contains(ws[0].Message, "router~a") {
		t.Errorf("warnings %v", ws)
	}
	if ps := c.Proxies(); len(ps) != 1 || len(ps[0].Missing) != 1 || ps[0].Missing[0].Reason != why || !strings.Contains(ps[0].Missing[0].String(), why) {
		t.Errorf("proxies %+v", ps)
	}
	checked([]string{pair}, false)
	checked([]string{"refused:" + pair + "\t" + why}, true)
	checked(nil, false) // not asked (a restarted agent): not missing
}
