package model

import "github.com/vmesh/vmesh/store"

// CACertSuffix ends the name of a file credential's roots secret
// ("<credentialName>-cacert", Istio's SdsCaSuffix).
const CACertSuffix = "-cacert"

// CredentialUse is one place a proxy's config names a file credential
// (credentialName) or certificate files its agent must serve over SDS: a
// Gateway server's or a DestinationRule's TLS settings. A kind's generators list them
// (gen.Generators.Credentials) as they ask for the secrets.
type CredentialUse struct {
	// Secret is the secret the proxy asks for, by its plain name:
	// "<credentialName>" for a certificate and key, "<credentialName>-cacert"
	// for roots; or, for certificate files on a router (a Gateway server's
	// serverCertificate, privateKey, caCertificates), Istio's SDS name of
	// the files: "file-cert:<cert>~<key>", "file-root:<ca>"
	// (internal/filecert).
	Secret string
	// Credential is the credentialName ("" for certificate files).
	Credential string
	// Object is the Gateway or DestinationRule, and Field the path of the
	// credentialName in its spec ("servers[1].tls.credentialName").
	Object store.Key
	Field  string
}

// ObjectKey is the Gateway's key in the Store.
func (g *Gateway) ObjectKey() store.Key {
	return store.Key{Kind: store.KindGateway, Namespace: g.Namespace, Name: g.Name}
}

// ObjectKey is the DestinationRule's key in the Store.
func (dr *DestinationRule) ObjectKey() store.Key {
	return store.Key{Kind: store.KindDestinationRule, Namespace: dr.Namespace, Name: dr.Name}
}
