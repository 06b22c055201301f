package sidecar_test

import (
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// MeshConfig's outbound traffic policy, connect timeout and default retries
// reach a sidecar whose Sidecar and DestinationRules set none.
func TestMeshConfigDefaults(t *testing.T) {
	mc, errs := filestore.DecodeMeshConfig("mesh.yaml", []byte("outboundTrafficPolicy: {mode: REGISTRY_ONLY}\nconnectTimeout: 3s\ndefaultHttpRetryPolicy: {attempts: 5, retryOn: \"503\"}\n"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	objs, cerrs, err := filestore.LoadPath(featuresDir)
	if err != nil || len(cerrs) > 0 {
		t.Fatal(err, cerrs)
	}
	var kept []*store.Object
	for _, o := range objs {
		if o.Kind != store.KindSidecar && o.Kind != store.KindDestinationRule {
			kept = append(kept, o)
		}
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, kept); err != nil {
		t.Fatal(err)
	}
	v := model.NewView(model.BuildWith(st.Snapshot(), model.MeshFromConfig(mc)), productpage())

	ls, err := sidecar.Listeners(v)
	if err != nil {
		t.Fatal(err)
	}
	var vo *listenerv3.Listener
	for _, l := range ls {
		if l.GetName() == sidecar.VirtualOutboundListener {
			vo = l
		}
	}
	if got := tcpCluster(t, vo.GetFilterChains()[0]); got != sidecar.BlackHoleCluster {
		t.Errorf("mesh REGISTRY_ONLY: unknown traffic goes to %s", got)
	}
	cs, err := sidecar.Clusters(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.GetConnectTimeout().AsDuration() != 3*time.Second {
			t.Errorf("cluster %s connect timeout %s, want the mesh's 3s", c.GetName(), c.GetConnectTimeout().AsDuration())
		}
	}
	rs, err := sidecar.Routes(v)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, rc := range rs {
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				rp := r.GetRoute().GetRetryPolicy()
				if r.GetName() != "default" || r.GetRoute() == nil {
					continue // a VirtualService's route, with retries of its own
				}
				checked++
				if rp.GetNumRetries().GetValue() != 5 || len(rp.GetRetriableStatusCodes()) != 1 || rp.GetRetriableStatusCodes()[0] != 503 {
					t.Errorf("route %s/%s retries %v, want the mesh's 5 on 503", rc.GetName(), vh.GetName(), rp)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no route checked")
	}
}
