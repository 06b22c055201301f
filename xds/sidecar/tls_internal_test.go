package sidecar

import (
	"slices"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	networking "istio.io/api/networking/v1alpha3"
)

// A DestinationRule's subjectAltNames are matched as Istio's
// match_subject_alt_names matches them: a name as a SAN of any type (an
// external server names itself by DNS SAN), for SIMPLE, MUTUAL (files or
// credentialName) and ISTIO_MUTUAL alike; a SPIFFE ID as a URI SAN.
func TestClientTLSSubjectAltNameTypes(t *testing.T) {
	anyType := []string{"DNS", "URI", "EMAIL", "IP_ADDRESS"}
	for _, tc := range []struct {
		name string
		tls  *networking.ClientTLSSettings
		want map[string][]string
	}{
		{"SIMPLE, DNS name", &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, SubjectAltNames: []string{"api.example.com"}},
			map[string][]string{"api.example.com": anyType}},
		{"MUTUAL files, DNS name and IP", &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_MUTUAL, ClientCertificate: "/c.pem", PrivateKey: "/k.pem",
			SubjectAltNames: []string{"db.example.com", "192.0.2.7"}},
			map[string][]string{"db.example.com": anyType, "192.0.2.7": anyType}},
		{"MUTUAL credentialName", &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_MUTUAL, CredentialName: "client",
			SubjectAltNames: []string{"api.example.com"}},
			map[string][]string{"api.example.com": anyType}},
		{"SIMPLE, SPIFFE ID", &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, SubjectAltNames: []string{"spiffe://example.org/ns/a/sa/b"}},
			map[string][]string{"spiffe://example.org/ns/a/sa/b": {"URI"}}},
		{"ISTIO_MUTUAL, rule's names", &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL,
			SubjectAltNames: []string{"spiffe://cluster.local/ns/shop/sa/db", "db.shop"}},
			map[string][]string{"spiffe://cluster.local/ns/shop/sa/db": {"URI"}, "db.shop": anyType}},
	} {
		ts := clientTLS(tc.tls, "sni.example", []string{"spiffe://cluster.local/ns/default/sa/x"}, false)
		ctx := &tlsv3.UpstreamTlsContext{}
		if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		vc := ctx.GetCommonTlsContext().GetValidationContext()
		if c := ctx.GetCommonTlsContext().GetCombinedValidationContext(); c != nil {
			vc = c.GetDefaultValidationContext()
		}
		got := map[string][]string{}
		for _, m := range vc.GetMatchTypedSubjectAltNames() {
			n := m.GetMatcher().GetExact()
			got[n] = append(got[n], m.GetSanType().String())
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: matchers for %v, want %v", tc.name, got, tc.want)
		}
		for n, types := range tc.want {
			if !slices.Equal(got[n], types) {
				t.Errorf("%s: %q matched as %v SAN, want %v", tc.name, n, got[n], types)
			}
		}
	}
}
