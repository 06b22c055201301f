package sidecar_test

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	typev1beta1 "istio.io/api/type/v1beta1"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/vmesh/vmesh/xds/security"
	"github.com/vmesh/vmesh/xds/sidecar"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
)

const featuresDir = "testdata/features"

// productpage is the proxy of the features config: the workload 10.0.0.5.
func productpage() model.Workload {
	return model.Workload{ID: "pp", Kind: model.KindSidecar, Reads: sidecar.Kind{}.Reads(), Namespace: "shop", IPs: []string{"10.0.0.5"}, Labels: map[string]string{"app": "productpage"}}
}

func features(t *testing.T) (*model.Snapshot, model.Workload) {
	return load(t, featuresDir), productpage()
}

// without drops the objects of a kind.
func without(kind store.Kind) func(*store.Object) *store.Object {
	return func(o *store.Object) *store.Object {
		if o.Kind == kind {
			return nil
		}
		return o
	}
}

func object(kind store.Kind, ns, name string, spec proto.Message) *store.Object {
	return &store.Object{Key: store.Key{Kind: kind, Namespace: ns, Name: name}, Spec: spec}
}

func listener(t *testing.T, ls []*listenerv3.Listener, name string) *listenerv3.Listener {
	t.Helper()
	for _, l := range ls {
		if l.GetName() == name {
			return l
		}
	}
	t.Fatalf("no listener %s", name)
	return nil
}

func tcpCluster(t *testing.T, fc *listenerv3.FilterChain) string {
	t.Helper()
	f := fc.GetFilters()[len(fc.GetFilters())-1]
	tp := &tcpproxyv3.TcpProxy{}
	if err := f.GetTypedConfig().UnmarshalTo(tp); err != nil {
		t.Fatal(err)
	}
	return tp.GetCluster()
}

func TestValidateUnpacksAny(t *testing.T) {
	// An HttpConnectionManager without a stat prefix is invalid, but only
	// visible inside the filter's Any.
	a, err := anypb.New(&hcmv3.HttpConnectionManager{})
	if err != nil {
		t.Fatal(err)
	}
	l := &listenerv3.Listener{Name: "x", FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
		Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a},
	}}}}}
	if err := l.ValidateAll(); err != nil {
		t.Fatalf("the listener itself should validate: %v", err)
	}
	if err := sidecar.Validate(l); err == nil || !strings.Contains(err.Error(), "StatPrefix") {
		t.Fatalf("Validate = %v, want the HCM's StatPrefix error", err)
	}
	l.FilterChains[0].Filters[0].GetTypedConfig().TypeUrl = "type.googleapis.com/not.a.Type"
	if err := sidecar.Validate(l); err == nil {
		t.Fatal("Validate accepted an Any it cannot unpack")
	}
}

func TestConsistentFindsDanglingReferences(t *testing.T) {
	snap, p := features(t)
	res, err := sidecar.Generate(model.NewView(snap, p))
	if err != nil {
		t.Fatal(err)
	}
	drop := func(name string) *sidecar.Resources {
		r := *res
		r.Clusters = nil
		for _, c := range res.Clusters {
			if c.GetName() != name {
				r.Clusters = append(r.Clusters, c)
			}
		}
		return &r
	}
	for _, name := range []string{
		"outbound|27017|v2|mongo.shop.vmesh.internal",     // weighted tcp_proxy
		"outbound|9080|v3|reviews.shop.svc.cluster.local", // weighted route
		"outbound|9080||ratings.shop.svc.cluster.local",   // mirror
		"inbound|8080||",   // inbound HCM inline route
		"BlackHoleCluster", // REGISTRY_ONLY fallback
	} {
		if err := drop(name).Consistent(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: Consistent = %v", name, err)
		}
	}
	r := *res
	r.Routes = r.Routes[1:]
	if err := r.Consistent(); err == nil {
		t.Error("a missing route configuration passed")
	}
	r = *res
	r.Endpoints = r.Endpoints[1:]
	if err := r.Consistent(); err == nil {
		t.Error("an EDS cluster without endpoints passed")
	}
}

func TestOutboundLayout(t *testing.T) {
	snap, p := features(t)
	ls, err := sidecar.Listeners(model.NewView(snap, p))
	if err != nil {
		t.Fatal(err)
	}
	vo := listener(t, ls, sidecar.VirtualOutboundListener)
	if !vo.GetUseOriginalDst().GetValue() || vo.GetAddress().GetSocketAddress().GetPortValue() != sidecar.OutboundPort {
		t.Errorf("virtualOutbound: %v", vo)
	}
	chains := vo.GetFilterChains()
	if got := tcpCluster(t, chains[len(chains)-1]); got != sidecar.BlackHoleCluster {
		t.Errorf("REGISTRY_ONLY fallback = %s", got)
	}
	// The loop guard: a connection to 15001 itself goes nowhere.
	if guard := chains[0]; guard.GetFilterChainMatch().GetDestinationPort().GetValue() != sidecar.OutboundPort || tcpCluster(t, guard) != sidecar.BlackHoleCluster {
		t.Errorf("virtualOutbound's first chain = %v, want port %d to BlackHoleCluster", guard, sidecar.OutboundPort)
	}
	mongo := listener(t, ls, "10.96.0.10_27017")
	if mongo.GetBindToPort().GetValue() {
		t.Error("service listener binds its port")
	}
	// A MONGO port: Envoy's mongo_proxy (statistics) before the tcp_proxy,
	// as Istio's.
	mf := mongo.GetFilterChains()[0].GetFilters()
	if len(mf) != 2 || mf[0].GetName() != "envoy.filters.network.mongo_proxy" {
		t.Fatalf("mongo filters = %v, want mongo_proxy then tcp_proxy", mf)
	}
	tp := &tcpproxyv3.TcpProxy{}
	if err := mf[1].GetTypedConfig().UnmarshalTo(tp); err != nil {
		t.Fatal(err)
	}
	wc := tp.GetWeightedClusters().GetClusters()
	if len(wc) != 2 || wc[0].GetName() != "outbound|27017|v1|mongo.shop.vmesh.internal" || wc[0].GetWeight() != 80 || wc[1].GetWeight() != 20 {
		t.Errorf("mongo tcp route = %v", tp)
	}
	cidr := listener(t, ls, "0.0.0.0_27018")
	if pr := cidr.GetFilterChains()[0].GetFilterChainMatch().GetPrefixRanges(); len(pr) != 1 || pr[0].GetAddressPrefix() != "192.192.192.0" || pr[0].GetPrefixLen().GetValue() != 24 {
		t.Errorf("CIDR chain match = %v", pr)
	}
	if cidr.GetDefaultFilterChain() == nil {
		t.Error("a TCP-only wildcard listener needs a default chain")
	}
	http := listener(t, ls, "0.0.0.0_9080")
	hcm := &hcmv3.HttpConnectionManager{}
	if err := http.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	if hcm.GetRds().GetRouteConfigName() != "9080" || hcm.GetRds().GetConfigSource().GetAds() == nil {
		t.Errorf("HTTP port 9080 HCM rds = %v", hcm.GetRds())
	}
	for _, l := range ls {
		if strings.Contains(l.GetName(), "8080") && l.GetTrafficDirection().String() == "OUTBOUND" {
			t.Errorf("billing (hidden by the Sidecar) has listener %s", l.GetName())
		}
	}

	// Without a Sidecar: ALLOW_ANY passes unknown traffic through.
	snap = loadEdited(t, featuresDir, without(store.KindSidecar))
	ls, err = sidecar.Listeners(model.NewView(snap, p))
	if err != nil {
		t.Fatal(err)
	}
	chains = listener(t, ls, sidecar.VirtualOutboundListener).GetFilterChains()
	if got := tcpCluster(t, chains[len(chains)-1]); got != sidecar.PassthroughCluster {
		t.Errorf("ALLOW_ANY fallback = %s", got)
	}
	if guard := chains[0]; guard.GetFilterChainMatch().GetDestinationPort().GetValue() != sidecar.OutboundPort || tcpCluster(t, guard) != sidecar.BlackHoleCluster {
		t.Errorf("ALLOW_ANY: virtualOutbound's first chain = %v, want the loop guard", guard)
	}
	rs, err := sidecar.Routes(model.NewView(snap, p))
	if err != nil {
		t.Fatal(err)
	}
	last := rs[0].GetVirtualHosts()[len(rs[0].GetVirtualHosts())-1]
	if last.GetName() != "allow_any" || last.GetRoutes()[0].GetRoute().GetCluster() != sidecar.PassthroughCluster {
		t.Errorf("catch-all virtual host = %v", last)
	}
}

// The inbound chains follow the model's PeerAuthentication mode of each
// workload port: mesh < namespace < workload policy, UNSET inherits,
// portLevelMtls overrides. Ports that are no workload port get Istio's
// catch-all chains for the workload-level mode, to InboundPassthroughCluster:
// mesh mTLS terminated (HTTP ALPNs through an HCM) unless DISABLE, plaintext
// (sniffed HTTP through an HCM) unless STRICT, other TLS passed undecrypted
// under PERMISSIVE; no default chain (under STRICT plaintext matches none).
func TestInboundMTLSModes(t *testing.T) {
	pa := func(ns, name string, sel map[string]string, mode securityv1beta1.PeerAuthentication_MutualTLS_Mode, ports map[uint32]securityv1beta1.PeerAuthentication_MutualTLS_Mode) *store.Object {
		spec := &securityv1beta1.PeerAuthentication{Mtls: &securityv1beta1.PeerAuthentication_MutualTLS{Mode: mode}}
		if sel != nil {
			spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
		}
		for port, m := range ports {
			if spec.PortLevelMtls == nil {
				spec.PortLevelMtls = map[uint32]*securityv1beta1.PeerAuthentication_MutualTLS{}
			}
			spec.PortLevelMtls[port] = &securityv1beta1.PeerAuthentication_MutualTLS{Mode: m}
		}
		return object(store.KindPeerAuthentication, ns, name, spec)
	}
	const (
		unset      = securityv1beta1.PeerAuthentication_MutualTLS_UNSET
		disable    = securityv1beta1.PeerAuthentication_MutualTLS_DISABLE
		permissive = securityv1beta1.PeerAuthentication_MutualTLS_PERMISSIVE
		strict     = securityv1beta1.PeerAuthentication_MutualTLS_STRICT
	)
	app := map[string]string{"app": "productpage"}
	meshStrict := pa("istio-system", "default", nil, strict, nil)
	permissiveChains := []string{"inbound|8080|mtls", "inbound|8080|tls", "inbound|8080|raw_buffer"}
	// Chain name, transport, ALPN kind (mesh HTTP, mesh TCP, sniffed HTTP,
	// any).
	permissivePass := []string{"virtualInbound-catchall-http|mtls tls istio-http", "virtualInbound-catchall-http raw_buffer http",
		"virtualInbound-catchall|mtls tls istio", "virtualInbound-catchall raw_buffer any", "virtualInbound-catchall|tls tls any"}
	strictPass := []string{"virtualInbound-catchall-http|mtls tls istio-http", "virtualInbound-catchall|mtls tls any"}
	disablePass := []string{"virtualInbound-catchall-http raw_buffer http", "virtualInbound-catchall raw_buffer any"}
	cases := []struct {
		name   string
		pas    []*store.Object
		chains []string // for port 8080
		// passthrough are the chains for ports that are no workload
		// port: Istio's catch-all chains for the workload-level mode.
		passthrough []string
	}{
		{"none is permissive", nil, permissiveChains, permissivePass},
		{"mesh strict", []*store.Object{meshStrict}, []string{"inbound|8080|mtls"}, strictPass},
		{"workload overrides mesh", []*store.Object{meshStrict, pa("shop", "pp", app, disable, nil)},
			[]string{"inbound|8080|plaintext"}, disablePass},
		{"unset inherits", []*store.Object{meshStrict, pa("shop", "default", nil, unset, nil)}, []string{"inbound|8080|mtls"}, strictPass},
		{"port level overrides", []*store.Object{pa("shop", "pp", app, permissive, map[uint32]securityv1beta1.PeerAuthentication_MutualTLS_Mode{8080: strict})},
			[]string{"inbound|8080|mtls"}, permissivePass},
		{"another workload's policy", []*store.Object{pa("shop", "reviews", map[string]string{"app": "reviews"}, strict, nil)},
			permissiveChains, permissivePass},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := loadEdited(t, featuresDir, without(store.KindPeerAuthentication), tc.pas...)
			ls, err := sidecar.Listeners(model.NewView(snap, productpage()))
			if err != nil {
				t.Fatal(err)
			}
			vi := listener(t, ls, sidecar.VirtualInboundListener)
			var got []string
			for _, fc := range vi.GetFilterChains() {
				if strings.HasPrefix(fc.GetName(), "inbound|8080|") {
					got = append(got, fc.GetName())
					if err := sidecar.Validate(fc); err != nil {
						t.Error(err)
					}
					if (fc.GetTransportSocket() != nil) != strings.HasSuffix(fc.GetName(), "|mtls") {
						t.Errorf("chain %s: transport socket %v", fc.GetName(), fc.GetTransportSocket())
					}
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.chains, " ") {
				t.Errorf("chains = %v, want %v", got, tc.chains)
			}
			if d := vi.GetDefaultFilterChain(); d != nil {
				t.Errorf("default chain %s: want none (every connection has its chain, or none under STRICT)", d.GetName())
			}
			got = nil
			for _, fc := range vi.GetFilterChains() {
				if !strings.HasPrefix(fc.GetName(), "virtualInbound-catchall") {
					continue
				}
				m := fc.GetFilterChainMatch()
				alpn := "any"
				switch ap := m.GetApplicationProtocols(); {
				case slices.Contains(ap, "istio-h2"):
					alpn = "istio-http"
				case slices.Contains(ap, "istio"):
					alpn = "istio"
				case slices.Contains(ap, "h2c"):
					alpn = "http"
				}
				got = append(got, fc.GetName()+" "+m.GetTransportProtocol()+" "+alpn)
				if (fc.GetTransportSocket() != nil) != strings.HasSuffix(fc.GetName(), "|mtls") {
					t.Errorf("chain %s: transport socket %v, want mTLS terminated exactly on |mtls chains", fc.GetName(), fc.GetTransportSocket())
				}
				last := fc.GetFilters()[len(fc.GetFilters())-1]
				h := &hcmv3.HttpConnectionManager{}
				if strings.Contains(fc.GetName(), "-http") {
					if err := last.GetTypedConfig().UnmarshalTo(h); err != nil {
						t.Fatalf("chain %s: %v", fc.GetName(), err)
					}
					if c := h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); c != sidecar.InboundPassthroughCluster {
						t.Errorf("chain %s routes to %s", fc.GetName(), c)
					}
				} else if c := tcpCluster(t, fc); c != sidecar.InboundPassthroughCluster {
					t.Errorf("chain %s to %s, want %s", fc.GetName(), c, sidecar.InboundPassthroughCluster)
				}
			}
			if strings.Join(got, ", ") != strings.Join(tc.passthrough, ", ") {
				t.Errorf("passthrough chains:\n%v\nwant\n%v", got, tc.passthrough)
			}
		})
	}
}

func TestRBACOnTCPPort(t *testing.T) {
	snap, p := features(t)
	// Port 9001 is TCP: the ALLOW rule that needs HTTP (methods, paths,
	// request headers) can never match there, the DENY on DELETE matches
	// every connection (Istio's conservative rule); the serviceAccounts
	// rule stays.
	ls, err := sidecar.Listeners(model.NewView(snap, p))
	if err != nil {
		t.Fatal(err)
	}
	var chain *listenerv3.FilterChain
	for _, fc := range listener(t, ls, sidecar.VirtualInboundListener).GetFilterChains() {
		if fc.GetName() == "inbound|9001|raw_buffer" {
			chain = fc
		}
	}
	if chain == nil || len(chain.GetFilters()) != 3 {
		t.Fatalf("9001 chain = %v", chain)
	}
	deny, allow := &rbacnetv3.RBAC{}, &rbacnetv3.RBAC{}
	if err := chain.GetFilters()[0].GetTypedConfig().UnmarshalTo(deny); err != nil {
		t.Fatal(err)
	}
	if err := chain.GetFilters()[1].GetTypedConfig().UnmarshalTo(allow); err != nil {
		t.Fatal(err)
	}
	dp := deny.GetRules().GetPolicies()["ns[shop]-policy[deny-delete]-rule[0]"]
	if dp == nil || !dp.GetPermissions()[0].GetAny() {
		t.Errorf("TCP deny policy = %v, want it to match any connection", dp)
	}
	if _, ok := allow.GetRules().GetPolicies()["ns[shop]-policy[productpage-viewers]-rule[0]"]; ok {
		t.Error("HTTP-only ALLOW rule kept on a TCP port")
	}
	sa := allow.GetRules().GetPolicies()["ns[shop]-policy[productpage-viewers]-rule[1]"]
	if sa == nil || !strings.Contains(sa.GetPrincipals()[0].String(), "/ns/shop/sa/reviews") {
		t.Errorf("serviceAccounts rule = %v", sa)
	}

	// Connections to ports that are no workload port pass through under
	// the same network RBAC: the ALLOW policy admits there only what it
	// allows on a TCP port (Istio's passthrough chains; not a way around
	// the policy).
	var catchAll *listenerv3.FilterChain
	for _, fc := range listener(t, ls, sidecar.VirtualInboundListener).GetFilterChains() {
		if strings.HasPrefix(fc.GetName(), "virtualInbound-catchall") && !strings.Contains(fc.GetName(), "-http") && catchAll == nil {
			catchAll = fc // the first TCP passthrough chain
		}
	}
	if fs := catchAll.GetFilters(); len(fs) != 3 || fs[0].GetName() != security.NetworkFilterName || fs[1].GetName() != security.NetworkFilterName {
		t.Fatalf("catch-all chain filters = %v, want the deny and allow RBAC filters before the tcp_proxy", fs)
	}
	passAllow := &rbacnetv3.RBAC{}
	if err := catchAll.GetFilters()[1].GetTypedConfig().UnmarshalTo(passAllow); err != nil {
		t.Fatal(err)
	}
	if passAllow.GetRules().GetAction() != rbacconfigv3.RBAC_ALLOW || passAllow.GetRules().GetPolicies()["ns[shop]-policy[productpage-viewers]-rule[1]"] == nil {
		t.Errorf("catch-all ALLOW = %v", passAllow.GetRules())
	}
}

func TestSidecarIngressAndEgressPorts(t *testing.T) {
	spec := &networking.Sidecar{
		WorkloadSelector:      &networking.WorkloadSelector{Labels: map[string]string{"app": "productpage"}},
		OutboundTrafficPolicy: &networking.OutboundTrafficPolicy{Mode: networking.OutboundTrafficPolicy_REGISTRY_ONLY},
		Ingress: []*networking.IstioIngressListener{{
			Port:            &networking.SidecarPort{Number: 9080, Protocol: "HTTP", Name: "http"},
			DefaultEndpoint: "unix:///var/run/app.sock",
		}},
		Egress: []*networking.IstioEgressListener{{
			Port:  &networking.SidecarPort{Number: 9080, Protocol: "HTTP", Name: "http"},
			Hosts: []string{"./*"},
		}},
	}
	snap := loadEdited(t, featuresDir, without(store.KindSidecar), object(store.KindSidecar, "shop", "productpage", spec))
	res, err := sidecar.Generate(model.NewView(snap, productpage()))
	if err != nil {
		t.Fatal(err)
	}
	validateAll(t, res)
	var inbound *clusterv3.Cluster
	for _, c := range res.Clusters {
		if strings.HasPrefix(c.GetName(), "outbound|") && !strings.HasPrefix(c.GetName(), "outbound|9080|") {
			t.Errorf("egress on port 9080 only, but got %s", c.GetName())
		}
		if strings.HasPrefix(c.GetName(), "inbound|") {
			if inbound != nil {
				t.Errorf("second inbound cluster %s", c.GetName())
			}
			inbound = c
		}
	}
	if inbound.GetName() != "inbound|9080||" {
		t.Fatalf("inbound cluster = %s", inbound.GetName())
	}
	addr := inbound.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress()
	if addr.GetPipe().GetPath() != "/var/run/app.sock" {
		t.Errorf("inbound endpoint = %v", addr)
	}
}

func TestClusterTLS(t *testing.T) {
	snap, p := features(t)
	cs, err := sidecar.Clusters(model.NewView(snap, p))
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]*clusterv3.Cluster{}
	for _, c := range cs {
		by[c.GetName()] = c
	}
	for name, want := range map[string]string{
		"outbound|9080|v1|reviews.shop.svc.cluster.local": "socket:outbound_.9080_.v1_.reviews.shop.svc.cluster.local", // ISTIO_MUTUAL
		"outbound|9080||ratings.shop.svc.cluster.local":   "matches",                                                   // auto mTLS
		"outbound|443||api.example.com":                   "socket:api.example.com",                                    // SIMPLE
		"outbound|80||httpbin.org":                        "none",                                                      // DISABLE
	} {
		c := by[name]
		got := "none"
		switch {
		case c.GetTransportSocket() != nil:
			got = "socket:" + sniOf(t, c.GetTransportSocket().GetTypedConfig())
		case len(c.GetTransportSocketMatches()) > 0:
			got = "matches"
		}
		if got != want {
			t.Errorf("%s: TLS %s, want %s", name, got, want)
		}
	}
	if c := by["outbound|9080|v2|reviews.shop.svc.cluster.local"]; c.GetLbPolicy() != clusterv3.Cluster_RING_HASH || c.GetRingHashLbConfig().GetMinimumRingSize().GetValue() != 1024 {
		t.Errorf("v2 LB = %v %v", c.GetLbPolicy(), c.GetRingHashLbConfig())
	}
	if c := by["outbound|9080|v3|reviews.shop.svc.cluster.local"]; c.GetLbPolicy() != clusterv3.Cluster_MAGLEV {
		t.Errorf("v3 LB = %v", c.GetLbPolicy())
	}
	if c := by["outbound|27018||legacy-db.shop.vmesh.internal"]; c.GetType() != clusterv3.Cluster_ORIGINAL_DST {
		t.Errorf("PASSTHROUGH cluster type = %v", c.GetType())
	}
	cb := by["outbound|9080||reviews.shop.svc.cluster.local"].GetCircuitBreakers().GetThresholds()[0]
	if cb.GetMaxConnections().GetValue() != 100 || cb.GetMaxPendingRequests().GetValue() != 10 || cb.GetMaxRequests().GetValue() != 1000 || cb.GetMaxRetries().GetValue() != 3 {
		t.Errorf("circuit breakers = %v", cb)
	}
}

// SIMPLE TLS without caCertificates verifies the server against the
// system's roots, as Istio does (file-root:system), never not at all; only
// insecureSkipVerify turns verification off.
func TestSimpleTLSVerifiesAgainstSystemRoots(t *testing.T) {
	p := productpage()
	for _, tc := range []struct {
		skip bool
		want string
	}{{false, sidecar.SystemCABundle}, {true, ""}} {
		snap := loadEdited(t, featuresDir, func(o *store.Object) *store.Object {
			dr, ok := o.Spec.(*networking.DestinationRule)
			if !ok || dr.GetHost() != "api.example.com" {
				return o
			}
			c := proto.Clone(dr).(*networking.DestinationRule)
			c.TrafficPolicy.Tls.CaCertificates, c.TrafficPolicy.Tls.Sni, c.TrafficPolicy.Tls.SubjectAltNames = "", "", nil
			if tc.skip {
				c.TrafficPolicy.Tls.InsecureSkipVerify = wrapperspb.Bool(true)
			}
			return &store.Object{Key: o.Key, Spec: c, Origin: o.Origin}
		})
		cs, err := sidecar.Clusters(model.NewView(snap, p))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range cs {
			if c.GetName() != "outbound|443||api.example.com" {
				continue
			}
			found = true
			var up tlsv3.UpstreamTlsContext
			if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up); err != nil {
				t.Fatal(err)
			}
			if got := up.GetCommonTlsContext().GetValidationContext().GetTrustedCa().GetFilename(); got != tc.want {
				t.Errorf("insecureSkipVerify %v: trusted CA %q, want %q", tc.skip, got, tc.want)
			}
			// No sni: the request's host is sent and the certificate
			// checked against it.
			var opts httpv3.HttpProtocolOptions
			if err := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&opts); err != nil {
				t.Fatal(err)
			}
			if u := opts.GetUpstreamHttpProtocolOptions(); !u.GetAutoSni() || !u.GetAutoSanValidation() {
				t.Errorf("no sni: upstream options %v, want auto SNI and SAN validation", u)
			}
			if err := c.ValidateAll(); err != nil {
				t.Error(err)
			}
		}
		if !found {
			t.Fatal("no cluster outbound|443||api.example.com")
		}
	}
}

// TestTLSRoutesBySNI: a TLS port is routed by the VirtualService's tls
// routes on SNI (Istio's sidecar layout): one chain per match, the first of
// equal matches kept, connections no chain matches to the fallback
// (BlackHoleCluster under the features config's REGISTRY_ONLY), the TLS
// inspector on the listener; a tcp route does not apply to a TLS port;
// tcp matches with destinationSubnets become prefix-range chains before
// the service's own.
func TestTLSRoutesBySNI(t *testing.T) {
	se := func(host, addr, protocol string, port uint32) *networking.ServiceEntry {
		return &networking.ServiceEntry{Hosts: []string{host}, Addresses: []string{addr}, Resolution: networking.ServiceEntry_DNS,
			Location: networking.ServiceEntry_MESH_EXTERNAL, Ports: []*networking.ServicePort{{Name: "p", Number: port, Protocol: protocol}}}
	}
	dest := func(host string, weight int32) *networking.RouteDestination {
		return &networking.RouteDestination{Destination: &networking.Destination{Host: host}, Weight: weight}
	}
	snap := loadEdited(t, featuresDir, nil,
		object(store.KindServiceEntry, "shop", "sni-api", se("pay.example.net", "192.0.2.30", "TLS", 443)),
		object(store.KindServiceEntry, "shop", "sni-backup", se("paybackup.example.net", "192.0.2.31", "TLS", 443)),
		object(store.KindServiceEntry, "shop", "sni-db", se("store.example.net", "192.0.2.40", "TCP", 5432)),
		object(store.KindVirtualService, "shop", "sni-api", &networking.VirtualService{Hosts: []string{"pay.example.net"},
			Tls: []*networking.TLSRoute{
				{Match: []*networking.TLSMatchAttributes{{Port: 443, SniHosts: []string{"pay.example.net", "www.example.net"}}},
					Route: []*networking.RouteDestination{dest("pay.example.net", 90), dest("paybackup.example.net", 10)}},
				// Same SNI again: never reached, left out.
				{Match: []*networking.TLSMatchAttributes{{SniHosts: []string{"pay.example.net", "www.example.net"}}},
					Route: []*networking.RouteDestination{dest("paybackup.example.net", 0)}},
				// Not for this proxy's labels.
				{Match: []*networking.TLSMatchAttributes{{SniHosts: []string{"other.example.net"}, SourceLabels: map[string]string{"app": "reviews"}}},
					Route: []*networking.RouteDestination{dest("paybackup.example.net", 0)}},
			},
			Tcp: []*networking.TCPRoute{{Route: []*networking.RouteDestination{dest("paybackup.example.net", 0)}}},
		}),
		object(store.KindVirtualService, "shop", "sni-db", &networking.VirtualService{Hosts: []string{"store.example.net"},
			Tcp: []*networking.TCPRoute{{Match: []*networking.L4MatchAttributes{{DestinationSubnets: []string{"192.0.2.0/28"}}, {DestinationSubnets: []string{"192.0.2.40"}}},
				Route: []*networking.RouteDestination{dest("paybackup.example.net", 0)}}},
		}),
	)
	ls, err := sidecar.OutboundListeners(model.NewView(snap, productpage()))
	if err != nil {
		t.Fatal(err)
	}
	api := listener(t, ls, "192.0.2.30_443")
	if fcs := api.GetFilterChains(); len(fcs) != 1 {
		t.Fatalf("api chains = %v, want one (the duplicate match and the other proxy's left out)", fcs)
	}
	fc := api.GetFilterChains()[0]
	if got := fc.GetFilterChainMatch().GetServerNames(); !slices.Equal(got, []string{"pay.example.net", "www.example.net"}) {
		t.Errorf("server_names = %v", got)
	}
	tp := &tcpproxyv3.TcpProxy{}
	if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
		t.Fatal(err)
	}
	var split []string
	for _, c := range tp.GetWeightedClusters().GetClusters() {
		split = append(split, c.GetName()+"="+strconv.Itoa(int(c.GetWeight())))
	}
	if want := []string{"outbound|443||pay.example.net=90", "outbound|443||paybackup.example.net=10"}; !slices.Equal(split, want) {
		t.Errorf("tls route split = %v, want %v (the tcp route does not apply to a TLS port)", split, want)
	}
	if got := tcpCluster(t, api.GetDefaultFilterChain()); got != "BlackHoleCluster" {
		t.Errorf("unmatched SNI goes to %q, want BlackHoleCluster (REGISTRY_ONLY)", got)
	}
	if lf := api.GetListenerFilters(); len(lf) != 1 || lf[0].GetName() != "envoy.filters.listener.tls_inspector" {
		t.Errorf("listener filters = %v, want the TLS inspector", lf)
	}
	// Without a tls route, a TLS port on its VIP goes to its own cluster
	// whatever the SNI.
	backup := listener(t, ls, "192.0.2.31_443")
	if fcs := backup.GetFilterChains(); len(fcs) != 1 || fcs[0].GetFilterChainMatch() != nil || tcpCluster(t, fcs[0]) != "outbound|443||paybackup.example.net" || backup.GetDefaultFilterChain() != nil {
		t.Errorf("backup listener = %v", backup)
	}
	db := listener(t, ls, "192.0.2.40_5432")
	if fcs := db.GetFilterChains(); len(fcs) != 1 || tcpCluster(t, fcs[0]) != "outbound|443||paybackup.example.net" { // its only port
		t.Fatalf("db chains = %v, want the subnet route's chain", fcs)
	}
	var ranges []string
	for _, r := range db.GetFilterChains()[0].GetFilterChainMatch().GetPrefixRanges() {
		ranges = append(ranges, r.GetAddressPrefix()+"/"+strconv.Itoa(int(r.GetPrefixLen().GetValue())))
	}
	if want := []string{"192.0.2.0/28", "192.0.2.40/32"}; !slices.Equal(ranges, want) {
		t.Errorf("prefix ranges = %v, want %v", ranges, want)
	}
	if got := tcpCluster(t, db.GetDefaultFilterChain()); got != "outbound|5432||store.example.net" {
		t.Errorf("db default chain to %q, want the service's own cluster", got)
	}
}

// TestVirtualServiceHostsWithoutService: a VirtualService host that no
// service has gets a virtual host as in Istio: on the HTTP ports of the
// services the VirtualService is bound to (ratings: 9080 and 7070), or on
// port 80 when it is bound to none; none when the Sidecar's egress hides
// the VirtualService's namespace, and none that takes an earlier domain.
// A service's virtual host lists the names a client may send, as Istio's
// sidecars do: the host, its absolute form (trailing dot), the Kubernetes
// short forms, the VIPs (IPv6 in brackets, as Host headers carry them), no
// ports (the route configuration ignores the Host header's port), and no
// name an earlier virtual host took.
func TestVirtualHostDomains(t *testing.T) {
	se := func(host string, addrs ...string) *networking.ServiceEntry {
		return &networking.ServiceEntry{Hosts: []string{host}, Addresses: addrs, Resolution: networking.ServiceEntry_STATIC,
			Ports: []*networking.ServicePort{{Name: "http", Number: 8000, Protocol: "HTTP"}}}
	}
	snap := loadEdited(t, featuresDir, nil,
		object(store.KindServiceEntry, "shop", "echo", se("echo.shop.svc.cluster.local", "10.96.7.7", "2001:db8::7")),
		object(store.KindServiceEntry, "shop", "echo2", se("echo2.shop.svc.cluster.local", "10.96.7.7")),
	)
	rcs, err := sidecar.Routes(model.NewView(snap, productpage()))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, rc := range rcs {
		if !rc.GetIgnorePortInHostMatching() {
			t.Errorf("route configuration %s: ignore_port_in_host_matching unset", rc.GetName())
		}
		for _, vh := range rc.GetVirtualHosts() {
			got[rc.GetName()+" "+vh.GetName()] = vh.GetDomains()
		}
	}
	want := map[string][]string{
		"8000 echo.shop.svc.cluster.local:8000": {"echo.shop.svc.cluster.local", "echo.shop.svc.cluster.local.", "echo", "echo.shop", "echo.shop.svc", "10.96.7.7", "[2001:db8::7]"},
		// The shared VIP is echo's, which comes first.
		"8000 echo2.shop.svc.cluster.local:8000": {"echo2.shop.svc.cluster.local", "echo2.shop.svc.cluster.local.", "echo2", "echo2.shop", "echo2.shop.svc"},
	}
	for name, w := range want {
		if d := got[name]; !slices.Equal(d, w) {
			t.Errorf("%s: domains = %q, want %q", name, d, w)
		}
	}
}

func TestVirtualServiceHostsWithoutService(t *testing.T) {
	route := func(host string) []*networking.HTTPRoute {
		return []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: host}}}}}
	}
	snap := loadEdited(t, featuresDir, func(o *store.Object) *store.Object {
		if o.Kind == store.KindVirtualService && slices.Contains(o.Spec.(*networking.VirtualService).GetHosts(), "ratings.shop.svc.cluster.local") {
			return nil
		}
		return o
	},
		object(store.KindVirtualService, "shop", "ratings-alias", &networking.VirtualService{Hosts: []string{"ratings.shop.svc.cluster.local", "ratings.example.org"}, Http: route("ratings.shop.svc.cluster.local")}),
		object(store.KindVirtualService, "shop", "edge", &networking.VirtualService{Hosts: []string{"edge.example.org", "ratings.example.org"}, Http: route("httpbin.org")}),
		object(store.KindVirtualService, "shop", "edge2", &networking.VirtualService{Hosts: []string{"edge.example.org"}, Http: route("ratings.shop.svc.cluster.local")}),
		object(store.KindVirtualService, "finance", "hidden", &networking.VirtualService{Hosts: []string{"hidden.example.org"}, Http: route("httpbin.org")}),
	)
	rcs, err := sidecar.Routes(model.NewView(snap, productpage()))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*routev3.VirtualHost{}
	for _, rc := range rcs {
		for _, vh := range rc.GetVirtualHosts() {
			if strings.Contains(vh.GetName(), ".example.org") {
				got[rc.GetName()+" "+vh.GetName()] = vh
			}
		}
	}
	// ratings.example.org is also edge's, which is bound to no service: port
	// 80 too. edge2's edge.example.org comes after edge's: left out.
	want := []string{"7070 ratings.example.org:7070", "80 edge.example.org:80", "80 ratings.example.org:80", "9080 ratings.example.org:9080"}
	if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, want) {
		t.Fatalf("virtual hosts of unregistered hosts = %v, want %v", names, want)
	}
	vh := got["9080 ratings.example.org:9080"]
	if d := vh.GetDomains(); !slices.Equal(d, []string{"ratings.example.org"}) {
		t.Errorf("domains = %v, want the host alone (Istio's: the route configuration ignores the port)", d)
	}
	if c := vh.GetRoutes()[0].GetRoute().GetCluster(); c != "outbound|9080||ratings.shop.svc.cluster.local" {
		t.Errorf("route cluster = %q, want the bound service's on the port", c)
	}
	if c := got["80 edge.example.org:80"].GetRoutes()[0].GetRoute().GetCluster(); c != "outbound|80||httpbin.org" {
		t.Errorf("edge route cluster = %q, want edge's (not edge2's)", c)
	}
}

// TestConnectionManagerSettings: every HTTP connection manager takes
// WebSocket upgrades, resets no idle stream, normalises paths before
// routing and authorization; an inbound one also tells the workload its
// client's identity (x-forwarded-client-cert), as Istio's.
func TestConnectionManagerSettings(t *testing.T) {
	snap, p := features(t)
	ls, err := sidecar.Listeners(model.NewView(snap, p))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[bool]bool{}
	for _, l := range ls {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				h := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().UnmarshalTo(h) != nil {
					continue
				}
				inbound := l.GetName() == sidecar.VirtualInboundListener
				seen[inbound] = true
				where := l.GetName() + " " + fc.GetName()
				if u := h.GetUpgradeConfigs(); len(u) != 1 || u[0].GetUpgradeType() != "websocket" {
					t.Errorf("%s: upgrades %v, want websocket", where, u)
				}
				if d := h.GetStreamIdleTimeout(); d == nil || d.AsDuration() != 0 {
					t.Errorf("%s: stream idle timeout %v, want 0 (none)", where, d)
				}
				if !h.GetNormalizePath().GetValue() || h.GetPathWithEscapedSlashesAction() != hcmv3.HttpConnectionManager_KEEP_UNCHANGED {
					t.Errorf("%s: paths not normalised", where)
				}
				if got := h.GetForwardClientCertDetails() == hcmv3.HttpConnectionManager_APPEND_FORWARD && h.GetSetCurrentClientCertDetails().GetUri(); got != inbound {
					t.Errorf("%s: x-forwarded-client-cert appended %v, want %v", where, got, inbound)
				}
			}
		}
	}
	if !seen[true] || !seen[false] {
		t.Fatalf("connection managers seen (inbound: %v, outbound: %v), want both", seen[true], seen[false])
	}
}
