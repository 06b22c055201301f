package xds_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/xdstest"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
)

// A client in the service's namespace dials it by its short names, as with
// Istio's proxyless generator: xds:///reviews:9080, reviews.default:9080
// and reviews.default.svc:9080 all reach reviews.default.svc.cluster.local;
// from another namespace the short name stands for nothing.
func TestShortNamesFromTheServiceNamespace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := store.NewStore()
	se := &store.Object{
		Key: store.Key{Kind: store.KindServiceEntry, Namespace: "default", Name: "reviews"},
		Spec: &networking.ServiceEntry{
			Hosts: []string{"reviews.default.svc.cluster.local"}, Resolution: networking.ServiceEntry_STATIC,
			Ports:            []*networking.ServicePort{{Name: "grpc", Number: 9080, Protocol: "GRPC"}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "reviews"}},
		},
	}
	if err := cs.Replace(testSource, []*store.Object{se}); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, ctx, cs)
	b := xdstest.StartBackend(t, m.addr, xdstest.Node{ID: "reviews-1", Namespace: "default", Labels: map[string]string{"app": "reviews"}})
	we := &store.Object{
		Key:  store.Key{Kind: store.KindWorkloadEntry, Namespace: "default", Name: "reviews-1"},
		Spec: &networking.WorkloadEntry{Address: "127.0.0.1", Ports: map[string]uint32{"grpc": uint32(b.Port)}, Labels: map[string]string{"app": "reviews"}},
	}
	if err := cs.Replace(testSource, []*store.Object{se, we}); err != nil {
		t.Fatal(err)
	}
	short := xdstest.Dial(t, m.addr, xdstest.Node{ID: "client-short", Namespace: "default"}, "reviews:9080")
	for _, target := range []string{"reviews.default:9080", "reviews.default.svc:9080", "reviews.default.svc.cluster.local:9080"} {
		c := xdstest.Dial(t, m.addr, xdstest.Node{ID: "client-" + target, Namespace: "default"}, target)
		if got := xdstest.CallUntil(t, c, 20*time.Second); got != "reviews-1" {
			t.Errorf("xds:///%s from default reached %q", target, got)
		}
	}
	if got := xdstest.CallUntil(t, short, 20*time.Second); got != "reviews-1" {
		t.Errorf("xds:///reviews:9080 from default reached %q", got)
	}

	// The short name follows the service: a new port is served under it.
	se2 := &store.Object{Key: se.Key, Spec: &networking.ServiceEntry{
		Hosts: []string{"reviews.default.svc.cluster.local"}, Resolution: networking.ServiceEntry_STATIC,
		Ports: []*networking.ServicePort{
			{Name: "grpc", Number: 9080, Protocol: "GRPC"},
			{Name: "grpc-alt", Number: 9081, Protocol: "GRPC", TargetPort: uint32(b.Port)},
		},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "reviews"}},
	}}
	if err := cs.Replace(testSource, []*store.Object{se2, we}); err != nil {
		t.Fatal(err)
	}
	full := xdstest.Dial(t, m.addr, xdstest.Node{ID: "client-alt-full", Namespace: "default"}, "reviews.default.svc.cluster.local:9081")
	if got := xdstest.CallUntil(t, full, 20*time.Second); got != "reviews-1" {
		t.Errorf("full 9081 reached %q", got)
	}
	alt := xdstest.Dial(t, m.addr, xdstest.Node{ID: "client-alt", Namespace: "default"}, "reviews:9081")
	if got := xdstest.CallUntil(t, alt, 20*time.Second); got != "reviews-1" {
		t.Errorf("xds:///reviews:9081 reached %q", got)
	}

	// From another namespace "reviews" is no service: the channel finds no
	// listener (grpc-go reports the resource as missing and fails RPCs).
	other := xdstest.Dial(t, m.addr, xdstest.Node{ID: "client-other", Namespace: "other"}, "reviews:9080")
	callCtx, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	if _, err := other.UnaryCall(callCtx, nil); err == nil {
		t.Error("xds:///reviews:9080 from namespace other reached a backend")
	}
	xdstest.Eventually(t, "the other namespace's client asked for reviews:9080", func() bool {
		for _, st := range m.syncz() {
			if st.ID == "client-other" && st.Types["LDS"] != nil {
				return true
			}
		}
		return false
	})
	for _, st := range m.syncz() {
		if st.ID == "client-other" && st.Types["LDS"].Resources != 0 {
			t.Errorf("client-other was sent %d listeners for reviews:9080", st.Types["LDS"].Resources)
		}
	}

	// The service goes: so does the listener its short name stood for.
	if err := cs.Replace(testSource, []*store.Object{we}); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, "reviews:9080 gone with its service", func() bool {
		resp, err := http.Get(m.debug.URL + "/debug/config_dump?proxy=client-short")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var dump xds.ConfigDump
		if err := json.NewDecoder(resp.Body).Decode(&dump); err != nil {
			t.Fatal(err)
		}
		_, held := dump.Resources["LDS"]["reviews:9080"]
		return !held
	})
}
