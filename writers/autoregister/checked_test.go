package autoregister_test

import (
	"context"
	"testing"
	"time"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/internal/refusal"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/autoregister"
)

const checkedYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ratings, namespace: demo}
spec:
  hosts: [ratings.demo.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: ratings}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: ratings-vm
  namespace: demo
  annotations: {proxy.istio.io/health-checks-enabled: "True"}
spec:
  address: 10.2.0.5
  labels: {app: ratings}
  serviceAccount: ratings
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: plain-vm, namespace: demo}
spec:
  address: 10.2.0.6
  labels: {app: ratings}
`

// endpoints returns the addresses of ratings' endpoints in the model built
// from the store.
func ratingsEndpoints(t *testing.T, cs *store.Store) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, svc := range model.Build(cs.Snapshot()).ServicesForHost("ratings.demo.svc.cluster.local") {
		for _, e := range svc.Endpoints {
			out[e.Address] = true
		}
	}
	return out
}

// TestAgentDecidesConfigDefinedEntry: a WorkloadEntry of the config
// annotated health-checks-enabled ("True", read as Istio's ParseBool) is
// no endpoint until the agent naming it (WORKLOAD_ENTRY) reports healthy;
// an unhealthy report removes it; a grace period after the agent's
// stream closes its health is unknown and it is no endpoint again. An
// entry without the annotation is an endpoint throughout, and an agent
// naming it changes nothing.
func TestAgentDecidesConfigDefinedEntry(t *testing.T) {
	cs := store.NewStore()
	objs, errs := filestore.Decode("vms.yaml", []byte(checkedYAML))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := cs.Replace(store.Source{Name: "dir:test"}, objs); err != nil {
		t.Fatal(err)
	}
	r := autoregister.New(cs, autoregister.Config{Grace: 100 * time.Millisecond,
		Authenticate: func(context.Context) (string, string, error) { return "demo", "ratings", nil }}, nil)
	agent := autoregister.Agent{ID: "ratings-vm", Namespace: "demo", IPs: []string{"10.2.0.5"}, WorkloadEntry: "ratings-vm"}

	if eps := ratingsEndpoints(t, cs); eps["10.2.0.5"] || !eps["10.2.0.6"] {
		t.Fatalf("before any report: %v, want only the unchecked 10.2.0.6", eps)
	}
	if err := r.StreamOpened(context.Background(), 1, agent); err != nil {
		t.Fatal(err)
	}
	r.Health(1, true, "")
	if eps := ratingsEndpoints(t, cs); !eps["10.2.0.5"] {
		t.Fatalf("after a healthy report: %v, want 10.2.0.5", eps)
	}
	r.Health(1, false, "connection refused")
	if eps := ratingsEndpoints(t, cs); eps["10.2.0.5"] {
		t.Fatalf("after an unhealthy report: %v", eps)
	}
	r.Health(1, true, "")
	// The config changing under it keeps the report.
	objs[2].Labels = map[string]string{"changed": "yes"}
	if err := cs.Replace(store.Source{Name: "dir:test"}, objs); err != nil {
		t.Fatal(err)
	}
	if eps := ratingsEndpoints(t, cs); !eps["10.2.0.5"] {
		t.Fatalf("after an unrelated config change: %v, want 10.2.0.5 still", eps)
	}
	r.StreamClosed(1)
	deadline := time.Now().Add(5 * time.Second)
	for ratingsEndpoints(t, cs)["10.2.0.5"] {
		if time.Now().After(deadline) {
			t.Fatal("the entry is still an endpoint long after its agent left")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if h := cs.Snapshot().Get(store.Key{Kind: store.KindWorkloadEntry, Namespace: "demo", Name: "ratings-vm"}).Healthy; h != nil {
		t.Fatalf("health after the grace period = %v, want unknown", *h)
	}

	// An agent naming the unannotated entry: its reports change nothing.
	plain := autoregister.Agent{ID: "plain-vm", Namespace: "demo", IPs: []string{"10.2.0.6"}, WorkloadEntry: "plain-vm"}
	if err := r.StreamOpened(context.Background(), 2, plain); err != nil {
		t.Fatal(err)
	}
	r.Health(2, false, "down")
	if eps := ratingsEndpoints(t, cs); !eps["10.2.0.6"] {
		t.Fatalf("an unchecked entry followed its agent's report: %v", eps)
	}
	// ... and they are counted as ignored (the checked entry's were not),
	// and warning VM1013 names the entry's file, line and field while
	// its agent is connected.
	r.Health(2, true, "")
	if n := r.IgnoredHealthReports(); n != 2 {
		t.Fatalf("%d reports counted as ignored, want the unchecked entry's 2", n)
	}
	if w := registrationWarnings(cs); len(w) != 1 || w[0].Code != store.CodeHealthReportsIgnored || w[0].File != "vms.yaml" ||
		w[0].Line != 21 || w[0].Object != "WorkloadEntry/demo/plain-vm" || w[0].Field != "metadata.annotations" {
		t.Fatalf("warnings while ignoring: %+v", w)
	}
	r.StreamClosed(2)
	r.Health(2, false, "after close")
	if n := r.IgnoredHealthReports(); n != 2 {
		t.Fatalf("a closed stream's report counted: %d", n)
	}
	if w := registrationWarnings(cs); len(w) != 0 {
		t.Fatalf("warnings after the agent left: %+v", w)
	}
}

// registrationWarnings returns the warnings on the registration source's
// status.
func registrationWarnings(cs *store.Store) []store.ConfigError {
	for _, st := range cs.Snapshot().Sources {
		if st.Source == autoregister.Source.Name {
			return st.Warnings
		}
	}
	return nil
}

// TestConfigDefinedEntryRefusals: an agent naming an entry that does not
// exist is refused for now (it retries: the entry may come with the next
// commit); one whose certificate is another service account's is refused
// for good, and its reports change nothing.
func TestConfigDefinedEntryRefusals(t *testing.T) {
	cs := store.NewStore()
	objs, errs := filestore.Decode("vms.yaml", []byte(checkedYAML))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := cs.Replace(store.Source{Name: "dir:test"}, objs); err != nil {
		t.Fatal(err)
	}
	r := autoregister.New(cs, autoregister.Config{
		Authenticate: func(context.Context) (string, string, error) { return "demo", "intruder", nil }}, nil)
	missing := autoregister.Agent{ID: "x", Namespace: "demo", IPs: []string{"10.2.0.9"}, WorkloadEntry: "nope"}
	ref, ok := refusal.Of(r.StreamOpened(context.Background(), 1, missing))
	if !ok || ref.Reason != autoregister.ReasonNoWorkloadEntry || ref.Permanent {
		t.Fatalf("missing entry: %+v, want a non-permanent %s refusal", ref, autoregister.ReasonNoWorkloadEntry)
	}
	intruder := autoregister.Agent{ID: "y", Namespace: "demo", IPs: []string{"10.2.0.5"}, WorkloadEntry: "ratings-vm"}
	ref, ok = refusal.Of(r.StreamOpened(context.Background(), 2, intruder))
	if !ok || ref.Reason != autoregister.ReasonIdentityMismatch || !ref.Permanent {
		t.Fatalf("other service account: %+v, want a permanent %s refusal", ref, autoregister.ReasonIdentityMismatch)
	}
	r.Health(2, true, "")
	if ratingsEndpoints(t, cs)["10.2.0.5"] {
		t.Fatal("a refused stream's report made the entry an endpoint")
	}
}
