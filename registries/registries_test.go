package registries_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/vmesh/vmesh/registries"
	"github.com/vmesh/vmesh/registries/consul"
	"github.com/vmesh/vmesh/registries/static"
	"github.com/vmesh/vmesh/registries/zookeeper"
	"github.com/vmesh/vmesh/store"
)

func TestParseFlags(t *testing.T) {
	got, err := registries.ParseFlags([]string{"consul=127.0.0.1:8500", "zookeeper=zk1:2181, zk2:2181", "static=/etc/inv.yaml", "consul=10.0.0.1:8500"})
	if err != nil {
		t.Fatal(err)
	}
	want := []registries.Spec{
		{Name: "consul", Type: "consul", Consul: &consul.Config{Address: "127.0.0.1:8500"}},
		{Name: "zookeeper", Type: "zookeeper", ZooKeeper: &zookeeper.Config{Servers: []string{"zk1:2181", "zk2:2181"}}},
		{Name: "static", Type: "static", Static: &static.Config{File: "/etc/inv.yaml"}},
		{Name: "consul-2", Type: "consul", Consul: &consul.Config{Address: "10.0.0.1:8500"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseFlags (-want +got):\n%s", d)
	}
	for _, bad := range []string{"consul", "consul=", "etcd=127.0.0.1:2379", "=x"} {
		if _, err := registries.ParseFlag(bad); err == nil {
			t.Errorf("ParseFlag(%q) accepted", bad)
		}
	}
}

func TestYAMLSection(t *testing.T) {
	const doc = `registries:
  - name: dc1
    type: consul
    consul:
      address: https://consul.example:8501
      tokenFile: /etc/vmesh/consul-token
      tls: {caFile: /etc/vmesh/consul-ca.pem}
      hostSuffix: consul.internal
  - type: zookeeper
    namespace: dubbo
    zookeeper:
      servers: [zk1:2181, zk2:2181]
      sessionTimeout: 15s
  - type: static
    static: {file: inventory.yaml}
`
	var cfg struct {
		Registries []registries.Spec `yaml:"registries"`
	}
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := registries.Validate(cfg.Registries); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Registries[1].ZooKeeper.SessionTimeout; got != 15*time.Second {
		t.Errorf("sessionTimeout = %v", got)
	}
	if got := cfg.Registries[0].Consul.TLS.CAFile; got != "/etc/vmesh/consul-ca.pem" {
		t.Errorf("tls.caFile = %q", got)
	}
	bad := []registries.Spec{
		{Type: "consul"},
		{Type: "static", Static: &static.Config{File: "a"}},
		{Type: "static", Static: &static.Config{File: "b"}},
		{Type: "etcd"},
	}
	err := registries.Validate(bad)
	for _, want := range []string{`"consul": type consul needs its consul: settings`, `name "static" used twice`, `unknown type "etcd"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %v does not mention %q", err, want)
		}
	}
}

func TestRunnerStatusHandlerAndMetrics(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "inv.yaml")
	if err := os.WriteFile(file, []byte("services:\n  - name: web\n    port: 80\n    instances:\n      - address: 10.0.0.1\n      - address: 10.0.0.2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := registries.ParseFlags([]string{"static=" + file})
	if err != nil {
		t.Fatal(err)
	}
	st := store.NewStore()
	reg := prometheus.NewRegistry()
	r, err := registries.NewRunner(st, specs, registries.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var runErr error
	go func() { defer wg.Done(); runErr = r.Run(ctx) }()

	deadline := time.Now().Add(10 * time.Second)
	for len(st.Snapshot().List(store.KindWorkloadEntry)) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("static registry never reached the Store")
		}
		time.Sleep(10 * time.Millisecond)
	}
	we := st.Snapshot().List(store.KindWorkloadEntry)[0]
	if we.Origin.Source != "registry:static" || we.Namespace != "default" || we.Annotations["vmesh.io/registry"] != "static" {
		t.Errorf("generated object %+v", we)
	}

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/registries", nil))
	var page struct {
		Registries []struct {
			Name, Type, Target       string
			Connected                bool
			Objects, WorkloadEntries int
			LastSync                 time.Time
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
		t.Fatalf("%v: %s", err, rec.Body.String())
	}
	if len(page.Registries) != 1 {
		t.Fatalf("page %s", rec.Body.String())
	}
	p := page.Registries[0]
	if p.Name != "static" || p.Type != "static" || p.Target != file || !p.Connected || p.Objects != 3 || p.WorkloadEntries != 2 || p.LastSync.IsZero() {
		t.Errorf("status %+v", p)
	}
	if rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("content type %q", rec.Header().Get("Content-Type"))
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					found[mf.GetName()+"/"+l.GetValue()] = v
				}
			}
			if len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == "static" {
				found[mf.GetName()] = v
			}
		}
	}
	if found["vmesh_registries_objects/WorkloadEntry"] != 2 || found["vmesh_registries_connected"] != 1 || found["vmesh_registries_syncs_total"] < 1 {
		t.Errorf("metrics %v", found)
	}
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Errorf("Run: %v", runErr)
	}
}
