// Package security turns the model's security decisions into xDS: TLS
// contexts that name grpc-go certificate-provider instances (proxyless gRPC);
// the one AuthorizationPolicy translation (Rules) behind the HTTP RBAC
// filters of both proxy kinds and the network RBAC filters of Envoy
// sidecars' TCP ports; and, for Envoy sidecars only (Envoy.HTTPFilters,
// Envoy.NetworkFilters), RequestAuthentication's jwt_authn filter
// (JWTFilter), requestPrincipals and request.auth.* as metadata matchers,
// AUDIT (RBAC LOG) and CUSTOM (ext_authz to a MeshConfig extension
// provider). Package jwks fetches the key sets jwt_authn carries inline.
package security

//lint:file-ignore SA1019 match_subject_alt_names is what grpc-go reads and the golden files hold

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/vmesh/vmesh/model"
	"github.com/vmesh/vmesh/xds/translate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// CertProviderInstance is the certificate-provider instance that mesh TLS
// contexts name: the application's xDS bootstrap must define it under
// certificate_providers, as a file_watcher with certificate_file,
// private_key_file and ca_certificate_file (the files caclient.WriteFiles
// and the vmesh agent write). It is Istio's name for the same thing.
const CertProviderInstance = "default"

// Certificate names passed to the provider. file_watcher ignores them; they
// say which half of the instance a context uses.
const (
	IdentityCertName = "default"
	RootCertName     = "ROOTCA"
)

// TransportSocketName is the name of TLS transport sockets (grpc-go accepts
// only this one).
const TransportSocketName = "envoy.transport_sockets.tls"

func providerInstance(instance, cert string) *tlsv3.CertificateProviderPluginInstance {
	return &tlsv3.CertificateProviderPluginInstance{InstanceName: instance, CertificateName: cert}
}

// GRPCUpstreamTLS returns the transport socket of a proxyless gRPC client's
// cluster for t, or nil for plaintext. ISTIO_MUTUAL presents the identity of
// instance CertProviderInstance and verifies the server against its roots
// and, when t lists any, the server's SANs (exact match). SIMPLE and MUTUAL
// use the DestinationRule's credentialName as the certificate-provider
// instance name (the bootstrap must define it; CertProviderInstance when
// empty): grpc-go reads certificates only through provider instances, so
// the rule's file paths are not used.
func GRPCUpstreamTLS(t model.UpstreamTLS) *corev3.TransportSocket {
	if t.Mode == model.TLSDisable {
		return nil
	}
	instance := CertProviderInstance
	if n := t.Settings.GetCredentialName(); n != "" && t.Mode != model.TLSIstioMutual {
		instance = n
	}
	vc := &tlsv3.CertificateValidationContext{CaCertificateProviderInstance: providerInstance(instance, RootCertName)}
	for _, san := range t.SubjectAltNames {
		vc.MatchSubjectAltNames = append(vc.MatchSubjectAltNames, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}})
	}
	common := &tlsv3.CommonTlsContext{ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}}
	if t.Mode != model.TLSSimple {
		common.TlsCertificateProviderInstance = providerInstance(instance, IdentityCertName)
	}
	return transportSocket(&tlsv3.UpstreamTlsContext{CommonTlsContext: common, Sni: t.SNI})
}

// GRPCDownstreamMTLS returns the transport socket of a proxyless gRPC
// server's filter chain in STRICT mode: it presents the identity of
// CertProviderInstance and requires a client certificate that chains to the
// instance's roots.
func GRPCDownstreamMTLS() *corev3.TransportSocket {
	return transportSocket(&tlsv3.DownstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateProviderInstance: providerInstance(CertProviderInstance, IdentityCertName),
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				CaCertificateProviderInstance: providerInstance(CertProviderInstance, RootCertName),
			}},
		},
		RequireClientCertificate: wrapperspb.Bool(true),
	})
}

func transportSocket(m proto.Message) *corev3.TransportSocket {
	return &corev3.TransportSocket{Name: TransportSocketName, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: translate.MustAny(m)}}
}
