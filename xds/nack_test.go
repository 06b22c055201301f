package xds_test

import (
	"context"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	networking "istio.io/api/networking/v1alpha3"
)

// Two WorkloadEntries with one address:port are valid Istio config, but
// grpc-go rejects an EDS resource with duplicate endpoints. The NACK must
// show in /debug/syncz and the metric, and clear once the config is fixed.
func TestNACKVisibleInSyncz(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := store.NewStore()
	dup := func(name string) *store.Object {
		return &store.Object{
			Key:  store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: name},
			Spec: &networking.WorkloadEntry{Address: "127.0.0.1", Ports: map[string]uint32{"grpc": 1}, Labels: map[string]string{"app": "a"}},
		}
	}
	objs := []*store.Object{seObj("a", "a.internal", "a"), dup("a1"), dup("a2")}
	if err := cs.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, ctx, cs)
	client := dial(t, m.addr, "nack-client", "a.internal:80")
	go call(client) // starts the xDS watches; the call itself cannot succeed

	var eds *xds.TypeStatus
	eventually(t, "EDS NACK in syncz", func() bool {
		for _, st := range m.syncz() {
			if st.ID == "nack-client" && st.Types["EDS"] != nil && st.Types["EDS"].Nack != "" {
				eds = st.Types["EDS"]
				return true
			}
		}
		return false
	})
	if !strings.Contains(eds.Nack, "duplicate endpoint") || !strings.HasPrefix(eds.NackVersion, "r") || eds.Acked != "" {
		t.Errorf("EDS status = %+v, want a duplicate-endpoint NACK of an r<rev> version, nothing ACKed", eds)
	}
	if got := m.counter("vmesh_xds_nacks_total", "EDS"); got < 1 {
		t.Errorf("vmesh_xds_nacks_total{type=EDS} = %v, want >= 1", got)
	}

	// Fix the config: the next version is ACKed and the NACK clears.
	if err := cs.Replace(testSource, objs[:2]); err != nil {
		t.Fatal(err)
	}
	eventually(t, "EDS ACKed after the fix", func() bool {
		for _, st := range m.syncz() {
			if st.ID == "nack-client" {
				e := st.Types["EDS"]
				return e != nil && e.Nack == "" && e.Acked != "" && e.Acked != eds.NackVersion
			}
		}
		return false
	})
}
