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
// vmesh's routers, "" when they are (ISTIO_MUTUAL, credentialName or
// credentialNames, or certificate files): caCertCredentialName beside a
// credential for MUTUAL or OPTIONAL_MUTUAL (roots from another
// credential: Istio asks its agent for that credential's
// name, which a vmesh agent serves as a certificate pair, not as roots;
// checking clients against the first credential's roots instead could
// let in clients the named roots would not); a certificate or key not
// set; a certificate, key, roots or CRL path PathProblem refuses.
func ServerProblem(t *networking.ServerTLSSettings) string {
	switch {
	case t.GetCaCertCredentialName() != "" && usesCredentials(t) && Validates(t):
		return "caCertCredentialName (client roots from another credential) is not served; put the roots in the credential's ca.crt (served as <credentialName>-cacert)"
	case t.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL || usesCredentials(t):
		return crlProblem(t)
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
	return crlProblem(t)
}

// crlProblem says why a server's CRL file path is not served: Envoy reads
// the file itself where it applies (ISTIO_MUTUAL, and MUTUAL and
// OPTIONAL_MUTUAL with certificate files), so it must be absolute and
// clean.
func crlProblem(t *networking.ServerTLSSettings) string {
	if t.GetCaCrl() == "" || !crlApplies(t) {
		return ""
	}
	if why := PathProblem(t.GetCaCrl()); why != "" {
		return "caCrl " + why
	}
	return ""
}

// crlApplies reports whether a server's caCrl is applied, as in Istio:
// with ISTIO_MUTUAL, and with certificate files for MUTUAL and
// OPTIONAL_MUTUAL; not with credentials (Istio's validation refuses caCrl
// beside credentialName and its gateways ignore it beside
// credentialNames) nor for SIMPLE (refused by validation).
func crlApplies(t *networking.ServerTLSSettings) bool {
	switch {
	case t.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL:
		return true
	case usesCredentials(t):
		return false
	}
	return Validates(t)
}

// usesCredentials reports whether a server's certificates come from
// credentialName or credentialNames.
func usesCredentials(t *networking.ServerTLSSettings) bool {
	return t.GetCredentialName() != "" || len(t.GetCredentialNames()) > 0
}

// Unapplied is a server TLS field vmesh's routers accept and do not apply,
// as Istio's gateways do not (VM1022).
type Unapplied struct {
	// Field is the field's path relative to the server's tls.
	Field string
	// Why says what is not applied and what to do instead.
	Why string
}

// NotApplied lists the fields of a terminating server's TLS settings that
// vmesh's routers, as Istio's gateways (BuildListenerTLSContext), leave
// out of the listener: the certificate pins (verifyCertificateSpki,
// verifyCertificateHash) for ISTIO_MUTUAL, for certificate files and for
// SIMPLE (Istio applies them only with credentials, and SIMPLE checks no
// client certificate), caCrl beside credentialNames, and
// caCertCredentialName where no credential's roots check clients; and
// ecdhCurves and alpnProtocols (istio.io/api 1.32), which Istio 1.31's
// gateways, whose listeners vmesh's routers follow, do not know.
func NotApplied(t *networking.ServerTLSSettings) []Unapplied {
	var out []Unapplied
	if len(t.GetVerifyCertificateSpki())+len(t.GetVerifyCertificateHash()) > 0 {
		why := ""
		switch {
		case t.GetMode() == networking.ServerTLSSettings_SIMPLE:
			why = "mode SIMPLE checks no client certificate"
		case t.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL:
			why = "mode ISTIO_MUTUAL checks clients against the mesh root only (as Istio's gateways)"
		case !usesCredentials(t):
			why = "a server with certificate files checks clients against caCertificates only (as Istio's gateways, which apply pins with credentialName only); use credentialName to pin client certificates"
		}
		if why != "" {
			for _, f := range []struct {
				name string
				set  bool
			}{{"verifyCertificateSpki", len(t.GetVerifyCertificateSpki()) > 0}, {"verifyCertificateHash", len(t.GetVerifyCertificateHash()) > 0}} {
				if f.set {
					out = append(out, Unapplied{Field: f.name, Why: f.name + " is not applied: " + why + "; any client certificate the roots verify is accepted"})
				}
			}
		}
	}
	if t.GetCaCrl() != "" && len(t.GetCredentialNames()) > 0 {
		out = append(out, Unapplied{Field: "caCrl", Why: "caCrl is not applied beside credentialNames (as Istio's gateways): put the CRL in the first credential's folder as ca.crl"})
	}
	if len(t.GetEcdhCurves()) > 0 {
		out = append(out, Unapplied{Field: "ecdhCurves", Why: "ecdhCurves is not applied (Istio 1.31's gateways, which vmesh's routers follow, do not know the field): the listener offers Envoy's default curves"})
	}
	if len(t.GetAlpnProtocols()) > 0 {
		out = append(out, Unapplied{Field: "alpnProtocols", Why: "alpnProtocols is not applied (Istio 1.31's gateways, which vmesh's routers follow, do not know the field): the listener advertises the ALPN it always does (h2 and http/1.1 where it terminates HTTPS)"})
	}
	if t.GetCaCertCredentialName() != "" && !(usesCredentials(t) && Validates(t)) {
		out = append(out, Unapplied{Field: "caCertCredentialName", Why: "caCertCredentialName is not applied (as Istio's gateways): only a server with credentialName or credentialNames in mode MUTUAL or OPTIONAL_MUTUAL checks clients against a credential's roots"})
	}
	return out
}
