package sidecar

import (
	"cmp"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/model"
)

// Istio's ALPN values: the client offers them on mesh mTLS, the inbound
// listener picks mesh mTLS connections by them.
var (
	mtlsALPN   = []string{"istio-peer-exchange", "istio"}
	mtlsH2ALPN = []string{"istio-peer-exchange", "istio", "h2"}
	inboundALP = []string{"istio-peer-exchange", "istio", "istio-http/1.0", "istio-http/1.1", "istio-h2"}
	// meshHTTPALPN and meshTCPALPN split them: what an Istio client offers
	// for HTTP, and for TCP.
	meshHTTPALPN = []string{"istio-http/1.0", "istio-http/1.1", "istio-h2"}
	meshTCPALPN  = []string{"istio-peer-exchange", "istio"}
)

// sdsSecret references a secret the agent serves over SDS on its Unix
// socket, reached through the bootstrap's static cluster SDSCluster.
// Envoy waits for the workload's own certificate and root (wait: no
// initial fetch timeout, as Istio's sidecars do) rather than bring up a
// listener or cluster without them; a DestinationRule's credentialName
// keeps Envoy's 15 s timeout, as Istio's does, so a secret that does not
// exist fails only the connections that need it.
func sdsSecret(name string, wait bool) *tlsv3.SdsSecretConfig {
	var timeout *durationpb.Duration
	if wait {
		timeout = durationpb.New(0)
	}
	return &tlsv3.SdsSecretConfig{
		Name: name,
		SdsConfig: &corev3.ConfigSource{
			ResourceApiVersion:  corev3.ApiVersion_V3,
			InitialFetchTimeout: timeout,
			ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
				ApiType:                   corev3.ApiConfigSource_GRPC,
				TransportApiVersion:       corev3.ApiVersion_V3,
				SetNodeOnFirstMessageOnly: true,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: SDSCluster},
				}}},
			}},
		},
	}
}

// anySANType are the SAN types Envoy matches a name of the deprecated
// match_subject_alt_names against, which Istio sets for a
// DestinationRule's subjectAltNames: DNS, URI, email and IP address.
var anySANType = []tlsv3.SubjectAltNameMatcher_SanType{
	tlsv3.SubjectAltNameMatcher_DNS, tlsv3.SubjectAltNameMatcher_URI, tlsv3.SubjectAltNameMatcher_EMAIL, tlsv3.SubjectAltNameMatcher_IP_ADDRESS,
}

// sanMatchers matches each of sans exactly: a SPIFFE ID (spiffe://...) as
// a URI SAN, the only SAN type it can be; any other name, such as the DNS
// name of an external server a DestinationRule's SIMPLE or MUTUAL TLS
// names, as a SAN of any type, as Istio's match_subject_alt_names does.
func sanMatchers(sans []string) []*tlsv3.SubjectAltNameMatcher {
	var out []*tlsv3.SubjectAltNameMatcher
	for _, s := range sans {
		types := anySANType
		if strings.HasPrefix(s, "spiffe://") {
			types = []tlsv3.SubjectAltNameMatcher_SanType{tlsv3.SubjectAltNameMatcher_URI}
		}
		for _, typ := range types {
			out = append(out, &tlsv3.SubjectAltNameMatcher{
				SanType: typ,
				Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}},
			})
		}
	}
	return out
}

// meshCommonTLS is the workload certificate (SDS "default") and the mesh
// root (SDS "ROOTCA") with optional SAN checks.
func meshCommonTLS(alpn []string, sans []string) *tlsv3.CommonTlsContext {
	return &tlsv3.CommonTlsContext{
		AlpnProtocols:                  alpn,
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsSecret(SecretDefault, true)},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanMatchers(sans)},
			ValidationContextSdsSecretConfig: sdsSecret(SecretRootCA, true),
		}},
	}
}

// istioMutual is the client side of mesh mTLS.
func istioMutual(sni string, sans []string, h2 bool) *corev3.TransportSocket {
	alpn := mtlsALPN
	if h2 {
		alpn = mtlsH2ALPN
	}
	common := meshCommonTLS(alpn, sans)
	common.TlsParams = clientTLSVersions()
	return tlsSocket(&tlsv3.UpstreamTlsContext{Sni: sni, CommonTlsContext: common})
}

// clientTLSVersions are the TLS versions Istio lets an upstream connection
// use: 1.2 to 1.3.
func clientTLSVersions() *tlsv3.TlsParameters {
	return &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2, TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3}
}

// inboundMTLS is the server side of mesh mTLS: a client certificate from
// the mesh root is required, and its SPIFFE ID must be in one of
// trustDomains (trustDomainMatchers), as Istio's inbound listeners check
// it: a workload of another mesh whose CA chains to the same root is no
// peer. TLS 1.2 to 1.3 with Istio's cipher suites (inboundCiphers), or
// what MeshConfig meshMTLS says (cipherSuites, minProtocolVersion), as
// Istio's BuildInboundTLS.
func inboundMTLS(http bool, mesh model.Mesh) *corev3.TransportSocket {
	var alpn []string
	if http {
		alpn = []string{"h2", "http/1.1"}
	}
	common := meshCommonTLS(alpn, nil)
	common.GetCombinedValidationContext().DefaultValidationContext.MatchTypedSubjectAltNames = trustDomainMatchers(mesh.ValidationTrustDomains())
	common.TlsParams = &tlsv3.TlsParameters{CipherSuites: inboundCiphers, TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2, TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3}
	if mesh.MTLSCipherSuites != "" {
		common.TlsParams.CipherSuites = strings.Split(mesh.MTLSCipherSuites, ",")
	}
	if mesh.MTLSMinTLS13 {
		common.TlsParams.TlsMinimumProtocolVersion = tlsv3.TlsParameters_TLSv1_3
	}
	return tlsSocket(&tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext:         common,
	})
}

// inboundCiphers are the TLS 1.2 cipher suites inbound mesh mTLS accepts,
// Istio's (authn utils SupportedCiphers, when MeshConfig meshMTLS sets
// none): ECDHE or RSA key exchange with AES-GCM only, none of the CBC and
// SHA-1 suites Envoy's default list still has. TLS 1.3's suites are all
// AEAD and not configurable.
var inboundCiphers = []string{
	"ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
	"AES256-GCM-SHA384", "AES128-GCM-SHA256",
}

// trustDomainMatchers match a SPIFFE ID in any of trustDomains: a URI SAN
// starting "spiffe://<trust domain>/", one matcher per trust domain (a
// certificate passes when any matches). Istio sets the same prefixes in
// the deprecated match_subject_alt_names, which Envoy matches against SANs
// of every type; a SPIFFE ID can only be a URI SAN, so vmesh matches URI
// SANs only, as it does for exact SPIFFE IDs (sanMatchers).
func trustDomainMatchers(trustDomains []string) []*tlsv3.SubjectAltNameMatcher {
	out := make([]*tlsv3.SubjectAltNameMatcher, 0, len(trustDomains))
	for _, td := range trustDomains {
		out = append(out, &tlsv3.SubjectAltNameMatcher{
			SanType: tlsv3.SubjectAltNameMatcher_URI,
			Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://" + td + "/"}},
		})
	}
	return out
}

// clientTLS translates a DestinationRule's TLS settings for a cluster; nil
// means plaintext. ISTIO_MUTUAL uses the SDS secrets; SIMPLE and MUTUAL
// use the files named in the rule (the system's roots when it names no
// caCertificates), or the SDS secret credentialName (and
// "<credentialName>-cacert" for the root). h2: the cluster speaks HTTP/2
// (ISTIO_MUTUAL then offers ALPN h2 too).
func clientTLS(t *networking.ClientTLSSettings, sni string, sans []string, h2 bool) *corev3.TransportSocket {
	switch t.GetMode() {
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		if len(t.GetSubjectAltNames()) > 0 {
			sans = t.GetSubjectAltNames()
		}
		if t.GetSni() != "" {
			sni = t.GetSni()
		}
		return istioMutual(sni, sans, h2)
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
	default:
		return nil
	}
	ctx := &tlsv3.UpstreamTlsContext{Sni: t.GetSni(), CommonTlsContext: &tlsv3.CommonTlsContext{TlsParams: clientTLSVersions()}}
	cvc := &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanMatchers(t.GetSubjectAltNames())}
	if t.GetInsecureSkipVerify().GetValue() {
		cvc = nil
	}
	switch {
	case t.GetCredentialName() != "":
		if t.GetMode() == networking.ClientTLSSettings_MUTUAL {
			ctx.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{sdsSecret(t.GetCredentialName(), false)}
		}
		if cvc != nil {
			ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         cvc,
				ValidationContextSdsSecretConfig: sdsSecret(t.GetCredentialName()+"-cacert", false),
			}}
		}
	default:
		if t.GetMode() == networking.ClientTLSSettings_MUTUAL && t.GetClientCertificate() != "" {
			ctx.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{
				CertificateChain: fileSource(t.GetClientCertificate()),
				PrivateKey:       fileSource(t.GetPrivateKey()),
			}}
		}
		if cvc != nil {
			// Without caCertificates the server is verified against the
			// system's roots, as Istio does (its file-root:system), never
			// not at all; insecureSkipVerify alone turns verification off.
			cvc.TrustedCa = fileSource(cmp.Or(t.GetCaCertificates(), SystemCABundle))
			ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: cvc}
		}
	}
	return tlsSocket(ctx)
}

// SystemCABundle is the system's trust store on Debian and its derivatives
// (ca-certificates): what a DestinationRule's SIMPLE or MUTUAL TLS without
// caCertificates verifies the server against.
const SystemCABundle = "/etc/ssl/certs/ca-certificates.crt"

func fileSource(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}

func tlsSocket(ctx proto.Message) *corev3.TransportSocket {
	return &corev3.TransportSocket{Name: tlsTransport, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
}
