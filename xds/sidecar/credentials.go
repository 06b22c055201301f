package sidecar

import (
	"fmt"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/vmesh/vmesh/model"
)

// Credentials lists the file credentials a sidecar's clusters ask for
// (ClientCredentials of its outbound clusters).
func Credentials(v *model.View) []model.CredentialUse { return ClientCredentials(v.Clusters()) }

// ClientCredentials lists the file credentials the outbound clusters of
// refs ask for over SDS, as clientTLS does: a DestinationRule TLS setting
// SIMPLE or MUTUAL with credentialName asks for "<credentialName>-cacert"
// (the roots; not with insecureSkipVerify) and, MUTUAL, "<credentialName>"
// (the client certificate). Each use is listed once, with the field of
// the rule that names it.
func ClientCredentials(refs []model.Cluster) []model.CredentialUse {
	var out []model.CredentialUse
	seen := map[model.CredentialUse]bool{}
	for _, ref := range refs {
		t := ref.DestinationRule.ClientTLS(ref.Port.Number, ref.Subset)
		name := t.GetCredentialName()
		if name == "" || (t.GetMode() != networking.ClientTLSSettings_SIMPLE && t.GetMode() != networking.ClientTLSSettings_MUTUAL) {
			continue
		}
		dr := ref.DestinationRule
		key := dr.ObjectKey()
		field := tlsField(dr.Spec, t) + ".credentialName"
		var secrets []string
		if t.GetMode() == networking.ClientTLSSettings_MUTUAL {
			secrets = append(secrets, name)
		}
		if !t.GetInsecureSkipVerify().GetValue() {
			secrets = append(secrets, name+model.CACertSuffix)
		}
		for _, s := range secrets {
			u := model.CredentialUse{Secret: s, Credential: name, Object: key, Field: field}
			if !seen[u] {
				seen[u] = true
				out = append(out, u)
			}
		}
	}
	return out
}

// tlsField is the path of t in the DestinationRule's spec.
func tlsField(spec *networking.DestinationRule, t *networking.ClientTLSSettings) string {
	in := func(prefix string, p *networking.TrafficPolicy) string {
		if p.GetTls() == t {
			return prefix + ".tls"
		}
		for i, pl := range p.GetPortLevelSettings() {
			if pl.GetTls() == t {
				return fmt.Sprintf("%s.portLevelSettings[%d].tls", prefix, i)
			}
		}
		return ""
	}
	if f := in("trafficPolicy", spec.GetTrafficPolicy()); f != "" {
		return f
	}
	for i, ss := range spec.GetSubsets() {
		if f := in(fmt.Sprintf("subsets[%d].trafficPolicy", i), ss.GetTrafficPolicy()); f != "" {
			return f
		}
	}
	return "trafficPolicy.tls"
}
