package router_test

import (
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/store"
	"github.com/vmesh/vmesh/xds/router"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// ingressYAML is istio.io's ingress tasks on one router (labels
// istio=ingressgateway in istio-system): HTTP host and path routing to
// httpbin, secure ingress SIMPLE and MUTUAL by credentialName, SNI
// passthrough to nginx, and an httpsRedirect server. A Gateway selecting
// other routers and a VirtualService bound to the mesh only are not the
// router's.
const ingressYAML = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: httpbin, namespace: default}
spec:
  hosts: [httpbin.default.svc.cluster.local]
  ports: [{number: 8000, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.5}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: nginx, namespace: default}
spec:
  hosts: [my-nginx.default.svc.cluster.local]
  ports: [{number: 443, name: https, protocol: HTTPS}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.6}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: other, namespace: default}
spec:
  hosts: [other.default.svc.cluster.local]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.7}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: httpbin-gateway, namespace: default}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: [httpbin.example.com]
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [httpbin.example.com]
    tls: {mode: SIMPLE, credentialName: httpbin-credential}
  - port: {number: 443, name: https-mtls, protocol: HTTPS}
    hosts: [helloworld.example.com]
    tls: {mode: MUTUAL, credentialName: helloworld-credential}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: redirect, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8080, name: http-redirect, protocol: HTTP}
    hosts: ["*"]
    tls: {httpsRedirect: true}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: mygateway, namespace: default}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8443, name: https, protocol: HTTPS}
    hosts: [nginx.example.com]
    tls: {mode: PASSTHROUGH}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: egress, namespace: default}
spec:
  selector: {istio: egressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: [edition.cnn.com]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: httpbin, namespace: default}
spec:
  hosts: [httpbin.example.com]
  gateways: [httpbin-gateway]
  http:
  - match: [{uri: {prefix: /status}}, {uri: {prefix: /delay}}]
    route: [{destination: {host: httpbin, port: {number: 8000}}}]
  - match: [{uri: {prefix: /headers}, gateways: [mesh]}]
    route: [{destination: {host: other}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: helloworld, namespace: default}
spec:
  hosts: [helloworld.example.com]
  gateways: [default/httpbin-gateway]
  http:
  - route: [{destination: {host: httpbin}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: nginx, namespace: default}
spec:
  hosts: [nginx.example.com]
  gateways: [mygateway.default.svc.cluster.local]
  tls:
  - match: [{port: 8443, sniHosts: [nginx.example.com]}]
    route: [{destination: {host: my-nginx, port: {number: 443}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: mesh-only, namespace: default}
spec:
  hosts: [other.default.svc.cluster.local]
  http:
  - route: [{destination: {host: other}}]
`

func ingress() model.Workload {
	return model.Workload{ID: "router~10.0.0.9~ingress-1~istio-system.svc.cluster.local", Kind: model.KindRouter, Reads: router.Kind{}.Reads(),
		Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}}
}

func view(t *testing.T, yaml string, w model.Workload) *model.View {
	t.Helper()
	objs, errs := filestore.Decode("config.yaml", []byte(yaml))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	return model.NewView(model.Build(st.Snapshot()), w)
}

func hcmOf(t *testing.T, fc *listenerv3.FilterChain) *hcmv3.HttpConnectionManager {
	t.Helper()
	h := &hcmv3.HttpConnectionManager{}
	if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(h); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestIngressLayout(t *testing.T) {
	v := view(t, ingressYAML, ingress())
	var gws []string
	for _, g := range v.Gateways() {
		gws = append(gws, g.Key())
	}
	if want := []string{"default/httpbin-gateway", "default/mygateway", "istio-system/redirect"}; !slices.Equal(gws, want) {
		t.Fatalf("gateways %v, want %v", gws, want)
	}
	lds, err := router.Listeners(v)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range lds {
		names = append(names, l.GetName())
	}
	if want := []string{"0.0.0.0_80", "0.0.0.0_443", "0.0.0.0_8080", "0.0.0.0_8443"}; !slices.Equal(names, want) {
		t.Fatalf("listeners %v, want %v", names, want)
	}
	if h := hcmOf(t, lds[0].GetFilterChains()[0]); h.GetRds().GetRouteConfigName() != "http.80" || !h.GetUseRemoteAddress().GetValue() {
		t.Errorf("port 80: rds %q, use_remote_address %v", h.GetRds().GetRouteConfigName(), h.GetUseRemoteAddress())
	}
	// 443: SIMPLE then MUTUAL, each matched by SNI, certificates over SDS.
	fcs := lds[1].GetFilterChains()
	if len(fcs) != 2 || len(lds[1].GetListenerFilters()) != 1 {
		t.Fatalf("443: %d chains, %d listener filters", len(fcs), len(lds[1].GetListenerFilters()))
	}
	for i, want := range []struct {
		sni, route, secret, ca string
		require                bool
	}{
		{"httpbin.example.com", "https.443.https.httpbin-gateway.default", "kubernetes://httpbin-credential", "", false},
		{"helloworld.example.com", "https.443.https-mtls.httpbin-gateway.default", "kubernetes://helloworld-credential", "kubernetes://helloworld-credential-cacert", true},
	} {
		fc := fcs[i]
		if got := fc.GetFilterChainMatch().GetServerNames(); !slices.Equal(got, []string{want.sni}) {
			t.Errorf("443[%d]: server names %v", i, got)
		}
		if got := hcmOf(t, fc).GetRds().GetRouteConfigName(); got != want.route {
			t.Errorf("443[%d]: route %q, want %q", i, got, want.route)
		}
		ctx := &tlsv3.DownstreamTlsContext{}
		if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
			t.Fatal(err)
		}
		if got := ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0].GetName(); got != want.secret {
			t.Errorf("443[%d]: secret %q", i, got)
		}
		if got := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName(); got != want.ca {
			t.Errorf("443[%d]: CA %q, want %q", i, got, want.ca)
		}
		if ctx.GetRequireClientCertificate().GetValue() != want.require {
			t.Errorf("443[%d]: require client certificate %v", i, ctx.GetRequireClientCertificate())
		}
	}
	// 8443: passthrough by SNI to nginx's cluster.
	pt := lds[3].GetFilterChains()
	if len(pt) != 1 || !slices.Equal(pt[0].GetFilterChainMatch().GetServerNames(), []string{"nginx.example.com"}) {
		t.Fatalf("8443 chains %v", pt)
	}
	tp := &tcpproxyv3.TcpProxy{}
	if err := pt[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
		t.Fatal(err)
	}
	if got := tp.GetCluster(); got != "outbound|443||my-nginx.default.svc.cluster.local" {
		t.Errorf("passthrough to %q", got)
	}

	rds, err := router.Routes(v)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*routev3.RouteConfiguration{}
	for _, rc := range rds {
		byName[rc.GetName()] = rc
	}
	if len(rds) != 4 {
		t.Fatalf("%d route configurations: %v", len(rds), byName)
	}
	// http.80: httpbin.example.com with both prefixes; the match bound to
	// the mesh only is not the gateway's.
	vh := byName["http.80"].GetVirtualHosts()
	if len(vh) != 1 || vh[0].GetName() != "httpbin.example.com:80" || !slices.Equal(vh[0].GetDomains(), []string{"httpbin.example.com"}) || len(vh[0].GetRoutes()) != 2 {
		t.Fatalf("http.80 virtual hosts %v", vh)
	}
	if got := vh[0].GetRoutes()[0].GetRoute().GetCluster(); got != "outbound|8000||httpbin.default.svc.cluster.local" {
		t.Errorf("http.80 routes to %q", got)
	}
	// The redirect server: every host requires TLS, no VirtualService.
	rv := byName["http.8080"].GetVirtualHosts()
	if len(rv) != 1 || rv[0].GetRequireTls() != routev3.VirtualHost_ALL || rv[0].GetDomains()[0] != "*" {
		t.Errorf("http.8080 virtual hosts %v", rv)
	}
	// helloworld (no port: httpbin's one port).
	hw := byName["https.443.https-mtls.httpbin-gateway.default"].GetVirtualHosts()
	if len(hw) != 1 || hw[0].GetRoutes()[0].GetRoute().GetCluster() != "outbound|8000||httpbin.default.svc.cluster.local" {
		t.Errorf("helloworld virtual hosts %v", hw)
	}

	// Clusters: only the services the bound VirtualServices name (all of
	// their destinations, as Istio's gateway filter takes them: other's
	// route is the mesh's only), and BlackHole.
	cds, err := router.Clusters(v)
	if err != nil {
		t.Fatal(err)
	}
	var cnames []string
	for _, c := range cds {
		cnames = append(cnames, c.GetName())
	}
	if want := []string{sidecar.BlackHoleCluster, "outbound|8000||httpbin.default.svc.cluster.local", "outbound|443||my-nginx.default.svc.cluster.local", "outbound|80||other.default.svc.cluster.local"}; !slices.Equal(cnames, want) {
		t.Errorf("clusters %v, want %v", cnames, want)
	}
	eds, err := router.Endpoints(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(eds) != 3 {
		t.Errorf("%d load assignments, want 3", len(eds))
	}
	res := &sidecar.Resources{Listeners: lds, Routes: rds, Clusters: cds, Endpoints: eds}
	for _, m := range res.Messages() {
		if err := sidecar.Validate(m); err != nil {
			t.Errorf("invalid: %v", err)
		}
	}
}

// TestOtherRoutersAndNoGateway: a router whose labels no Gateway selects
// has no listeners; the egress gateway's router has its own.
func TestOtherRoutersAndNoGateway(t *testing.T) {
	w := ingress()
	w.Labels = map[string]string{"istio": "none"}
	if lds, err := router.Listeners(view(t, ingressYAML, w)); err != nil || len(lds) != 0 {
		t.Errorf("unselected router: %d listeners, %v", len(lds), err)
	}
	w.Labels = map[string]string{"istio": "egressgateway"}
	v := view(t, ingressYAML, w)
	rds, err := router.Routes(v)
	if err != nil || len(rds) != 1 || rds[0].GetVirtualHosts()[0].GetName() != "blackhole:80" {
		t.Errorf("egress router without VirtualService: %v, %v", rds, err)
	}
}

// TestUnservedServerFailsClosed: a server vmesh's routers do not serve
// (VM1018: a relative certificate path, caCertCredentialName beside a
// MUTUAL credential) gets no filter chain and asks for no credential; the
// router's other servers are served (a CRL file among them).
func TestUnservedServerFailsClosed(t *testing.T) {
	const yaml = `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: relative, protocol: HTTPS}
    hosts: [relative.example.com]
    tls: {mode: SIMPLE, serverCertificate: certs/cert.pem, privateKey: /etc/certs/key.pem}
  - port: {number: 443, name: crl, protocol: HTTPS}
    hosts: [crl.example.com]
    tls: {mode: MUTUAL, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem, caCertificates: /etc/certs/ca.pem, caCrl: /etc/certs/crl.pem}
  - port: {number: 443, name: cred, protocol: HTTPS}
    hosts: [cred.example.com]
    tls: {mode: SIMPLE, credentialName: cred}
  - port: {number: 443, name: ca-cred, protocol: HTTPS}
    hosts: [ca-cred.example.com]
    tls: {mode: MUTUAL, credentialName: other, caCertCredentialName: roots}
`
	v := view(t, yaml, ingress())
	lds, err := router.Listeners(v)
	if err != nil {
		t.Fatal(err)
	}
	var sni []string
	for _, l := range lds {
		for _, fc := range l.GetFilterChains() {
			sni = append(sni, fc.GetFilterChainMatch().GetServerNames()...)
		}
	}
	if want := []string{"crl.example.com", "cred.example.com"}; !slices.Equal(sni, want) {
		t.Errorf("chains for %v, want %v", sni, want)
	}
	var uses []string
	for _, u := range router.Credentials(v) {
		uses = append(uses, u.Secret)
	}
	if want := []string{"file-cert:/etc/certs/cert.pem~/etc/certs/key.pem", "file-root:/etc/certs/ca.pem", "cred"}; !slices.Equal(uses, want) {
		t.Errorf("credentials %v, want %v (unserved servers ask for none)", uses, want)
	}
}

// TestServerTLSAsIstio: each certificate source checks client
// certificates as Istio's BuildListenerTLSContext does. credentialNames:
// one "kubernetes://" secret per name, the first one's roots, the
// subjectAltNames (as SANs of any type), the pins and insecureSkipVerify,
// no CRL. Certificate files: subjectAltNames, the CRL file and
// insecureSkipVerify, no pins. ISTIO_MUTUAL: subjectAltNames and the CRL,
// no pins. SIMPLE with a credential: a static check of subjectAltNames
// only.
func TestServerTLSAsIstio(t *testing.T) {
	const yaml = `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: names, protocol: HTTPS}
    hosts: [names.example.com]
    tls: {mode: OPTIONAL_MUTUAL, credentialNames: [rsa, ecdsa], subjectAltNames: [client.example.com], verifyCertificateSpki: [c3BraQ==], verifyCertificateHash: [aa], insecureSkipVerify: true, caCrl: /etc/certs/ignored.crl}
  - port: {number: 443, name: files, protocol: HTTPS}
    hosts: [files.example.com]
    tls: {mode: MUTUAL, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem, caCertificates: /etc/certs/ca.pem, caCrl: /etc/certs/crl.pem, subjectAltNames: [client.example.com], verifyCertificateSpki: [c3BraQ==], insecureSkipVerify: true}
  - port: {number: 443, name: simple, protocol: HTTPS}
    hosts: [simple.example.com]
    tls: {mode: SIMPLE, credentialName: simple, subjectAltNames: [client.example.com], verifyCertificateHash: [aa]}
  - port: {number: 8443, name: mesh, protocol: HTTPS}
    hosts: [mesh.example.com]
    tls: {mode: ISTIO_MUTUAL, caCrl: /etc/certs/mesh.crl, subjectAltNames: [spiffe://cluster.local/ns/default/sa/client], verifyCertificateSpki: [c3BraQ==]}
`
	v := view(t, yaml, ingress())
	lds, err := router.Listeners(v)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		certs, roots, sans, spki, hash, crl string
		untrusted, static, require          bool
	}
	chains := map[string]got{}
	for _, l := range lds {
		for _, fc := range l.GetFilterChains() {
			ctx := &tlsv3.DownstreamTlsContext{}
			if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
				t.Fatal(err)
			}
			c := ctx.GetCommonTlsContext()
			var g got
			for _, sc := range c.GetTlsCertificateSdsSecretConfigs() {
				g.certs += sc.GetName() + " "
			}
			vc := c.GetValidationContext()
			g.static = vc != nil
			if cvc := c.GetCombinedValidationContext(); cvc != nil {
				g.roots = cvc.GetValidationContextSdsSecretConfig().GetName()
				vc = cvc.GetDefaultValidationContext()
			}
			types := map[string][]string{}
			var names []string
			for _, m := range vc.GetMatchTypedSubjectAltNames() {
				n := m.GetMatcher().GetExact()
				if types[n] == nil {
					names = append(names, n)
				}
				types[n] = append(types[n], m.GetSanType().String())
			}
			for _, n := range names {
				g.sans += n + "(" + strings.Join(types[n], ",") + ") "
			}
			g.spki, g.hash = strings.Join(vc.GetVerifyCertificateSpki(), ","), strings.Join(vc.GetVerifyCertificateHash(), ",")
			g.crl = vc.GetCrl().GetFilename()
			g.untrusted = vc.GetTrustChainVerification() == tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED
			g.require = ctx.GetRequireClientCertificate().GetValue()
			chains[fc.GetFilterChainMatch().GetServerNames()[0]] = g
		}
	}
	const anyType = "(DNS,URI,EMAIL,IP_ADDRESS) "
	want := map[string]got{
		"names.example.com": {certs: "kubernetes://rsa kubernetes://ecdsa ", roots: "kubernetes://rsa-cacert", sans: "client.example.com" + anyType,
			spki: "c3BraQ==", hash: "aa", untrusted: true},
		"files.example.com": {certs: "file-cert:/etc/certs/cert.pem~/etc/certs/key.pem ", roots: "file-root:/etc/certs/ca.pem", sans: "client.example.com" + anyType,
			crl: "/etc/certs/crl.pem", untrusted: true, require: true},
		"simple.example.com": {certs: "kubernetes://simple ", sans: "client.example.com" + anyType, static: true},
		"mesh.example.com": {certs: "default ", roots: "ROOTCA", sans: "spiffe://cluster.local/ns/default/sa/client" + anyType, crl: "/etc/certs/mesh.crl",
			require: true},
	}
	for k, w := range want {
		if chains[k] != w {
			t.Errorf("%s:\n%+v, want\n%+v", k, chains[k], w)
		}
	}
	var uses []string
	for _, u := range router.Credentials(v) {
		uses = append(uses, u.Secret+" "+u.Field+" "+u.Credential)
	}
	wantUses := []string{
		"rsa servers[0].tls.credentialNames[0] rsa",
		"ecdsa servers[0].tls.credentialNames[1] ecdsa",
		"rsa-cacert servers[0].tls.credentialNames[0] rsa",
		"file-cert:/etc/certs/cert.pem~/etc/certs/key.pem servers[1].tls.serverCertificate ",
		"file-root:/etc/certs/ca.pem servers[1].tls.caCertificates ",
		"simple servers[2].tls.credentialName simple",
	}
	if !slices.Equal(uses, wantUses) {
		t.Errorf("credentials\n%s\nwant\n%s", strings.Join(uses, "\n"), strings.Join(wantUses, "\n"))
	}
}

// TestFileCertificates: a server with certificate files on the router
// (serverCertificate, privateKey, caCertificates; tlsCertificates) asks
// the agent's SDS for them under Istio's names, exactly as Istio's
// gateways (ApplyToCommonTLSContext): "file-cert:<cert>~<key>" per
// certificate, for MUTUAL "file-root:<ca>" in a combined validation
// context, no validation context for SIMPLE, the agent's SDS cluster and
// no initial fetch wait; Credentials lists them with their fields.
func TestFileCertificates(t *testing.T) {
	const yaml = `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: simple, protocol: HTTPS}
    hosts: [simple.example.com]
    tls: {mode: SIMPLE, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem, caCertificates: /etc/certs/ignored.pem, subjectAltNames: [spiffe://x]}
  - port: {number: 443, name: mutual, protocol: HTTPS}
    hosts: [mutual.example.com]
    tls: {mode: MUTUAL, serverCertificate: /etc/certs/m.pem, privateKey: /etc/certs/m.key, caCertificates: /etc/certs/ca.pem}
  - port: {number: 443, name: two, protocol: HTTPS}
    hosts: [two.example.com]
    tls:
      mode: SIMPLE
      tlsCertificates:
      - {serverCertificate: /etc/certs/rsa.pem, privateKey: /etc/certs/rsa.key}
      - {serverCertificate: /etc/certs/ec.pem, privateKey: /etc/certs/ec.key}
`
	v := view(t, yaml, ingress())
	lds, err := router.Listeners(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(lds) != 1 || len(lds[0].GetFilterChains()) != 3 {
		t.Fatalf("listeners %v: want 0.0.0.0_443 with three chains", lds)
	}
	type got struct {
		certs, ca string
		require   bool
	}
	chains := map[string]got{}
	for _, fc := range lds[0].GetFilterChains() {
		ctx := &tlsv3.DownstreamTlsContext{}
		if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
			t.Fatal(err)
		}
		var g got
		for _, sc := range ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs() {
			if sc.GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != sidecar.SDSCluster || sc.GetSdsConfig().GetInitialFetchTimeout() != nil {
				t.Errorf("secret %s: not the agent's SDS without initial fetch wait: %v", sc.GetName(), sc)
			}
			g.certs += sc.GetName() + " "
		}
		if ctx.GetCommonTlsContext().GetValidationContext() != nil {
			t.Errorf("%v: a static validation context", fc.GetFilterChainMatch().GetServerNames())
		}
		if cvc := ctx.GetCommonTlsContext().GetCombinedValidationContext(); cvc != nil {
			g.ca = cvc.GetValidationContextSdsSecretConfig().GetName()
		}
		g.require = ctx.GetRequireClientCertificate().GetValue()
		chains[fc.GetFilterChainMatch().GetServerNames()[0]] = g
	}
	want := map[string]got{
		"simple.example.com": {certs: "file-cert:/etc/certs/cert.pem~/etc/certs/key.pem "},
		"mutual.example.com": {certs: "file-cert:/etc/certs/m.pem~/etc/certs/m.key ", ca: "file-root:/etc/certs/ca.pem", require: true},
		"two.example.com":    {certs: "file-cert:/etc/certs/rsa.pem~/etc/certs/rsa.key file-cert:/etc/certs/ec.pem~/etc/certs/ec.key "},
	}
	for k, w := range want {
		if chains[k] != w {
			t.Errorf("%s: %+v, want %+v", k, chains[k], w)
		}
	}
	var uses []string
	for _, u := range router.Credentials(v) {
		uses = append(uses, u.Secret+" "+u.Field+" "+u.Credential)
	}
	wantUses := []string{
		"file-cert:/etc/certs/cert.pem~/etc/certs/key.pem servers[0].tls.serverCertificate ",
		"file-cert:/etc/certs/m.pem~/etc/certs/m.key servers[1].tls.serverCertificate ",
		"file-root:/etc/certs/ca.pem servers[1].tls.caCertificates ",
		"file-cert:/etc/certs/rsa.pem~/etc/certs/rsa.key servers[2].tls.tlsCertificates[0] ",
		"file-cert:/etc/certs/ec.pem~/etc/certs/ec.key servers[2].tls.tlsCertificates[1] ",
	}
	if !slices.Equal(uses, wantUses) {
		t.Errorf("credentials\n%s\nwant\n%s", strings.Join(uses, "\n"), strings.Join(wantUses, "\n"))
	}
}

// TestRouterEnforcesAuthorizationPolicy: an AuthorizationPolicy selecting
// the router is enforced on its chains, as on a sidecar's inbound and on
// Istio's gateways: an RBAC HTTP filter before the router filter on HTTP
// and HTTPS chains, a network RBAC filter before tcp_proxy on passthrough
// chains. Without a policy there is none.
func TestRouterEnforcesAuthorizationPolicy(t *testing.T) {
	policy := `
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ingress-deny, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{from: [{source: {ipBlocks: [203.0.113.0/24]}}]}]
`
	count := func(v *model.View) (httpRBAC, netRBAC, chains int) {
		ls, err := router.Listeners(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			for _, fc := range l.GetFilterChains() {
				chains++
				for _, f := range fc.GetFilters() {
					if strings.HasPrefix(f.GetName(), "envoy.filters.network.rbac") {
						netRBAC++
					}
					if f.GetName() != sidecar.HCMFilterName {
						continue
					}
					hf := hcmOf(t, fc).GetHttpFilters()
					for i, h := range hf {
						if strings.HasPrefix(h.GetName(), "envoy.filters.http.rbac") {
							httpRBAC++
							if i >= len(hf)-1 || hf[len(hf)-1].GetName() != "envoy.filters.http.router" {
								t.Errorf("RBAC is not before the router filter: %v", hf)
							}
						}
					}
				}
			}
		}
		return httpRBAC, netRBAC, chains
	}
	if h, n, _ := count(view(t, ingressYAML, ingress())); h != 0 || n != 0 {
		t.Fatalf("without a policy: %d HTTP and %d network RBAC filters, want none", h, n)
	}
	h, n, chains := count(view(t, ingressYAML+policy, ingress()))
	if h == 0 || n == 0 || h+n != chains {
		t.Errorf("with a DENY policy: %d HTTP and %d network RBAC filters on %d chains, want one on every chain", h, n, chains)
	}
}

// TestCredentials: the credentials a router asks its agent for, each with
// the object and field naming it: the SIMPLE server's pair, the MUTUAL
// server's pair and roots, and a DestinationRule's TLS origination toward
// a routed service (MUTUAL in a subset's port-level settings: pair and
// roots); a DestinationRule of a service the router does not route to
// asks for nothing.
func TestCredentials(t *testing.T) {
	const drs = `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: httpbin, namespace: default}
spec:
  host: httpbin.default.svc.cluster.local
  trafficPolicy:
    portLevelSettings:
    - port: {number: 8000}
      tls: {mode: MUTUAL, credentialName: httpbin-client}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: unrouted, namespace: default}
spec:
  host: unrouted.default.svc.cluster.local
  trafficPolicy:
    tls: {mode: SIMPLE, credentialName: unrouted-ca}
`
	var got []string
	for _, u := range router.Credentials(view(t, ingressYAML+drs, ingress())) {
		got = append(got, u.Secret+" "+u.Object.String()+" "+u.Field)
	}
	want := []string{
		"httpbin-credential Gateway/default/httpbin-gateway servers[1].tls.credentialName",
		"helloworld-credential Gateway/default/httpbin-gateway servers[2].tls.credentialName",
		"helloworld-credential-cacert Gateway/default/httpbin-gateway servers[2].tls.credentialName",
		"httpbin-client DestinationRule/default/httpbin trafficPolicy.portLevelSettings[0].tls.credentialName",
		"httpbin-client-cacert DestinationRule/default/httpbin trafficPolicy.portLevelSettings[0].tls.credentialName",
	}
	if !slices.Equal(got, want) {
		t.Errorf("credentials\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestAutoPassthrough: an AUTO_PASSTHROUGH server routes by the SNI a mesh
// client's mTLS sends ("outbound_.<port>_.<subset>_.<host>") to SNI-DNAT
// clusters of the mesh services its hosts match (not the mesh-external
// ones), whose EDS holds only the endpoints that take mesh mTLS; the
// router's generation is consistent (every tcp_proxy's cluster exists).
func TestAutoPassthrough(t *testing.T) {
	const yaml = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: default}
spec:
  hosts: [api.default.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints:
  - {address: 10.0.0.5, serviceAccount: api}
  - {address: 10.0.0.6}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: default}
spec:
  hosts: [ext.example.com]
  location: MESH_EXTERNAL
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    hosts: ["*.local"]
    tls: {mode: AUTO_PASSTHROUGH}
`
	v := view(t, yaml, ingress())
	lds, err := router.Listeners(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(lds) != 1 || len(lds[0].GetFilterChains()) != 1 {
		t.Fatalf("listeners %v", lds)
	}
	const name = "outbound_.8080_._.api.default.svc.cluster.local"
	fc := lds[0].GetFilterChains()[0]
	if got := fc.GetFilterChainMatch().GetServerNames(); !slices.Equal(got, []string{name}) || !slices.Contains(fc.GetFilterChainMatch().GetApplicationProtocols(), "istio") {
		t.Errorf("chain match %v", fc.GetFilterChainMatch())
	}
	tp := &tcpproxyv3.TcpProxy{}
	if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(tp); err != nil || tp.GetCluster() != name {
		t.Errorf("tcp_proxy to %q (%v)", tp.GetCluster(), err)
	}
	cds, _ := router.Clusters(v)
	var dnat int
	for _, c := range cds {
		if strings.HasPrefix(c.GetName(), "outbound_.") {
			dnat++
			if c.GetName() != name || c.GetTransportSocket() != nil || len(c.GetTransportSocketMatches()) != 0 {
				t.Errorf("SNI-DNAT cluster %v", c)
			}
		}
	}
	if dnat != 1 {
		t.Errorf("%d SNI-DNAT clusters, want 1 (none for the mesh-external service)", dnat)
	}
	eds, _ := router.Endpoints(v)
	var addrs []string
	for _, la := range eds {
		if la.GetClusterName() != name {
			continue
		}
		for _, loc := range la.GetEndpoints() {
			for _, e := range loc.GetLbEndpoints() {
				addrs = append(addrs, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
	}
	if !slices.Equal(addrs, []string{"10.0.0.5"}) {
		t.Errorf("SNI-DNAT endpoints %v, want the mesh-mTLS one only", addrs)
	}
	objs, errs := filestore.Decode("config.yaml", []byte(yaml))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	st := store.NewStore()
	if err := st.Replace(store.Source{Name: "test", Class: store.ClassConfig}, objs); err != nil {
		t.Fatal(err)
	}
	if _, err := (router.Kind{}).Generate(model.Build(st.Snapshot()), ingress(), "k"); err != nil {
		t.Errorf("generation: %v", err)
	}
}

// TestTLSTerminatedTCP: a TLS server with SIMPLE credentialName in front of
// a tcp route terminates TLS (SNI match, the credential over SDS) and
// proxies to the route's cluster; the credential is one the router asks
// its agent for.
func TestTLSTerminatedTCP(t *testing.T) {
	const yaml = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.default.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 9000, name: tcp, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.5}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: echo, namespace: default}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 31400, name: tls, protocol: TLS}
    hosts: [echo.example.com]
    tls: {mode: SIMPLE, credentialName: echo-cred}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: default}
spec:
  hosts: ["*"]
  gateways: [echo]
  tcp: [{route: [{destination: {host: echo, port: {number: 9000}}}]}]
`
	v := view(t, yaml, ingress())
	lds, err := router.Listeners(v)
	if err != nil || len(lds) != 1 || len(lds[0].GetFilterChains()) != 1 {
		t.Fatalf("listeners %v (%v)", lds, err)
	}
	fc := lds[0].GetFilterChains()[0]
	ctx := &tlsv3.DownstreamTlsContext{}
	if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0].GetName(); got != "kubernetes://echo-cred" {
		t.Errorf("secret %q", got)
	}
	if !slices.Equal(fc.GetFilterChainMatch().GetServerNames(), []string{"echo.example.com"}) {
		t.Errorf("match %v", fc.GetFilterChainMatch())
	}
	tp := &tcpproxyv3.TcpProxy{}
	if err := fc.GetFilters()[len(fc.GetFilters())-1].GetTypedConfig().UnmarshalTo(tp); err != nil || tp.GetCluster() != "outbound|9000||echo.default.svc.cluster.local" {
		t.Errorf("tcp_proxy to %q (%v)", tp.GetCluster(), err)
	}
	if us := router.Credentials(v); len(us) != 1 || us[0].Secret != "echo-cred" || us[0].Field != "servers[0].tls.credentialName" {
		t.Errorf("credentials %+v", us)
	}
}

// TestPlainTCPServer: a TCP server without tls routes every connection by
// the first tcp route bound to it, as Istio's gateways do (the server was
// taken for a PASSTHROUGH one, the TLS mode's zero value, and had no
// chain).
func TestPlainTCPServer(t *testing.T) {
	const yaml = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo.default.svc.cluster.local]
  location: MESH_INTERNAL
  ports: [{number: 9000, name: tcp, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.5}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: echo, namespace: default}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 31400, name: tcp, protocol: TCP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: default}
spec:
  hosts: ["*"]
  gateways: [echo]
  tcp: [{route: [{destination: {host: echo, port: {number: 9000}}}]}]
`
	lds, err := router.Listeners(view(t, yaml, ingress()))
	if err != nil || len(lds) != 1 || len(lds[0].GetFilterChains()) != 1 {
		t.Fatalf("listeners %v (%v)", lds, err)
	}
	fc := lds[0].GetFilterChains()[0]
	if fc.GetTransportSocket() != nil || fc.GetFilterChainMatch() != nil {
		t.Errorf("chain %v: want plain TCP for every connection", fc)
	}
	tp := &tcpproxyv3.TcpProxy{}
	if err := fc.GetFilters()[len(fc.GetFilters())-1].GetTypedConfig().UnmarshalTo(tp); err != nil || tp.GetCluster() != "outbound|9000||echo.default.svc.cluster.local" {
		t.Errorf("tcp_proxy to %q (%v)", tp.GetCluster(), err)
	}
}
