package static_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/registries/adapter"
	"github.com/vmesh/vmesh/registries/static"
	"github.com/vmesh/vmesh/store"
)

var meta = adapter.Meta{Type: "static", Name: "inventory", Namespace: "default"}

const inventory = `services:
  - name: billing
    host: billing.internal
    protocol: http
    port: 8080
    labels: {team: money}
    instances:
      - address: 10.0.0.1
        labels: {version: v1}
        locality: eu/zone-a
        weight: 10
      - address: 10.0.0.2
        port: 8081
        healthy: false
  - name: ledger
    port: 5432
    protocol: tcp
    instances:
      - address: db-1.example.internal
`

func TestParse(t *testing.T) {
	objs, errs, err := static.Parse(meta, "inv.yaml", []byte(inventory))
	if err != nil || len(errs) != 0 {
		t.Fatalf("Parse: %v %v", err, errs)
	}
	byName := map[string]*store.Object{}
	for _, o := range objs {
		byName[string(o.Kind)+"/"+o.Name] = o
	}
	se := byName["ServiceEntry/billing"]
	if se == nil {
		t.Fatalf("no billing ServiceEntry in %v", byName)
	}
	spec := se.Spec.(*networking.ServiceEntry)
	if spec.Hosts[0] != "billing.internal" || spec.Ports[0].Number != 8080 || spec.Ports[0].Protocol != "HTTP" ||
		se.Origin.Registry != "inv.yaml:2" || se.Labels["team"] != "money" {
		t.Errorf("billing: %v origin %v labels %v", spec, se.Origin, se.Labels)
	}
	we1 := byName["WorkloadEntry/billing-10.0.0.1-8080"]
	we2 := byName["WorkloadEntry/billing-10.0.0.2-8081"]
	if we1 == nil || we2 == nil {
		t.Fatalf("instances missing: %v", byName)
	}
	s1 := we1.Spec.(*networking.WorkloadEntry)
	if s1.Locality != "eu/zone-a" || s1.Weight != 10 || s1.Labels["version"] != "v1" || s1.Labels["team"] != "money" ||
		s1.Ports["http"] != 8080 || we1.Healthy != nil {
		t.Errorf("instance 1: %v healthy=%v", s1, we1.Healthy)
	}
	if we2.Healthy == nil || *we2.Healthy || we2.Annotations[meshlabels.HealthChecksAnnotation] != "true" ||
		we2.Spec.(*networking.WorkloadEntry).Ports["http"] != 8081 {
		t.Errorf("instance 2: %v healthy=%v", we2.Spec, we2.Healthy)
	}
	if byName["ServiceEntry/ledger"].Spec.(*networking.ServiceEntry).Hosts[0] != "ledger" {
		t.Error("host defaults to the name")
	}
}

func TestParseReportsBadEntriesByLine(t *testing.T) {
	const bad = `services:
  - name: ok
    port: 80
    instances:
      - address: 10.0.0.1
      - address: "not an address!"
      - address: 10.0.0.2
        colour: blue
  - name: noport
    instances: []
  - name: ok
    port: 81
`
	objs, errs, err := static.Parse(meta, "inv.yaml", []byte(bad))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"inv.yaml:6: services[0].instances[1].address: \"not an address!\" is neither an IP address nor a host name",
		"inv.yaml:8: services[0].instances[2].colour: unknown field",
		"inv.yaml:9: services[1].port: want 1-65535, got 0",
		"inv.yaml:11: services[2].name: service \"ok\" already defined at line 2",
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(objs) != 2 { // the ok service and its one good instance
		t.Errorf("kept %d objects, want 2", len(objs))
	}
	if _, _, err := static.Parse(meta, "inv.yaml", []byte("services: [\n")); err == nil {
		t.Error("broken YAML must be an error")
	}
}

func TestWatchedFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(file, []byte(inventory), 0o644); err != nil {
		t.Fatal(err)
	}
	st := store.NewStore()
	// A user's file defines "ledger" too: it must win over the registry.
	userSE := &store.Object{Key: store.Key{Kind: store.KindServiceEntry, Namespace: "default", Name: "ledger"},
		APIVersion: "networking.istio.io/v1", Spec: &networking.ServiceEntry{Hosts: []string{"ledger.user"}},
		Origin: store.Origin{Source: "dir:/etc/vmesh", File: "ledger.yaml", Line: 1}}
	if err := st.Replace(store.Source{Name: "dir:/etc/vmesh", Class: store.ClassConfig}, []*store.Object{userSE}); err != nil {
		t.Fatal(err)
	}
	sink := adapter.NewSink(st, meta, file, nil, nil)
	a, err := static.New(static.Config{File: file, Debounce: 20 * time.Millisecond}, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	weKey := func(name string) store.Key {
		return store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: name}
	}
	wait(t, "initial load", func() bool { return st.Snapshot().Get(weKey("billing-10.0.0.1-8080")) != nil })
	if got := st.Snapshot().Get(userSE.Key); got != userSE {
		t.Errorf("the user's ServiceEntry must win, got %v", got.Origin)
	}
	if c := st.Snapshot().Conflicts; len(c) != 1 || c[0].Losers[0].Source != "registry:inventory" {
		t.Errorf("conflicts %+v", c)
	}

	// Replace by rename, as editors do: one instance more.
	tmp := filepath.Join(dir, ".inventory.tmp")
	next := strings.Replace(inventory, "      - address: db-1.example.internal\n", "      - address: db-1.example.internal\n      - address: 10.0.0.9\n", 1)
	if err := os.WriteFile(tmp, []byte(next), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	wait(t, "new instance", func() bool { return st.Snapshot().Get(weKey("ledger-10.0.0.9-5432")) != nil })

	// Broken YAML keeps the last good set and reports the line.
	if err := os.WriteFile(file, []byte("services:\n  - name: x\n   port: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wait(t, "error reported", func() bool {
		for _, s := range st.Snapshot().Sources {
			if s.Source == "registry:inventory" && len(s.Errors) == 1 && s.Errors[0].Line > 0 {
				return true
			}
		}
		return false
	})
	if st.Snapshot().Get(weKey("ledger-10.0.0.9-5432")) == nil {
		t.Fatal("broken file removed the last good set")
	}

	// Removing an instance removes its WorkloadEntry and clears the error.
	if err := os.WriteFile(file, []byte(inventory), 0o644); err != nil {
		t.Fatal(err)
	}
	wait(t, "instance removed", func() bool {
		s := st.Snapshot()
		for _, src := range s.Sources {
			if src.Source == "registry:inventory" && len(src.Errors) != 0 {
				return false
			}
		}
		return s.Get(weKey("ledger-10.0.0.9-5432")) == nil
	})
}

func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
