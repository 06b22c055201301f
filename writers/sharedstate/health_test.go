package sharedstate_test

import (
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/internal/testenv"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/writers/sharedstate"
)

func TestConsulSharedHealth(t *testing.T) {
	c := testenv.StartConsul(t)
	testSharedHealth(t, sharedstate.Spec{Type: sharedstate.TypeConsul, Prefix: "vmesh-health", TTL: 10 * time.Second}, c.HTTPAddr)
}

func TestZooKeeperSharedHealth(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	testSharedHealth(t, sharedstate.Spec{Type: sharedstate.TypeZooKeeper, Prefix: "vmesh/health", TTL: 2 * time.Second}, z.Addr)
}

// testSharedHealth: a config-defined, health-checked WorkloadEntry is in
// every replica's config; its agent reports through A (filestore's
// SetHealth there): B serves A's report, follows it, keeps its own report
// over A's once the agent reports through B, and loses A's when A dies
// without cleanup (its session expires).
func testSharedHealth(t *testing.T, spec sharedstate.Spec, target string) {
	a := startReplica(t, "A", spec, target)
	b := startReplica(t, "B", spec, target)
	for _, r := range []*replica{a, b} {
		select {
		case <-r.state.Synced():
		case <-time.After(30 * time.Second):
			t.Fatalf("replica %s never read the shared state", r.id)
		}
	}
	key := store.Key{Kind: store.KindWorkloadEntry, Namespace: "fin", Name: "ledger-vm"}
	for _, r := range []*replica{a, b} {
		we := entry("fin", "ledger-vm", "10.0.0.9", false)
		we.Healthy = nil
		we.Annotations = map[string]string{meshlabels.HealthChecksAnnotation: "true"}
		we.Origin = store.Origin{Source: "dir:/etc/vmesh", File: "ledger.yaml", Line: 1}
		if err := r.store.Replace(store.Source{Name: "dir:/etc/vmesh", Class: store.ClassConfig}, []*store.Object{we}); err != nil {
			t.Fatal(err)
		}
	}
	healthOn := func(r *replica, want *bool) func() bool {
		return func() bool {
			h := r.store.Snapshot().Get(key).Healthy
			return (h == nil && want == nil) || (h != nil && want != nil && *h == *want)
		}
	}
	yes, no := true, false
	a.store.SetHealth(key, &yes)
	took := eventually(t, 2*time.Second, "B serves A's healthy report", healthOn(b, &yes))
	t.Logf("health A → B: %s", took)
	a.store.SetHealth(key, &no)
	eventually(t, 2*time.Second, "B follows A's unhealthy report", healthOn(b, &no))
	// The agent reports through B too: B's own report wins on B.
	b.store.SetHealth(key, &yes)
	eventually(t, 2*time.Second, "B serves its own report", healthOn(b, &yes))
	eventually(t, 2*time.Second, "A keeps its own report over B's", healthOn(a, &no))
	b.store.ClearHealth(key)
	eventually(t, 2*time.Second, "B serves A's report again", healthOn(b, &no))
	// A dies without cleanup: once its session expires, B drops A's report
	// (the entry's health is unknown again).
	a.proxy.Cut()
	eventually(t, 3*spec.TTL+10*time.Second, "B forgets the dead replica's report", healthOn(b, nil))
}
