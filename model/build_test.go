package model_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmesh/vmesh/internal/meshlabels"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	networking "istio.io/api/networking/v1alpha3"
)

func obj(kind store.Kind, ns, name string, spec any) *store.Object {
	o := &store.Object{Key: store.Key{Kind: kind, Namespace: ns, Name: name}}
	switch s := spec.(type) {
	case *networking.ServiceEntry:
		o.Spec = s
	case *networking.WorkloadEntry:
		o.Spec = s
	case *networking.VirtualService:
		o.Spec = s
	case *networking.DestinationRule:
		o.Spec = s
	case *networking.Sidecar:
		o.Spec = s
	}
	return o
}

func build(t testing.TB, objs ...*store.Object) *model.Snapshot {
	t.Helper()
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	return model.Build(st.Snapshot())
}

func addrs(eps []*model.Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.Address)
	}
	return out
}

func TestBuildEndpointsFromWorkloadEntries(t *testing.T) {
	tr, fa := true, false
	unhealthy := obj(store.KindWorkloadEntry, "shop", "we-sick", &networking.WorkloadEntry{Address: "10.0.0.4", Labels: map[string]string{"app": "cart"}})
	unhealthy.Annotations = map[string]string{meshlabels.HealthChecksAnnotation: "true"}
	unhealthy.Healthy = &fa
	healthyWE := obj(store.KindWorkloadEntry, "shop", "we-ok", &networking.WorkloadEntry{Address: "10.0.0.5", Labels: map[string]string{"app": "cart"}})
	healthyWE.Annotations = map[string]string{meshlabels.HealthChecksAnnotation: "true"}
	healthyWE.Healthy = &tr
	unknown := obj(store.KindWorkloadEntry, "shop", "we-unknown", &networking.WorkloadEntry{Address: "10.0.0.6", Labels: map[string]string{"app": "cart"}})
	unknown.Annotations = map[string]string{meshlabels.HealthChecksAnnotation: "true"}

	s := build(t,
		obj(store.KindServiceEntry, "shop", "cart", &networking.ServiceEntry{
			Hosts:            []string{"cart.shop.internal"},
			Ports:            []*networking.ServicePort{{Name: "grpc", Number: 8080, Protocol: "grpc", TargetPort: 9000}},
			Resolution:       networking.ServiceEntry_STATIC,
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "cart"}},
		}),
		obj(store.KindWorkloadEntry, "shop", "we-1", &networking.WorkloadEntry{Address: "10.0.0.1", Labels: map[string]string{"app": "cart", "version": "v1"}, Ports: map[string]uint32{"grpc": 7000}, Locality: "eu/west-1/a", Weight: 3, ServiceAccount: "cart"}),
		obj(store.KindWorkloadEntry, "shop", "we-2", &networking.WorkloadEntry{Address: "10.0.0.2", Labels: map[string]string{"app": "cart", "version": "v2"}}),
		// Same labels, other namespace: never selected.
		obj(store.KindWorkloadEntry, "other", "we-3", &networking.WorkloadEntry{Address: "10.0.0.3", Labels: map[string]string{"app": "cart"}}),
		// Does not match the selector.
		obj(store.KindWorkloadEntry, "shop", "we-db", &networking.WorkloadEntry{Address: "10.0.0.9", Labels: map[string]string{"app": "db"}}),
		unhealthy, healthyWE, unknown,
	)
	if len(s.Services) != 1 {
		t.Fatalf("services = %d, want 1", len(s.Services))
	}
	svc := s.Services[0]
	if diff := cmp.Diff([]string{"10.0.0.1", "10.0.0.2", "10.0.0.5"}, addrs(svc.Endpoints)); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	e1 := svc.Endpoints[0]
	if got := e1.PortFor(svc.Ports[0]); got != 7000 {
		t.Errorf("port by name = %d, want 7000", got)
	}
	if got := svc.Endpoints[1].PortFor(svc.Ports[0]); got != 9000 {
		t.Errorf("port by targetPort = %d, want 9000", got)
	}
	if e1.Locality != "eu/west-1/a" || e1.Weight != 3 || e1.ServiceAccount != "cart" || e1.Origin != "shop/we-1" {
		t.Errorf("endpoint fields = %+v", e1)
	}
	if got := svc.SubsetEndpoints(map[string]string{"version": "v2"}); len(got) != 1 || got[0].Address != "10.0.0.2" {
		t.Errorf("subset v2 = %v", addrs(got))
	}
}

func TestBuildResolutionAndVisibility(t *testing.T) {
	s := build(t,
		obj(store.KindServiceEntry, "a", "dns", &networking.ServiceEntry{
			Hosts: []string{"api.example.com"}, Ports: []*networking.ServicePort{{Name: "https", Number: 443}},
			Resolution: networking.ServiceEntry_DNS,
		}),
		obj(store.KindServiceEntry, "a", "none", &networking.ServiceEntry{
			Hosts: []string{"passthrough.example.com"}, Ports: []*networking.ServicePort{{Name: "tcp", Number: 9}},
			Resolution: networking.ServiceEntry_NONE,
		}),
		obj(store.KindServiceEntry, "a", "private", &networking.ServiceEntry{
			Hosts: []string{"private.a"}, Ports: []*networking.ServicePort{{Name: "grpc", Number: 80}},
			Resolution: networking.ServiceEntry_STATIC, ExportTo: []string{"."},
			Endpoints: []*networking.WorkloadEntry{{Address: "10.1.0.1"}},
		}),
		obj(store.KindServiceEntry, "a", "explicit", &networking.ServiceEntry{
			Hosts: []string{"explicit.a"}, Addresses: []string{"10.200.0.1"}, Ports: []*networking.ServicePort{{Name: "grpc", Number: 80}},
			Resolution: networking.ServiceEntry_STATIC,
		}),
	)
	byHost := map[string]*model.Service{}
	for _, svc := range s.Services {
		byHost[svc.Hostname] = svc
	}
	if got := addrs(byHost["api.example.com"].Endpoints); len(got) != 1 || got[0] != "api.example.com" {
		t.Errorf("DNS without endpoints: endpoints = %v, want the host itself", got)
	}
	if svc := byHost["passthrough.example.com"]; len(svc.Addresses) != 0 || svc.AutoAddress {
		t.Errorf("NONE got VIP %v", svc.Addresses)
	}
	if svc := byHost["explicit.a"]; svc.AutoAddress || svc.Addresses[0] != "10.200.0.1" {
		t.Errorf("explicit address replaced: %v", svc.Addresses)
	}
	vip := byHost["private.a"].Addresses
	if len(vip) != 1 || !netip.MustParsePrefix("240.240.0.0/16").Contains(netip.MustParseAddr(vip[0])) {
		t.Errorf("auto VIP = %v, want one in 240.240.0.0/16", vip)
	}
	if got := len(s.VisibleServices("a", nil)); got != 4 {
		t.Errorf("visible from a = %d, want 4", got)
	}
	if got := s.ServiceFor("private.a", "b", nil); got != nil {
		t.Errorf("exportTo . visible from namespace b")
	}
}

func TestRoutingBindingAndSidecarScope(t *testing.T) {
	se := func(ns, host string) *store.Object {
		return obj(store.KindServiceEntry, ns, host, &networking.ServiceEntry{
			Hosts: []string{host}, Ports: []*networking.ServicePort{{Name: "grpc", Number: 80}}, Resolution: networking.ServiceEntry_STATIC,
		})
	}
	s := build(t,
		se("a", "one.a"), se("b", "two.b"), se("b", "three.b"),
		obj(store.KindVirtualService, "a", "vs-wild", &networking.VirtualService{Hosts: []string{"*.b"}}),
		obj(store.KindVirtualService, "a", "vs-two", &networking.VirtualService{Hosts: []string{"two.b"}}),
		obj(store.KindVirtualService, "c", "vs-gw", &networking.VirtualService{Hosts: []string{"one.a"}, Gateways: []string{"ingress"}}),
		obj(store.KindDestinationRule, "b", "dr-two-b", &networking.DestinationRule{Host: "two.b"}),
		obj(store.KindDestinationRule, "a", "dr-two-a", &networking.DestinationRule{Host: "two.b"}),
		obj(store.KindSidecar, "a", "default", &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*", "b/two.b"}}}}),
		obj(store.KindSidecar, "a", "special", &networking.Sidecar{
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "x"}},
			Egress:           []*networking.IstioEgressListener{{Hosts: []string{"*/*"}}},
		}),
	)
	if vs := s.VirtualServiceFor("two.b", "a"); vs == nil || vs.Name != "vs-two" {
		t.Errorf("two.b VS = %v, want exact vs-two", vs)
	}
	if vs := s.VirtualServiceFor("three.b", "a"); vs == nil || vs.Name != "vs-wild" {
		t.Errorf("three.b VS = %v, want wildcard", vs)
	}
	if vs := s.VirtualServiceFor("one.a", "a"); vs != nil {
		t.Errorf("gateway-only VS bound to mesh: %v", vs.Name)
	}
	if dr := s.DestinationRuleFor("two.b", "a", "b"); dr.Name != "dr-two-a" {
		t.Errorf("DR from a = %s, want the client namespace's", dr.Name)
	}
	if dr := s.DestinationRuleFor("two.b", "c", "b"); dr.Name != "dr-two-b" {
		t.Errorf("DR from c = %s, want the service namespace's", dr.Name)
	}
	sc := s.SidecarFor("a", map[string]string{"app": "y"})
	if sc == nil || sc.Name != "default" {
		t.Fatalf("sidecar = %v, want default", sc)
	}
	var hosts []string
	for _, svc := range s.VisibleServices("a", sc) {
		hosts = append(hosts, svc.Hostname)
	}
	if diff := cmp.Diff([]string{"one.a", "two.b"}, hosts); diff != "" {
		t.Errorf("scoped hosts (-want +got):\n%s", diff)
	}
	if sc := s.SidecarFor("a", map[string]string{"app": "x"}); sc.Name != "special" || len(s.VisibleServices("a", sc)) != 3 {
		t.Errorf("selected sidecar = %s", sc.Name)
	}
	// The spec travels with the scope, for the Envoy generator's ingress,
	// egress ports and outboundTrafficPolicy.
	if h := sc.Spec.GetEgress()[0].GetHosts(); len(h) != 2 || h[1] != "b/two.b" {
		t.Errorf("sidecar spec egress hosts = %v", h)
	}
}

// TestTrafficPolicyMerge checks Istio's merge of a DestinationRule's levels
// (pilot/pkg/networking/util MergeSubsetTrafficPolicy): a port-level entry
// replaces loadBalancer, connectionPool, outlierDetection and tls together,
// without inheriting what it leaves out; a subset's policy replaces the
// fields it sets, all four when it has an entry for the port.
func TestTrafficPolicyMerge(t *testing.T) {
	simple := func(lb networking.LoadBalancerSettings_SimpleLB) *networking.LoadBalancerSettings {
		return &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: lb}}
	}
	pool := func(n int32) *networking.ConnectionPoolSettings {
		return &networking.ConnectionPoolSettings{Http: &networking.ConnectionPoolSettings_HTTPSettings{Http2MaxRequests: n}}
	}
	simpleTLS := &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE}
	s := build(t,
		obj(store.KindServiceEntry, "a", "svc", &networking.ServiceEntry{Hosts: []string{"svc.a"}, Ports: []*networking.ServicePort{{Name: "grpc", Number: 80}, {Name: "grpc-b", Number: 81}, {Name: "https", Number: 443}}, Resolution: networking.ServiceEntry_STATIC}),
		obj(store.KindDestinationRule, "a", "dr", &networking.DestinationRule{
			Host: "svc.a",
			TrafficPolicy: &networking.TrafficPolicy{
				LoadBalancer:   simple(networking.LoadBalancerSettings_ROUND_ROBIN),
				ConnectionPool: pool(10),
				Tls:            simpleTLS,
				PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{
					{Port: &networking.PortSelector{Number: 80}, LoadBalancer: simple(networking.LoadBalancerSettings_LEAST_REQUEST)},
					{Port: &networking.PortSelector{Number: 443}, Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}},
				},
			},
			Subsets: []*networking.Subset{
				{Name: "v2", Labels: map[string]string{"version": "v2"}, TrafficPolicy: &networking.TrafficPolicy{ConnectionPool: pool(2)}},
				{Name: "v3", Labels: map[string]string{"version": "v3"}, TrafficPolicy: &networking.TrafficPolicy{
					ConnectionPool: pool(3),
					PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{
						{Port: &networking.PortSelector{Number: 81}, LoadBalancer: simple(networking.LoadBalancerSettings_RANDOM)},
					},
				}},
			},
		}),
	)
	dr := s.DestinationRuleFor("svc.a", "a", "a")
	type want struct {
		lb   networking.LoadBalancerSettings_SimpleLB // 0 (UNSPECIFIED): none
		pool int32                                    // 0: none
		tls  networking.ClientTLSSettings_TLSmode     // 0 (DISABLE): none
	}
	for _, c := range []struct {
		port   uint32
		subset string
		want   want
	}{
		// The port entry sets only loadBalancer: connectionPool and tls are not inherited.
		{80, "", want{lb: networking.LoadBalancerSettings_LEAST_REQUEST}},
		{81, "", want{networking.LoadBalancerSettings_ROUND_ROBIN, 10, networking.ClientTLSSettings_SIMPLE}},
		// The port entry sets only tls: the top-level ROUND_ROBIN is not inherited (Istio's default applies).
		{443, "", want{tls: networking.ClientTLSSettings_ISTIO_MUTUAL}},
		// A subset's connectionPool replaces only that field of the port's policy.
		{80, "v2", want{lb: networking.LoadBalancerSettings_LEAST_REQUEST, pool: 2}},
		{81, "v2", want{networking.LoadBalancerSettings_ROUND_ROBIN, 2, networking.ClientTLSSettings_SIMPLE}},
		// The subset's own entry for 81 replaces all four fields, its top-level pool included.
		{81, "v3", want{lb: networking.LoadBalancerSettings_RANDOM}},
		{80, "v3", want{lb: networking.LoadBalancerSettings_LEAST_REQUEST, pool: 3}},
	} {
		tp := dr.TrafficPolicy(c.port, c.subset)
		got := want{tp.GetLoadBalancer().GetSimple(), tp.GetConnectionPool().GetHttp().GetHttp2MaxRequests(), dr.ClientTLS(c.port, c.subset).GetMode()}
		if got != c.want {
			t.Errorf("port %d subset %q: got %+v, want %+v", c.port, c.subset, got, c.want)
		}
	}
	if dr.Spec.GetTrafficPolicy().GetLoadBalancer().GetSimple() != networking.LoadBalancerSettings_ROUND_ROBIN || dr.Spec.GetTrafficPolicy().GetConnectionPool().GetHttp().GetHttp2MaxRequests() != 10 {
		t.Errorf("input modified")
	}
	if tp := dr.TrafficPolicy(443, ""); tp != nil {
		t.Errorf("port 443 has only tls, TrafficPolicy = %v, want nil", tp)
	}
}

func TestAutoVIPsStable(t *testing.T) {
	hosts := make([]string, 2000)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("svc-%04d.example.internal", i)
	}
	base := model.AutoVIPs(hosts, nil)
	seen := map[string]string{}
	for h, v := range base {
		if other, dup := seen[v]; dup {
			t.Fatalf("VIP %s given to %s and %s", v, h, other)
		}
		seen[v] = h
	}
	// Order does not matter (restarts, file order).
	shuffled := append([]string(nil), hosts...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	if diff := cmp.Diff(base, model.AutoVIPs(shuffled, nil)); diff != "" {
		t.Fatalf("order changed VIPs:\n%s", diff)
	}
	// Adding hosts that sort before every existing one moves almost nothing:
	// only hosts that collide with a new one. Linear probing in sorted order
	// would shift every host after the first collision.
	more := append([]string(nil), hosts...)
	for i := range 100 {
		more = append(more, fmt.Sprintf("aaa-new-%03d.example.internal", i))
	}
	after := model.AutoVIPs(more, nil)
	moved := 0
	for h, v := range base {
		if after[h] != v {
			moved++
		}
	}
	if moved > 20 {
		t.Errorf("%d of %d VIPs moved after adding 100 unrelated hosts", moved, len(hosts))
	}
	// Explicit addresses in the range are never reused.
	var taken = map[string]bool{base[hosts[0]]: true}
	if got := model.AutoVIPs(hosts[:1], taken)[hosts[0]]; got == base[hosts[0]] {
		t.Errorf("VIP %s reused although taken", got)
	}
}
