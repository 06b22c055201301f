package mcpsource

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/store"
)

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

// TLSSettings builds the transport credentials of a configSources entry's
// tlsSettings (Istio's ClientTLSSettings), as far as they apply to a gRPC
// client: mode DISABLE (or none) is plaintext; SIMPLE verifies the server
// with caCertificates (else the system roots), sni and subjectAltNames;
// MUTUAL adds clientCertificate and privateKey. What does not apply is
// returned as warnings (VM1011) naming field: ISTIO_MUTUAL (vmesh holds
// no istiod-issued identity for itself), credentialName,
// insecureSkipVerify, caCrl.
func TLSSettings(field string, ts *networking.ClientTLSSettings) (credentials.TransportCredentials, []store.ConfigError, error) {
	var warns []store.ConfigError
	warn := func(f, msg string) {
		warns = append(warns, store.ConfigError{Field: field + "." + f, Severity: store.SeverityWarning, Code: store.CodeMeshConfigNotApplied, Message: msg})
	}
	switch ts.GetMode() {
	case networking.ClientTLSSettings_DISABLE:
		return nil, nil, nil
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		return nil, nil, fmt.Errorf("%s.mode: ISTIO_MUTUAL needs an istiod-issued identity vmesh does not hold: use MUTUAL with clientCertificate, privateKey and caCertificates", field)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: ts.GetSni()}
	if ca := ts.GetCaCertificates(); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.caCertificates: %w", field, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("%s.caCertificates: %s holds no PEM certificate", field, ca)
		}
		cfg.RootCAs = pool
	}
	if ts.GetMode() == networking.ClientTLSSettings_MUTUAL {
		if ts.GetClientCertificate() == "" || ts.GetPrivateKey() == "" {
			return nil, nil, fmt.Errorf("%s: mode MUTUAL needs clientCertificate and privateKey", field)
		}
		cert, err := tls.LoadX509KeyPair(ts.GetClientCertificate(), ts.GetPrivateKey())
		if err != nil {
			return nil, nil, fmt.Errorf("%s.clientCertificate: %w", field, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	} else if ts.GetClientCertificate() != "" || ts.GetPrivateKey() != "" {
		warn("clientCertificate", "clientCertificate and privateKey apply with mode MUTUAL only: the client presents no certificate")
	}
	if sans := ts.GetSubjectAltNames(); len(sans) > 0 {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("the server presented no certificate")
			}
			leaf := cs.PeerCertificates[0]
			for _, want := range sans {
				for _, d := range leaf.DNSNames {
					if d == want {
						return nil
					}
				}
				for _, u := range leaf.URIs {
					if u.String() == want {
						return nil
					}
				}
				for _, ip := range leaf.IPAddresses {
					if ip.String() == want {
						return nil
					}
				}
			}
			return fmt.Errorf("the server's certificate names none of subjectAltNames %v", sans)
		}
	}
	if ts.GetCredentialName() != "" {
		warn("credentialName", "credentialName names a Kubernetes secret: not applied (use clientCertificate, privateKey and caCertificates files)")
	}
	if ts.GetInsecureSkipVerify().GetValue() {
		warn("insecureSkipVerify", "insecureSkipVerify is not applied: the server's certificate is verified")
	}
	if ts.GetCaCrl() != "" {
		warn("caCrl", "caCrl is not applied: certificates are not checked against a revocation list")
	}
	return credentials.NewTLS(cfg), warns, nil
}
