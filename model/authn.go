package model

import (
	"maps"
	"slices"
	"strings"

	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	security "istio.io/api/security/v1beta1"
)

// RequestAuthentication is one RequestAuthentication policy: the JWTs a
// workload accepts. A request with a token none of its rules verifies is
// rejected; a request without a token passes, and AuthorizationPolicies
// decide (requestPrincipals, request.auth.*).
type RequestAuthentication struct {
	Namespace string
	Name      string
	// Selector is the workload selector; empty means every workload of the
	// namespace (of the mesh, in the root namespace).
	Selector map[string]string
	// Rules are the spec's JWT rules (nil rules left out).
	Rules []*security.JWTRule
}

// Key returns "namespace/name".
func (r *RequestAuthentication) Key() string { return r.Namespace + "/" + r.Name }

// JWKS is what the control plane fetched from one jwksUri (the JWKS
// fetcher's Store objects, store.KindJWKS).
type JWKS struct {
	// Keys is the JSON Web Key Set; "" when the fetch failed or has not
	// happened yet.
	Keys string
	// Error says why the fetch failed.
	Error string
}

func (b *builder) addRequestAuthentication(o *store.Object) {
	ra, ok := o.Spec.(*security.RequestAuthentication)
	if !ok {
		b.problem(o, "spec is %T, want RequestAuthentication", o.Spec)
		return
	}
	if len(ra.GetTargetRefs()) > 0 || ra.GetTargetRef() != nil {
		b.problem(o, "targetRef(s) name Kubernetes Gateway API resources, which vmesh does not have; use selector. The policy is ignored")
		return
	}
	m := &RequestAuthentication{Namespace: o.Namespace, Name: o.Name, Selector: ra.GetSelector().GetMatchLabels()}
	for _, r := range ra.GetJwtRules() {
		if r != nil {
			m.Rules = append(m.Rules, r)
		}
	}
	b.s.RequestAuthentications = append(b.s.RequestAuthentications, m)
	if b.s.raByNS == nil {
		b.s.raByNS = map[string][]*RequestAuthentication{}
	}
	b.s.raByNS[o.Namespace] = append(b.s.raByNS[o.Namespace], m)
}

func (b *builder) addJWKS(o *store.Object) {
	j := JWKS{Error: o.Annotations[store.JWKSErrorAnnotation]}
	if v, ok := o.Spec.(*wrapperspb.StringValue); ok {
		j.Keys = v.GetValue()
	}
	if b.s.jwks == nil {
		b.s.jwks = map[string]JWKS{}
	}
	b.s.jwks[o.Name] = j
}

// addAuthn adds the RequestAuthentications and fetched key sets of fs.
func (b *builder) addAuthn(fs *store.Snapshot) {
	for _, o := range fs.List(store.KindRequestAuthentication) {
		b.addRequestAuthentication(o)
	}
	for _, o := range fs.List(store.KindJWKS) {
		b.addJWKS(o)
	}
}

// RequestAuthenticationsFor returns the RequestAuthentications that apply
// to a workload in ns with labels, as Istio selects them: those of the root
// namespace and of ns whose selector is empty or matches, sorted by
// namespace and name.
func (s *Snapshot) RequestAuthenticationsFor(ns string, labels map[string]string) []*RequestAuthentication {
	var out []*RequestAuthentication
	for _, n := range namespacesOf(s.Mesh.RootNamespace, ns) {
		for _, ra := range s.raByNS[n] {
			if len(ra.Selector) == 0 || LabelsMatch(ra.Selector, labels) {
				out = append(out, ra)
			}
		}
	}
	slices.SortFunc(out, func(a, b *RequestAuthentication) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

// JWKS returns what the control plane fetched for a JWKSKey; ok is false
// when it has not been fetched (yet).
func (s *Snapshot) JWKS(uri string) (JWKS, bool) {
	j, ok := s.jwks[uri]
	return j, ok
}

// IssuerKeyPrefix starts the JWKS key of a rule without jwksUri or jwks:
// its key set is found by OpenID discovery from the issuer, as in Istio.
const IssuerKeyPrefix = "issuer:"

// JWKSKey names where a JWT rule without inline jwks gets its keys: its
// jwksUri, else IssuerKeyPrefix + issuer (OpenID discovery). It is the name
// of the JWKS fetcher's Store object.
func JWKSKey(r *security.JWTRule) string {
	if r.GetJwksUri() != "" {
		return r.GetJwksUri()
	}
	return IssuerKeyPrefix + r.GetIssuer()
}

// RequestAuthentications are the RequestAuthentications that apply to the
// proxy's workload.
func (v *View) RequestAuthentications() []*RequestAuthentication {
	return v.snap.RequestAuthenticationsFor(v.proxy.Namespace, v.whole.Labels)
}

// JWKS returns what the control plane fetched from a jwksUri (see
// Snapshot.JWKS).
func (v *View) JWKS(uri string) (JWKS, bool) { return v.snap.JWKS(uri) }

// ExtensionProvider returns MeshConfig's extension provider name (for
// CUSTOM AuthorizationPolicies), or nil.
func (m Mesh) ExtensionProvider(name string) *meshv1alpha1.MeshConfig_ExtensionProvider {
	if m.ExtensionProviders == nil {
		return nil
	}
	for _, p := range m.ExtensionProviders.List {
		if p.GetName() == name {
			return p
		}
	}
	return nil
}

// ExtensionProviders are MeshConfig's extensionProviders. Mesh holds them
// by pointer so that Mesh stays comparable; the list is never modified.
type ExtensionProviders struct {
	List []*meshv1alpha1.MeshConfig_ExtensionProvider
}

// JWTConditionKey reports whether a `when` key reads the request's JWT
// (request.auth.principal, .audiences, .presenter, .claims[...]): Envoy
// sidecars enforce it from the JWT filter's metadata, proxyless gRPC
// servers cannot.
func JWTConditionKey(k string) bool {
	switch k {
	case "request.auth.principal", "request.auth.audiences", "request.auth.presenter":
		return true
	}
	return strings.HasPrefix(k, "request.auth.claims[") && strings.HasSuffix(k, "]")
}

// sameAuthn reports whether two snapshots have the same
// RequestAuthentications and fetched key sets.
func sameAuthn(a, b *Snapshot) bool {
	return slices.EqualFunc(a.RequestAuthentications, b.RequestAuthentications, func(x, y *RequestAuthentication) bool {
		return x.Namespace == y.Namespace && x.Name == y.Name && maps.Equal(x.Selector, y.Selector) &&
			slices.EqualFunc(x.Rules, y.Rules, func(p, q *security.JWTRule) bool { return proto.Equal(p, q) })
	}) && maps.Equal(a.jwks, b.jwks)
}
