package router

import (
	"fmt"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/filecert"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// Credentials lists the file credentials a router's config asks for over
// SDS: each server it terminates TLS for (HTTPS, or TLS in front of tcp
// routes) with credentialName (SIMPLE:
// "<credentialName>"; MUTUAL and OPTIONAL_MUTUAL: that and
// "<credentialName>-cacert", as downstreamTLS) or with certificate files
// (fileUses: "file-cert:<cert>~<key>", "file-root:<ca>", which its agent
// serves when its directories allow them), then its clusters'
// (sidecar.ClientCredentials: TLS origination by a DestinationRule).
func Credentials(v *model.View) []model.CredentialUse {
	var out []model.CredentialUse
	for _, gw := range v.Gateways() {
		key := gw.ObjectKey()
		for i, sv := range gw.Spec.GetServers() {
			s := server{gw: gw, spec: sv}
			t := sv.GetTls()
			name := t.GetCredentialName()
			if !(s.terminatesHTTPS() || s.terminatesTCP()) || t.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL {
				continue
			}
			if name == "" {
				out = append(out, fileUses(gw, i, t)...)
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

// fileUses lists the certificate files a terminating server without
// credentialName asks its agent for, as downstreamTLS names them: none
// when the server is not served (filecert.ServerProblem, VM1018).
func fileUses(gw *model.Gateway, i int, t *networking.ServerTLSSettings) []model.CredentialUse {
	if filecert.ServerProblem(t) != "" {
		return nil
	}
	key := gw.ObjectKey()
	var out []model.CredentialUse
	certs, fields := filecert.Certs(t)
	for j, c := range certs {
		field := fmt.Sprintf("servers[%d].tls.serverCertificate", i)
		if fields[j] != "" {
			field = fmt.Sprintf("servers[%d].tls.%s", i, fields[j])
		}
		out = append(out, model.CredentialUse{Secret: filecert.CertName(c.GetServerCertificate(), c.GetPrivateKey()), Object: key, Field: field})
	}
	if filecert.Validates(t) && t.GetCaCertificates() != "" {
		out = append(out, model.CredentialUse{Secret: filecert.RootName(t.GetCaCertificates()), Object: key, Field: fmt.Sprintf("servers[%d].tls.caCertificates", i)})
	}
	return out
}
