package router

import (
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/internal/filecert"
	"github.com/vmesh/vmesh/xds/sidecar"
)

// fileTLS fills a terminating server's TLS context from certificate files
// on the router, as Istio's ApplyToCommonTLSContext for a gateway: each
// certificate over the agent's SDS as "file-cert:<cert>~<key>" (no initial
// fetch wait: a file the agent does not serve fails the chain's handshakes,
// not the listener); for MUTUAL and OPTIONAL_MUTUAL the client's
// certificate checked against "file-root:<caCertificates>", else the mesh
// root (ROOTCA), with the server's subjectAltNames, CRL file and
// insecureSkipVerify (no certificate pins: Istio leaves them out here,
// VM1022); no validation context for SIMPLE. The agent reads the files on
// the VM (agents/sds) only in directories it allows.
func fileTLS(c *tlsv3.CommonTlsContext, t *networking.ServerTLSSettings) {
	certs, _ := filecert.Certs(t)
	for _, fc := range certs {
		c.TlsCertificateSdsSecretConfigs = append(c.TlsCertificateSdsSecretConfigs, sidecar.SDSSecret(filecert.CertName(fc.GetServerCertificate(), fc.GetPrivateKey()), false))
	}
	if !filecert.Validates(t) {
		return
	}
	ca := sidecar.SDSSecret(rootSecret, true)
	if t.GetCaCertificates() != "" {
		ca = sidecar.SDSSecret(filecert.RootName(t.GetCaCertificates()), false)
	}
	c.ValidationContextType = combined(clientValidation(t, false, true), ca)
}
