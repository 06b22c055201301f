package testenv

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
)

// EnvoyServerTLS returns the crypto/tls server configuration that an Envoy
// DownstreamTlsContext means, its SDS secrets looked up by name in secrets
// (as an agent serves them), so that a test can make real handshakes
// against what a generator produced where no Envoy binary can run. It
// models what Envoy's default certificate validator does with the fields
// vmesh generates:
//
//   - the server certificates: each tls_certificate_sds_secret_configs
//     secret's (or inline tls_certificates) chain and key;
//   - the validation context: the static one, or a combined one whose SDS
//     secret is merged over its default as Envoy merges them (the default,
//     then the SDS one's fields: proto merge);
//   - require_client_certificate: a client without a certificate fails;
//     with a validation context but not required, a certificate the client
//     presents is still verified;
//   - trusted_ca: the client's chain must verify to one of its roots, for
//     client authentication (a leaf with extended key usages must list
//     clientAuth, as BoringSSL's ssl_client purpose);
//   - crl: every certificate of the verified chain (the trust anchor
//     included, checked against its own CRL) needs a CRL of its issuer,
//     not expired, and must not be listed in it (BoringSSL's CRL_CHECK and
//     CRL_CHECK_ALL); only the leaf with only_verify_leaf_cert_crl;
//   - match_typed_subject_alt_names (and the deprecated
//     match_subject_alt_names, every SAN type): a SAN of the matcher's
//     type must match one of them (exact, prefix, suffix, contains, safe
//     regex, ignore_case);
//   - the TLS version bounds, the TLS 1.2 cipher suites and the ALPN list.
//
// A field it does not model (pins, ACCEPT_UNTRUSTED, a custom validator,
// …) is an error, so a test never passes on a check it skipped.
func EnvoyServerTLS(ctx *tlsv3.DownstreamTlsContext, secrets map[string]*tlsv3.Secret) (*tls.Config, error) {
	common := ctx.GetCommonTlsContext()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13, NextProtos: common.GetAlpnProtocols()}
	if v, ok := tlsVersions[common.GetTlsParams().GetTlsMinimumProtocolVersion()]; ok {
		cfg.MinVersion = v
	}
	if v, ok := tlsVersions[common.GetTlsParams().GetTlsMaximumProtocolVersion()]; ok {
		cfg.MaxVersion = v
	}
	for _, name := range common.GetTlsParams().GetCipherSuites() {
		id, ok := cipherSuites[name]
		if !ok {
			return nil, fmt.Errorf("envoy tls: cipher suite %q is not modelled", name)
		}
		cfg.CipherSuites = append(cfg.CipherSuites, id)
	}
	certs := common.GetTlsCertificates()
	for _, sc := range common.GetTlsCertificateSdsSecretConfigs() {
		s := secrets[sc.GetName()]
		if s.GetTlsCertificate() == nil {
			return nil, fmt.Errorf("envoy tls: no certificate secret %q", sc.GetName())
		}
		certs = append(certs, s.GetTlsCertificate())
	}
	for _, c := range certs {
		chain, err := dataSource(c.GetCertificateChain())
		if err != nil {
			return nil, err
		}
		key, err := dataSource(c.GetPrivateKey())
		if err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(chain, key)
		if err != nil {
			return nil, fmt.Errorf("envoy tls: certificate: %w", err)
		}
		cfg.Certificates = append(cfg.Certificates, pair)
	}
	if len(cfg.Certificates) == 0 {
		return nil, errors.New("envoy tls: the context has no server certificate")
	}
	vc := common.GetValidationContext()
	if cvc := common.GetCombinedValidationContext(); cvc != nil {
		name := cvc.GetValidationContextSdsSecretConfig().GetName()
		s := secrets[name]
		if s.GetValidationContext() == nil {
			return nil, fmt.Errorf("envoy tls: no validation context secret %q", name)
		}
		vc = proto.Clone(cvc.GetDefaultValidationContext()).(*tlsv3.CertificateValidationContext)
		if vc == nil {
			vc = &tlsv3.CertificateValidationContext{}
		}
		proto.Merge(vc, s.GetValidationContext())
	} else if common.GetValidationContextSdsSecretConfig() != nil {
		name := common.GetValidationContextSdsSecretConfig().GetName()
		if vc = secrets[name].GetValidationContext(); vc == nil {
			return nil, fmt.Errorf("envoy tls: no validation context secret %q", name)
		}
	}
	require := ctx.GetRequireClientCertificate().GetValue()
	if vc == nil {
		if require {
			return nil, errors.New("envoy tls: require_client_certificate without a validation context")
		}
		return cfg, nil
	}
	v, err := newEnvoyVerifier(vc)
	if err != nil {
		return nil, err
	}
	cfg.ClientAuth = tls.RequestClientCert
	if require {
		cfg.ClientAuth = tls.RequireAnyClientCert
	}
	cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return nil // not required: RequireAnyClientCert refused it otherwise
		}
		return v.verify(raw, time.Now())
	}
	return cfg, nil
}

// cipherSuites maps the OpenSSL names Envoy's cipher_suites take to Go's
// TLS 1.2 suites (Envoy applies the list to TLS 1.2 and below; TLS 1.3's
// suites are fixed in both).
var cipherSuites = map[string]uint16{
	"ECDHE-ECDSA-AES256-GCM-SHA384": tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-RSA-AES256-GCM-SHA384":   tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-ECDSA-AES128-GCM-SHA256": tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-RSA-AES128-GCM-SHA256":   tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	"AES256-GCM-SHA384":             tls.TLS_RSA_WITH_AES_256_GCM_SHA384,
	"AES128-GCM-SHA256":             tls.TLS_RSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-ECDSA-AES128-SHA":        tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
	"ECDHE-RSA-AES128-SHA":          tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
	"ECDHE-ECDSA-CHACHA20-POLY1305": tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	"ECDHE-RSA-CHACHA20-POLY1305":   tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

var tlsVersions = map[tlsv3.TlsParameters_TlsProtocol]uint16{
	tlsv3.TlsParameters_TLSv1_2: tls.VersionTLS12, tlsv3.TlsParameters_TLSv1_3: tls.VersionTLS13,
}

// envoyVerifier checks a client chain as Envoy's validation context says.
type envoyVerifier struct {
	roots    *x509.CertPool
	crls     []*x509.RevocationList
	leafOnly bool
	sans     []sanMatcher
}

type sanMatcher struct {
	types []tlsv3.SubjectAltNameMatcher_SanType
	match func(string) bool
}

var anySAN = []tlsv3.SubjectAltNameMatcher_SanType{
	tlsv3.SubjectAltNameMatcher_DNS, tlsv3.SubjectAltNameMatcher_URI, tlsv3.SubjectAltNameMatcher_EMAIL, tlsv3.SubjectAltNameMatcher_IP_ADDRESS,
}

func newEnvoyVerifier(vc *tlsv3.CertificateValidationContext) (*envoyVerifier, error) {
	switch {
	case len(vc.GetVerifyCertificateSpki()) > 0, len(vc.GetVerifyCertificateHash()) > 0:
		return nil, errors.New("envoy tls: certificate pins are not modelled")
	case vc.GetTrustChainVerification() != tlsv3.CertificateValidationContext_VERIFY_TRUST_CHAIN:
		return nil, errors.New("envoy tls: trust_chain_verification other than VERIFY_TRUST_CHAIN is not modelled")
	case vc.GetCustomValidatorConfig() != nil, vc.GetAllowExpiredCertificate(), vc.GetMaxVerifyDepth() != nil,
		vc.GetCaCertificateProviderInstance() != nil, vc.GetWatchedDirectory() != nil, vc.GetSystemRootCerts() != nil:
		return nil, errors.New("envoy tls: a validation context field that is not modelled is set")
	}
	if vc.GetTrustedCa() == nil {
		return nil, errors.New("envoy tls: a validation context without trusted_ca accepts any certificate: not modelled")
	}
	ca, err := dataSource(vc.GetTrustedCa())
	if err != nil {
		return nil, err
	}
	v := &envoyVerifier{roots: x509.NewCertPool(), leafOnly: vc.GetOnlyVerifyLeafCertCrl()}
	if !v.roots.AppendCertsFromPEM(ca) {
		return nil, errors.New("envoy tls: trusted_ca holds no certificate")
	}
	if vc.GetCrl() != nil {
		b, err := dataSource(vc.GetCrl())
		if err != nil {
			return nil, err
		}
		for len(bytes.TrimSpace(b)) > 0 {
			var blk *pem.Block
			blk, b = pem.Decode(b)
			if blk == nil {
				return nil, errors.New("envoy tls: crl is not PEM")
			}
			if blk.Type != "X509 CRL" {
				continue
			}
			l, err := x509.ParseRevocationList(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("envoy tls: crl: %w", err)
			}
			v.crls = append(v.crls, l)
		}
		if len(v.crls) == 0 {
			return nil, errors.New("envoy tls: crl holds no CRL")
		}
	}
	//lint:ignore SA1019 the deprecated field is modelled as Envoy reads it (Istio sets it)
	for _, m := range vc.GetMatchSubjectAltNames() {
		f, err := stringMatcher(m)
		if err != nil {
			return nil, err
		}
		v.sans = append(v.sans, sanMatcher{types: anySAN, match: f})
	}
	for _, m := range vc.GetMatchTypedSubjectAltNames() {
		if m.GetOid() != "" || m.GetSanType() == tlsv3.SubjectAltNameMatcher_OTHER_NAME {
			return nil, errors.New("envoy tls: OTHER_NAME SAN matchers are not modelled")
		}
		f, err := stringMatcher(m.GetMatcher())
		if err != nil {
			return nil, err
		}
		v.sans = append(v.sans, sanMatcher{types: []tlsv3.SubjectAltNameMatcher_SanType{m.GetSanType()}, match: f})
	}
	return v, nil
}

func (v *envoyVerifier) verify(raw [][]byte, now time.Time) error {
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return fmt.Errorf("envoy tls: client certificate: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, err := certs[0].Verify(x509.VerifyOptions{Roots: v.roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return fmt.Errorf("envoy tls: client certificate does not verify: %w", err)
	}
	if len(v.crls) > 0 {
		if err := v.checkCRLs(chains[0], now); err != nil {
			return err
		}
	}
	if len(v.sans) == 0 {
		return nil
	}
	leaf := certs[0]
	var sans []struct {
		typ tlsv3.SubjectAltNameMatcher_SanType
		v   string
	}
	add := func(typ tlsv3.SubjectAltNameMatcher_SanType, vs ...string) {
		for _, s := range vs {
			sans = append(sans, struct {
				typ tlsv3.SubjectAltNameMatcher_SanType
				v   string
			}{typ, s})
		}
	}
	add(tlsv3.SubjectAltNameMatcher_DNS, leaf.DNSNames...)
	add(tlsv3.SubjectAltNameMatcher_EMAIL, leaf.EmailAddresses...)
	for _, u := range leaf.URIs {
		add(tlsv3.SubjectAltNameMatcher_URI, u.String())
	}
	for _, ip := range leaf.IPAddresses {
		add(tlsv3.SubjectAltNameMatcher_IP_ADDRESS, ip.String())
	}
	for _, m := range v.sans {
		for _, s := range sans {
			for _, t := range m.types {
				if t == s.typ && m.match(s.v) {
					return nil
				}
			}
		}
	}
	return errors.New("envoy tls: no subject alt name of the client certificate matches")
}

// checkCRLs checks chain (leaf first, trust anchor last) against the CRLs.
func (v *envoyVerifier) checkCRLs(chain []*x509.Certificate, now time.Time) error {
	n := len(chain)
	if v.leafOnly {
		n = 1
	}
	for i := range n {
		c := chain[i]
		issuer := c
		if i+1 < len(chain) {
			issuer = chain[i+1]
		}
		var crl *x509.RevocationList
		for _, l := range v.crls {
			if bytes.Equal(l.RawIssuer, issuer.RawSubject) && l.CheckSignatureFrom(issuer) == nil {
				crl = l
			}
		}
		if crl == nil {
			return fmt.Errorf("envoy tls: no CRL of %s, the issuer of %s in the chain (a CRL is given for the chain)", issuer.Subject, c.Subject)
		}
		if !crl.NextUpdate.IsZero() && now.After(crl.NextUpdate) {
			return fmt.Errorf("envoy tls: the CRL of %s has expired", issuer.Subject)
		}
		for _, r := range crl.RevokedCertificateEntries {
			if r.SerialNumber.Cmp(c.SerialNumber) == 0 {
				return fmt.Errorf("envoy tls: certificate %s (serial %x) is revoked", c.Subject, c.SerialNumber)
			}
		}
	}
	return nil
}

func stringMatcher(m *matcherv3.StringMatcher) (func(string) bool, error) {
	fold := func(s string) string { return s }
	if m.GetIgnoreCase() {
		fold = strings.ToLower
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		want := fold(p.Exact)
		return func(s string) bool { return fold(s) == want }, nil
	case *matcherv3.StringMatcher_Prefix:
		want := fold(p.Prefix)
		return func(s string) bool { return strings.HasPrefix(fold(s), want) }, nil
	case *matcherv3.StringMatcher_Suffix:
		want := fold(p.Suffix)
		return func(s string) bool { return strings.HasSuffix(fold(s), want) }, nil
	case *matcherv3.StringMatcher_Contains:
		want := fold(p.Contains)
		return func(s string) bool { return strings.Contains(fold(s), want) }, nil
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil {
			return nil, fmt.Errorf("envoy tls: SAN regex: %w", err)
		}
		return re.MatchString, nil
	}
	return nil, fmt.Errorf("envoy tls: SAN matcher %v is not modelled", m)
}

// dataSource reads an Envoy DataSource: inline bytes or string, or a file.
func dataSource(d *corev3.DataSource) ([]byte, error) {
	switch s := d.GetSpecifier().(type) {
	case *corev3.DataSource_InlineBytes:
		return s.InlineBytes, nil
	case *corev3.DataSource_InlineString:
		return []byte(s.InlineString), nil
	case *corev3.DataSource_Filename:
		b, err := os.ReadFile(s.Filename)
		if err != nil {
			return nil, fmt.Errorf("envoy tls: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("envoy tls: data source %v is not modelled", d)
}

// Handshake makes one TLS connection over loopback from a client set up
// with client to a server set up with server, and returns the server's
// verdict: nil when its handshake succeeded (the client then reads a byte
// the server writes), else the server's handshake error. The test fails if
// the client's own VerifyConnection refuses the server: that is not the
// server refusing the client.
func Handshake(t testing.TB, server, client *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	result := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			result <- err
			return
		}
		defer c.Close()
		err = c.(*tls.Conn).Handshake()
		if err == nil {
			_, err = c.Write([]byte{1})
		}
		result <- err
	}()
	client = client.Clone()
	var clientRefused error
	if verify := client.VerifyConnection; verify != nil {
		client.VerifyConnection = func(cs tls.ConnectionState) error {
			clientRefused = verify(cs)
			return clientRefused
		}
	}
	conn, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		_, _ = conn.Read(make([]byte, 1)) // the byte, or the server's alert
		conn.Close()
	}
	serverErr := <-result
	if clientRefused != nil {
		t.Fatalf("the client refused the server: %v", clientRefused)
	}
	return serverErr
}

// VerifyServerAgainst is a client's VerifyConnection that verifies the
// server's chain against roots and nothing else: mesh certificates name
// workloads by SPIFFE ID, not host name.
func VerifyServerAgainst(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
		return err
	}
}
