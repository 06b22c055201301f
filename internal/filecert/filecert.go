// Package filecert names certificate files on a gateway VM as Istio's
// gateways ask their agent for them over SDS, and says which of a Gateway
// server's certificate file settings vmesh serves. Istio's names
// (security.SdsCertificateConfig) are "file-cert:<cert>~<key>" for a
// certificate chain and its private key and "file-root:<ca>" for roots:
// the router's listeners carry only the paths (xds/router), the VM's agent
// reads the files and serves their contents over its local SDS socket
// (agents/sds), so the private key never travels over xDS. The control
// plane, the agent and the config checks share these rules here.
package filecert

import (
	"path"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// Istio's prefixes and separator.
const (
	CertPrefix = "file-cert:"
	RootPrefix = "file-root:"
	// Separator separates the certificate and key paths in a file-cert
	// name (Istio's ResourceSeparator).
	Separator = "~"
)

// RefusedPrefix starts an entry of an agent's credential report for a
// certificate file name its Envoy asked for and the agent refuses:
// "refused:<name>\t<reason>" (the report's other entries are the secrets
// it holds). A name its Envoy has not asked for yet is in neither.
const RefusedPrefix = "refused:"

// Refused splits a report entry made with RefusedPrefix; ok is false for
// another entry.
func Refused(entry string) (name, reason string, ok bool) {
	rest, found := strings.CutPrefix(entry, RefusedPrefix)
	if !found {
		return "", "", false
	}
	name, reason, _ = strings.Cut(rest, "\t")
	return name, reason, true
}

// CertName is the SDS name of a certificate file and its key file.
func CertName(cert, key string) string { return CertPrefix + cert + Separator + key }

// RootName is the SDS name of a roots file.
func RootName(ca string) string { return RootPrefix + ca }

// IsName reports whether an SDS name is a certificate file name (either
// kind).
func IsName(name string) bool {
	return strings.HasPrefix(name, CertPrefix) || strings.HasPrefix(name, RootPrefix)
}

// Parse splits an SDS name into its paths, as Istio's
// SdsCertificateConfigFromResourceName: cert and key for "file-cert:",
// ca for "file-root:"; ok is false for another name or a malformed one
// (a file-cert name with other than one separator, a file-root name with
// one).
func Parse(name string) (cert, key, ca string, ok bool) {
	if rest, found := strings.CutPrefix(name, CertPrefix); found {
		parts := strings.Split(rest, Separator)
		if len(parts) != 2 {
			return "", "", "", false
		}
		return parts[0], parts[1], "", true
	}
	if rest, found := strings.CutPrefix(name, RootPrefix); found {
		if strings.Contains(rest, Separator) {
			return "", "", "", false
		}
		return "", "", rest, true
	}
	return "", "", "", false
}

// PathProblem says why a path cannot name a certificate file vmesh serves,
// "" when it can: it must be absolute and clean (no "..", no "//"), without
// '~' (the separator of file-cert names) or control characters.
func PathProblem(p string) string {
	switch {
	case p == "":
		return "is empty"
	case !path.IsAbs(p) || path.Clean(p) != p:
		return strconv.Quote(p) + " is not an absolute, clean path"
	case strings.Contains(p, Separator) || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return strconv.Quote(p) + " holds '~' or a control character"
	}
	return ""
}

// Certs are a server's certificate files: each of tlsCertificates, or
// serverCertificate and privateKey; with the field path of each (relative
// to the server's tls).
func Certs(t *networking.ServerTLSSettings) (certs []*networking.ServerTLSSettings_TLSCertificate, fields []string) {
	if len(t.GetTlsCertificates()) > 0 {
		for i, c := range t.GetTlsCertificates() {
			certs = append(certs, c)
			fields = append(fields, "tlsCertificates["+strconv.Itoa(i)+"]")
		}
		return certs, fields
	}
	return []*networking.ServerTLSSettings_TLSCertificate{{ServerCertificate: t.GetServerCertificate(), PrivateKey: t.GetPrivateKey()}}, []string{""}
}

// Validates reports whether a server's TLS mode checks client
// certificates against roots (MUTUAL, OPTIONAL_MUTUAL).
func Validates(t *networking.ServerTLSSettings) bool {
	m := t.GetMode()
	return m == networking.ServerTLSSettings_MUTUAL || m == networking.ServerTLSSettings_OPTIONAL_MUTUAL
}

// ServerProblem says why the TLS settings of a Gateway server that
// terminates TLS (SIMPLE, MUTUAL, OPTIONAL_MUTUAL) are not served by
// vmesh's routers, "" when they are (ISTIO_MUTUAL, credentialName, or
// certificate files): credentialNames (several credentials); a CRL file
// (caCrl: Envoy would read it itself, unchecked by the agent and never
// reloaded); a certificate or key not set; a path PathProblem refuses.
func ServerProblem(t *networking.ServerTLSSettings) string {
	switch {
	case t.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL || t.GetCredentialName() != "":
		return ""
	case len(t.GetCredentialNames()) > 0:
		return "credentialNames (several credentials) is not served; name one credential with credentialName, or certificate files with serverCertificate and privateKey"
	case t.GetCaCrl() != "":
		return "caCrl (a CRL file) is not served"
	}
	certs, fields := Certs(t)
	for i, c := range certs {
		prefix := ""
		if fields[i] != "" {
			prefix = fields[i] + "."
		}
		if why := PathProblem(c.GetServerCertificate()); why != "" {
			return prefix + "serverCertificate " + why
		}
		if why := PathProblem(c.GetPrivateKey()); why != "" {
			return prefix + "privateKey " + why
		}
	}
	if Validates(t) && t.GetCaCertificates() != "" {
		if why := PathProblem(t.GetCaCertificates()); why != "" {
			return "caCertificates " + why
		}
	}
	return ""
}
