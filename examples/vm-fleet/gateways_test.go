package vmfleet

import (
	"strings"
	"testing"
)

// gateways is docs/gateways.md: a control plane, an ingress and an egress
// gateway VM and a sidecar VM. Its hosts run the Envoy stand-in
// (examples/vm-fleet/envoy) as their Envoy.
var gateways = guideDoc{
	path:  "docs/gateways.md",
	hosts: []string{"cp", "ingress", "egress", "app"},
	addrs: map[string]string{
		"cp":      "169.254.20.1",
		"ingress": "169.254.20.21",
		"egress":  "169.254.20.22",
		"app":     "169.254.20.23",
	},
	tools: []string{"openssl"},
	envoy: true,
}

// TestGatewaysGuide runs docs/gateways.md word for word, with the
// systemctl and Envoy stand-ins (the package comment; the guide says what
// the Envoy stand-in does and does not), and checks what it must show: the
// gateway VMs installed from the package and registered, each agent
// serving its file credential with none missing, and `vmesh proxy-config`
// showing the listeners, routes, endpoints and secrets the guide
// describes for the ingress gateway, the sidecar's route to the egress
// gateway over ISTIO_MUTUAL, and the egress gateway's TLS origination with
// its file credential.
func TestGatewaysGuide(t *testing.T) {
	outputs := runGuide(t, gateways)
	check := func(id string, wants ...string) {
		t.Helper()
		out, ok := outputs[id]
		if !ok {
			t.Fatalf("%s has no block {id=%s} on that host", gateways.path, id)
		}
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the output of block %s lacks %q:\n%s", gateways.path, id, w, out)
			}
		}
	}
	// The agent fetched the VM's mesh certificate and wrote Envoy's router bootstrap.
	check("ingress-install@ingress", "cert-chain.pem", "key.pem", "root-cert.pem", "envoy-bootstrap.json")
	check("ingress-ready@ingress", `"name": "web-credential"`, "\"requested\": [\n    \"kubernetes://web-credential\"\n  ]", `"missing": []`)
	check("egress-ready@egress", `"name": "partner-client"`, "\"requested\": [\n    \"partner-client\",\n    \"partner-client-cacert\"\n  ]", `"missing": []`)
	check("registered@cp", "router~169.254.20.21~ingress.edge~edge.svc.cluster.local", "router~169.254.20.22~egress.edge~edge.svc.cluster.local",
		"sidecar~169.254.20.23~app.shop~shop.svc.cluster.local")
	// Both Gateways are served once their VMs registered.
	if out := outputs["registered@cp"]; strings.Contains(out, "VM1008") || strings.Contains(out, "VM1009") {
		t.Errorf("vmesh status still warns that a Gateway is not served after its gateway VM registered:\n%s", out)
	}
	check("ingress-listeners@cp", "0.0.0.0_8443", "SNI=web.example.com", "Route: https.8443.https.web-gateway.edge", "0.0.0.0_8080", "Route: http.8080")
	check("ingress-routes@cp", "http.8080", "redirect to https", "https.8443.https.web-gateway.edge", "web.example.com", "outbound|8080||web.shop.mesh.internal",
		"169.254.20.23:8080")
	check("ingress-secrets@cp", "kubernetes://web-credential", "agent SDS")
	check("app-routes@cp", "api.partner.example", "outbound|8080|partner|egress.edge.mesh.internal", `"sni": "api.partner.example"`)
	check("egress-config@cp", "0.0.0.0_8080", "SNI=api.partner.example", "outbound|443||api.partner.example",
		"partner-client         certificate   agent SDS  1: cluster outbound|443||api.partner.example",
		"partner-client-cacert  trust bundle  agent SDS  1: cluster outbound|443||api.partner.example")
}
