package router

import (
	"fmt"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// Credentials lists the file credentials a router's config asks for over
// SDS: each server it terminates TLS for (HTTPS, or TLS in front of tcp
// routes) with credentialName (SIMPLE:
// "<credentialName>"; MUTUAL and OPTIONAL_MUTUAL: that and
// "<credentialName>-cacert", as downstreamTLS), then its clusters'
// (sidecar.ClientCredentials: TLS origination by a DestinationRule).
func Credentials(v *model.View) []model.CredentialUse {
	var out []model.CredentialUse
	for _, gw := range v.Gateways() {
		key := gw.ObjectKey()
		for i, sv := range gw.Spec.GetServers() {
			s := server{gw: gw, spec: sv}
			t := sv.GetTls()
			name := t.GetCredentialName()
			if name == "" || !(s.terminatesHTTPS() || s.terminatesTCP()) {
				continue
			}
			field := fmt.Sprintf("servers[%d].tls.credentialName", i)
			switch t.GetMode() {
			case networking.ServerTLSSettings_SIMPLE:
				out = append(out, model.CredentialUse{Secret: name, Credential: name, Object: key, Field: field})
			case networking.ServerTLSSettings_MUTUAL, networking.ServerTLSSettings_OPTIONAL_MUTUAL:
				out = append(out, model.CredentialUse{Secret: name, Credential: name, Object: key, Field: field},
					model.CredentialUse{Secret: name + model.CACertSuffix, Credential: name, Object: key, Field: field})
			}
		}
	}
	return append(out, sidecar.ClientCredentials(refs(v))...)
}
