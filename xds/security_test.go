package xds_test

//lint:file-ignore SA1019 reads the match_subject_alt_names tls.go writes

import (
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds"
	"github.com/vmesh/vmesh/xds/security"
	security1 "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// Security behaviour of the rich snapshot, asserted so a reviewer need not
// read the golden file.
func TestGRPCSecurityMapping(t *testing.T) {
	s := richSnapshot(t)
	cds, err := xds.Clusters(s, grpcProxy)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cds {
		ts := c.GetTransportSocket()
		switch c.GetName() {
		case "outbound|7070||shop.internal", "outbound|7070|v1|shop.internal", "outbound|7070|v2|shop.internal":
			up := &tlsv3.UpstreamTlsContext{}
			if err := ts.GetTypedConfig().UnmarshalTo(up); err != nil {
				t.Fatalf("%s: automatic mTLS toward STRICT endpoints with service accounts: %v", c.GetName(), err)
			}
			ctx := up.GetCommonTlsContext()
			if ctx.GetTlsCertificateProviderInstance().GetInstanceName() != security.CertProviderInstance ||
				ctx.GetValidationContext().GetCaCertificateProviderInstance().GetInstanceName() != security.CertProviderInstance {
				t.Errorf("%s: provider instances %v", c.GetName(), ctx)
			}
			var sans []string
			for _, m := range ctx.GetValidationContext().GetMatchSubjectAltNames() {
				sans = append(sans, m.GetExact())
			}
			if want := []string{"spiffe://cluster.local/ns/default/sa/shop", "spiffe://cluster.local/ns/default/sa/shop-v1b"}; !slices.Equal(sans, want) {
				t.Errorf("%s: SANs %v, want %v", c.GetName(), sans, want)
			}
		case "outbound|9090||shop.internal", "outbound|9090|v1|shop.internal", "outbound|9090|v2|shop.internal":
			if ts != nil {
				t.Errorf("%s: the endpoints' port 19090 is PERMISSIVE (served as plaintext by gRPC servers), yet TLS %v", c.GetName(), ts)
			}
		case "outbound|443||api.example.com":
			up := &tlsv3.UpstreamTlsContext{}
			if err := ts.GetTypedConfig().UnmarshalTo(up); err != nil {
				t.Fatalf("SIMPLE TLS: %v", err)
			}
			ctx := up.GetCommonTlsContext()
			if ctx.GetTlsCertificateProviderInstance() != nil || ctx.GetValidationContext().GetCaCertificateProviderInstance().GetInstanceName() != "api-ca" || up.GetSni() != "api.example.com" {
				t.Errorf("SIMPLE TLS: want roots from instance api-ca, no client certificate, SNI: %v", up)
			}
		}
	}

	// The server listener of a workload without labels: STRICT (namespace
	// policy), deny then allow then router; the JWT rule is dropped.
	l, err := xds.InboundListener(s, grpcProxy, xds.InboundListenerPrefix+"10.0.0.9:17070")
	if err != nil {
		t.Fatal(err)
	}
	fc := l.GetFilterChains()[0]
	down := &tlsv3.DownstreamTlsContext{}
	if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(down); err != nil {
		t.Fatalf("STRICT listener without TLS: %v", err)
	}
	if !down.GetRequireClientCertificate().GetValue() || down.GetCommonTlsContext().GetTlsCertificateProviderInstance().GetInstanceName() != security.CertProviderInstance ||
		down.GetCommonTlsContext().GetValidationContext().GetCaCertificateProviderInstance().GetInstanceName() != security.CertProviderInstance {
		t.Errorf("STRICT: %v", down)
	}
	filters := httpFilters(t, l)
	var names []string
	for _, f := range filters {
		names = append(names, f.GetName())
	}
	if want := []string{security.DenyFilterName, security.AllowFilterName, "envoy.filters.http.router"}; !slices.Equal(names, want) {
		t.Fatalf("filters %v, want %v", names, want)
	}
	allow := &rbacv3.RBAC{}
	if err := filters[1].GetTypedConfig().UnmarshalTo(allow); err != nil {
		t.Fatal(err)
	}
	if _, ok := allow.GetRules().GetPolicies()["ns[default]-policy[allow-tenants]-rule[0]"]; !ok || len(allow.GetRules().GetPolicies()) != 1 {
		t.Errorf("allow policies %v, want rule 0 only (rule 1 needs JWT)", allow.GetRules().GetPolicies())
	}
	deny := &rbacv3.RBAC{}
	if err := filters[0].GetTypedConfig().UnmarshalTo(deny); err != nil {
		t.Fatal(err)
	}
	pol := deny.GetRules().GetPolicies()["ns[default]-policy[deny-blocked]-rule[0]"]
	if deny.GetRules().GetAction() != rbacconfigv3.RBAC_DENY ||
		pol.GetPrincipals()[0].GetAuthenticated().GetPrincipalName().GetExact() != "spiffe://cluster.local/ns/default/sa/blocked" ||
		pol.GetPermissions()[0].GetUrlPath().GetPath().GetPrefix() != "/shop.Admin/" {
		t.Errorf("deny policy %v", pol)
	}

	// A shop workload on its admin port: PERMISSIVE, plaintext.
	shop := &xds.Proxy{ID: "shop-1", Kind: xds.KindGRPC, Namespace: "default", Labels: map[string]string{"app": "shop"}}
	l, err = xds.InboundListener(s, shop, xds.InboundListenerPrefix+"10.0.0.1:19090")
	if err != nil {
		t.Fatal(err)
	}
	if ts := l.GetFilterChains()[0].GetTransportSocket(); ts != nil || l.GetFilterChains()[0].GetName() != "inbound|PERMISSIVE" {
		t.Errorf("PERMISSIVE port: chain %s with TLS %v, want plaintext", l.GetFilterChains()[0].GetName(), ts)
	}
	if xds.GroupKey(s, shop) == xds.GroupKey(s, grpcProxy) {
		t.Errorf("a workload selected by a PeerAuthentication shares the group key %q of one that is not", xds.GroupKey(s, shop))
	}
	other := &xds.Proxy{ID: "p2", Kind: xds.KindGRPC, Namespace: "default", Labels: map[string]string{"app": "web"}}
	if xds.GroupKey(s, other) != xds.GroupKey(s, grpcProxy) {
		t.Errorf("labels no policy selects split the group: %q vs %q", xds.GroupKey(s, other), xds.GroupKey(s, grpcProxy))
	}
}

func httpFilters(t *testing.T, l *listenerv3.Listener) []*hcmv3.HttpFilter {
	t.Helper()
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	return hcm.GetHttpFilters()
}

func TestRBACFiltersAllowNothing(t *testing.T) {
	st := store.NewStore()
	objs := []*store.Object{
		{Key: store.Key{Kind: store.KindAuthorizationPolicy, Namespace: "shop", Name: "allow-nothing"}, Spec: &security1.AuthorizationPolicy{
			Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "locked"}}}},
		{Key: store.Key{Kind: store.KindAuthorizationPolicy, Namespace: "shop", Name: "deny-nothing"}, Spec: &security1.AuthorizationPolicy{
			Action: security1.AuthorizationPolicy_DENY}},
	}
	if err := st.Replace(testSource, objs); err != nil {
		t.Fatal(err)
	}
	s := model.Build(st.Snapshot())
	locked := &xds.Proxy{ID: "l", Kind: xds.KindGRPC, Namespace: "shop", Labels: map[string]string{"app": "locked"}}
	open := &xds.Proxy{ID: "o", Kind: xds.KindGRPC, Namespace: "shop"}
	l, err := xds.InboundListener(s, locked, xds.InboundListenerPrefix+"127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	validate(t, l)
	fs := httpFilters(t, l)
	allow := &rbacv3.RBAC{}
	if len(fs) != 2 || fs[0].GetName() != security.AllowFilterName || fs[0].GetTypedConfig().UnmarshalTo(allow) != nil ||
		allow.GetRules() == nil || len(allow.GetRules().GetPolicies()) != 0 {
		t.Errorf("an ALLOW policy without rules must allow nothing (ALLOW filter, no policies): %v", fs)
	}
	l, err = xds.InboundListener(s, open, xds.InboundListenerPrefix+"127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	if fs := httpFilters(t, l); len(fs) != 1 {
		t.Errorf("a DENY policy without rules denies nothing and an unselected workload has no ALLOW: filters %v", fs)
	}
}
