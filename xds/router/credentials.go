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
// routes) with credentialName or credentialNames (SIMPLE: each
// "<credentialName>"; MUTUAL and OPTIONAL_MUTUAL: those and the first
// one's "<credentialName>-cacert", as credentialTLS) or with certificate
// files (fileUses: "file-cert:<cert>~<key>", "file-root:<ca>", which its
// agent serves when its directories allow them), then its clusters'
// (sidecar.ClientCredentials: TLS origination by a DestinationRule). A
// server the router does not serve (VM1018) asks for none.
func Credentials(v *model.View) []model.CredentialUse {
	var out []model.CredentialUse
	for _, gw := range v.Gateways() {
		key := gw.ObjectKey()
		for i, sv := range gw.Spec.GetServers() {
			s := server{gw: gw, spec: sv}
			t := sv.GetTls()
			if !(s.terminatesHTTPS() || s.terminatesTCP()) || t.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL || filecert.ServerProblem(t) != "" {
				continue
			}
			names, fields := t.GetCredentialNames(), []string{}
			for j := range names {
				fields = append(fields, fmt.Sprintf("servers[%d].tls.credentialNames[%d]", i, j))
			}
			if len(names) == 0 && t.GetCredentialName() != "" {
				names, fields = []string{t.GetCredentialName()}, []string{fmt.Sprintf("servers[%d].tls.credentialName", i)}
			}
			if len(names) == 0 {
				out = append(out, fileUses(gw, i, t)...)
				continue
			}
			for j, name := range names {
				out = append(out, model.CredentialUse{Secret: name, Credential: name, Object: key, Field: fields[j]})
			}
			if filecert.Validates(t) {
				out = append(out, model.CredentialUse{Secret: names[0] + model.CACertSuffix, Credential: names[0], Object: key, Field: fields[0]})
			}
		}
	}
	return append(out, sidecar.ClientCredentials(refs(v))...)
}

// fileUses lists the certificate files a terminating server without
// credentials asks its agent for, as fileTLS names them.
func fileUses(gw *model.Gateway, i int, t *networking.ServerTLSSettings) []model.CredentialUse {
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
