package xds

import (
	"maps"
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/gen/gentest"
	"github.com/vmesh/vmesh/xds/sidecar"
	"google.golang.org/protobuf/proto"
)

// TestScopeClustersKeepOnlyTheirBytes: a scope part keeps its clusters and
// assignments serialised only (their messages are most of a sidecar
// fleet's heap), and what a stream holds still shows them whole: the held
// dump decodes each to the message the generator made.
func TestScopeClustersKeepOnlyTheirBytes(t *testing.T) {
	s := gentest.Snapshot(t, store.NewStore(), gentest.Base())
	p := &Proxy{ID: "vm-1", Kind: KindSidecar, Namespace: "ns-0", IPs: []string{"10.9.0.1"}, WorkloadName: "vm-1"}
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(testLog(t), m)
	c.push(s, time.Time{})
	v := model.NewView(s, p.Workload())
	cds, err := sidecar.OutboundClusters(v)
	if err != nil {
		t.Fatal(err)
	}
	eds, err := sidecar.Endpoints(v)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]proto.Message{resourcev3.ClusterType: {}, resourcev3.EndpointType: {}}
	for _, cl := range cds {
		want[resourcev3.ClusterType][cl.GetName()] = cl
	}
	for _, a := range eds {
		want[resourcev3.EndpointType][a.GetClusterName()] = a
	}
	for typeURL, msgs := range want {
		w := &watch{proxy: p, typeURL: typeURL, sotw: make(chan cachev3.Response, 1)}
		var names []string
		if typeURL == resourcev3.EndpointType {
			names = slices.Collect(maps.Keys(msgs))
		}
		w.sub = newSotwSubscription(names, typeURL == resourcev3.ClusterType)
		w.req = &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names}
		if _, err := c.open(w, true); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-w.sotw:
			w.sub.deliver(r.(*sotwResponse))
		default:
			t.Fatalf("%s: no answer", shortType(typeURL))
		}
		g := c.gens[GroupKey(s, p)]
		if g == nil {
			t.Fatalf("%s: no generation for the proxy's group", shortType(typeURL))
		}
		for name := range msgs {
			if r := g.Types[typeURL]; r == nil {
				t.Fatalf("%s: the group has none", shortType(typeURL))
			} else if x, ok := r.Get(name); !ok || x.Msg != nil {
				t.Errorf("%s %s: in the group (its scope part's) %v, keeps its message %v; want only its bytes", shortType(typeURL), name, ok, ok && x.Msg != nil)
			}
		}
	}
	shown := 0
	for _, hs := range c.held(p.ID) {
		for short, rs := range hs.Types {
			for _, r := range rs {
				for typeURL, msgs := range want {
					if shortType(typeURL) != short || msgs[r.Name] == nil {
						continue
					}
					shown++
					if !proto.Equal(r.Body, msgs[r.Name]) {
						t.Errorf("held %s %s: body differs from the generator's:\n got %v\nwant %v", short, r.Name, r.Body, msgs[r.Name])
					}
				}
			}
		}
	}
	if n := len(cds) + len(eds); shown != n || n == 0 {
		t.Errorf("held dump showed %d clusters and assignments, want %d (and some)", shown, n)
	}
}
