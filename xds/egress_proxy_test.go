package xds_test

import (
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"github.com/vmesh/vmesh/xds/sidecar"
	networking "istio.io/api/networking/v1alpha3"
)

// TestSidecarEgressProxy: with a Sidecar's outboundTrafficPolicy
// ALLOW_ANY and an egressProxy, traffic to destinations no ServiceEntry
// names leaves through the egress proxy's cluster (Istio's
// outbound|port|subset|host), on the TCP catch-alls and the HTTP
// allow_any route alike, instead of going straight out; REGISTRY_ONLY
// still blocks it.
func TestSidecarEgressProxy(t *testing.T) {
	egress := o(store.KindServiceEntry, "egress", &networking.ServiceEntry{
		Hosts: []string{"egress.mesh.internal"}, Resolution: networking.ServiceEntry_STATIC, Location: networking.ServiceEntry_MESH_INTERNAL,
		Ports:     []*networking.ServicePort{{Name: "tls", Number: 443, Protocol: "TLS"}},
		Endpoints: []*networking.WorkloadEntry{{Address: "10.0.9.9"}},
	})
	web := o(store.KindServiceEntry, "web", &networking.ServiceEntry{
		Hosts: []string{"web.mesh.internal"}, Resolution: networking.ServiceEntry_STATIC,
		Ports:     []*networking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
		Endpoints: []*networking.WorkloadEntry{{Address: "10.0.9.10"}},
	})
	sc := func(mode networking.OutboundTrafficPolicy_Mode) *store.Object {
		return o(store.KindSidecar, "default", &networking.Sidecar{OutboundTrafficPolicy: &networking.OutboundTrafficPolicy{
			Mode:        mode,
			EgressProxy: &networking.Destination{Host: "egress.mesh.internal", Subset: "", Port: &networking.PortSelector{Number: 443}},
		}})
	}
	p := &xds.Proxy{ID: "vm", Kind: xds.KindSidecar, Namespace: "default", IPs: []string{"10.0.0.1"}}
	for _, c := range []struct {
		name string
		mode networking.OutboundTrafficPolicy_Mode
		want string
	}{
		{"ALLOW_ANY", networking.OutboundTrafficPolicy_ALLOW_ANY, "outbound|443||egress.mesh.internal"},
		{"REGISTRY_ONLY", networking.OutboundTrafficPolicy_REGISTRY_ONLY, sidecar.BlackHoleCluster},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := store.NewStore()
			if err := st.Replace(testSource, []*store.Object{egress, web, sc(c.mode)}); err != nil {
				t.Fatal(err)
			}
			s := model.Build(st.Snapshot())
			lds, err := xds.Listeners(s, p)
			if err != nil {
				t.Fatal(err)
			}
			catchAll := func(fc *listenerv3.FilterChain) string {
				tp := &tcpv3.TcpProxy{}
				if fc == nil || fc.GetFilters()[len(fc.GetFilters())-1].GetTypedConfig().UnmarshalTo(tp) != nil {
					return ""
				}
				return tp.GetCluster()
			}
			for _, l := range lds {
				switch l.GetName() {
				case sidecar.VirtualOutboundListener:
					chains := l.GetFilterChains()
					if got := catchAll(chains[len(chains)-1]); got != c.want {
						t.Errorf("virtualOutbound catch-all to %q, want %q", got, c.want)
					}
				case "0.0.0.0_80":
					if got := catchAll(l.GetDefaultFilterChain()); got != c.want {
						t.Errorf("0.0.0.0_80 non-HTTP traffic to %q, want %q", got, c.want)
					}
				}
			}
			if c.mode != networking.OutboundTrafficPolicy_ALLOW_ANY {
				return
			}
			rds, err := xds.Routes(s, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, rc := range rds {
				vhs := rc.GetVirtualHosts()
				if last := vhs[len(vhs)-1]; last.GetName() != "allow_any" || last.GetRoutes()[0].GetRoute().GetCluster() != c.want {
					t.Errorf("route %s: last virtual host %s to %q, want allow_any to %q", rc.GetName(), last.GetName(), last.GetRoutes()[0].GetRoute().GetCluster(), c.want)
				}
			}
		})
	}
}
