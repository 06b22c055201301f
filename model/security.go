package model

import (
	"slices"
	"strings"
	"time"

	"github.com/vmesh/vmesh/ca/spiffe"
	"github.com/vmesh/vmesh/store"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
)

// DefaultRootNamespace is the mesh root namespace: a PeerAuthentication
// without selector there applies to the whole mesh, an AuthorizationPolicy
// there applies to workloads of every namespace. It is Istio's, so policies
// copied from the Istio documentation work unchanged.
const DefaultRootNamespace = "istio-system"

// Mesh holds the mesh-wide settings the security computations need.
type Mesh struct {
	// RootNamespace is the namespace of mesh-wide policies; default
	// DefaultRootNamespace.
	RootNamespace string
	// TrustDomain of workload SPIFFE IDs; default cluster.local.
	TrustDomain string
	// TrustDomainAliases is MeshConfig's trustDomainAliases,
	// comma-separated (a string keeps Mesh comparable): the other trust
	// domains of the mesh's workloads, as Istio's: an Envoy sidecar's
	// inbound mesh mTLS accepts their clients (ValidationTrustDomains), and
	// a client accepts a server's SPIFFE ID in any of them
	// (ServiceIdentities).
	TrustDomainAliases string
	// MTLSCipherSuites is MeshConfig meshMTLS.cipherSuites, comma-separated:
	// the TLS 1.2 cipher suites inbound mesh mTLS accepts; "" is Istio's
	// (ECDHE/RSA with AES-GCM).
	MTLSCipherSuites string
	// MTLSMinTLS13 is MeshConfig meshMTLS.minProtocolVersion TLSV1_3:
	// inbound mesh mTLS accepts TLS 1.3 only (else 1.2 to 1.3).
	MTLSMinTLS13 bool
	// DefaultHTTPRetry is MeshConfig's defaultHttpRetryPolicy: the retries
	// of every HTTP and gRPC route whose VirtualService sets none. nil is
	// Istio's built-in default (translate.RetryPolicy); zero attempts turn
	// default retries off.
	DefaultHTTPRetry *networking.HTTPRetry
	// ConnectTimeout is MeshConfig's connectTimeout, the clusters' connect
	// timeout when a DestinationRule sets none; default 10 s.
	ConnectTimeout time.Duration
	// DNSRefreshRate is MeshConfig's dnsRefreshRate, how often a DNS
	// cluster resolves when the answer's TTL does not say; default 60 s.
	DNSRefreshRate time.Duration
	// RegistryOnly is MeshConfig's outboundTrafficPolicy REGISTRY_ONLY:
	// sidecars whose Sidecar sets no policy send traffic to unknown
	// destinations to the black hole instead of passing it through.
	RegistryOnly bool
	// DisableAutoMTLS is MeshConfig's enableAutoMtls: false: clients use
	// mTLS only where a DestinationRule says so.
	DisableAutoMTLS bool
	// LocalityLB is MeshConfig's localityLbSetting, the locality load
	// balancing of Envoy sidecars' clusters whose DestinationRule sets none;
	// nil: Istio's default (failover by locality under outlier detection).
	LocalityLB *networking.LocalityLoadBalancerSetting
	// ExportTo are MeshConfig's default*ExportTo: the visibility of config
	// that sets no exportTo.
	ExportTo ExportToDefaults
	// ExtensionProviders are MeshConfig's extensionProviders: the external
	// authorizers CUSTOM AuthorizationPolicies name; nil: none.
	ExtensionProviders *ExtensionProviders
	// AccessLog is MeshConfig's accessLogFile, accessLogEncoding and
	// accessLogFormat: the access log of Envoy sidecars.
	AccessLog AccessLog
	// H2Upgrade is MeshConfig's h2UpgradePolicy UPGRADE: Envoy sidecars
	// speak HTTP/2 to the endpoints of HTTP/1.1 ports whose
	// DestinationRule does not say otherwise.
	H2Upgrade bool
	// TCPKeepalive is MeshConfig's tcpKeepalive: the keepalive of Envoy
	// sidecars' upstream connections, which a DestinationRule's overrides
	// field by field; nil: none.
	TCPKeepalive *networking.ConnectionPoolSettings_TCPSettings_TcpKeepalive
	// InboundLocalhost is MeshConfig's inboundTrafficPolicy LOCALHOST: an
	// Envoy sidecar forwards inbound traffic to 127.0.0.1 on the workload
	// port. Istio's default, PASSTHROUGH (false), forwards it to the
	// address it was sent to (the VM's), so a service listening on
	// loopback only is not exposed to the mesh.
	InboundLocalhost bool
	// Tracing is MeshConfig's enableTracing, defaultProviders.tracing and
	// defaultConfig.tracing (sampling, customTags, maxPathTagLength): the
	// tracing of Envoy proxies' HTTP connection managers.
	Tracing Tracing
}

// Tracing is what the mesh config says of tracing; zero is Istio's default
// (enableTracing on, 1% sampling, Istio's tags, no provider).
type Tracing struct {
	// Disabled is enableTracing: false.
	Disabled bool
	// DefaultProvider is the first of defaultProviders.tracing (Istio uses
	// only the first): the extension provider Envoy proxies send spans to
	// when no Telemetry says otherwise; "" for none.
	DefaultProvider string
	// Proxy is defaultConfig.tracing (sampling, customTags,
	// maxPathTagLength, enableIstioTags); nil for none. Held by pointer so
	// that Mesh stays comparable (sameMesh compares it by content).
	Proxy *meshv1alpha1.Tracing
}

// AccessLog is where and how Envoy sidecars log the connections and
// requests they handle; zero: no access log (Istio's default).
type AccessLog struct {
	// File is the path Envoy writes to ("" logs nothing).
	File string
	// JSON is accessLogEncoding JSON (else TEXT).
	JSON bool
	// Format is accessLogFormat: for TEXT Envoy's format string, for JSON
	// a JSON object of field names to format strings; "" is Istio's.
	Format string
	// DefaultProviders is defaultProviders.accessLogging, comma-separated
	// (a string keeps Mesh comparable): the extension providers workloads
	// log to when no Telemetry says otherwise; they replace File.
	DefaultProviders string
}

// ExportToDefaults are the exportTo lists of ServiceEntries,
// VirtualServices and DestinationRules that set none, each comma-separated
// as MeshConfig lists them ("*", ".", "~" or namespaces); "" is Istio's
// default, "*". Strings keep Mesh comparable.
type ExportToDefaults struct {
	Services, VirtualServices, DestinationRules string
}

// exportTo returns an object's exportTo list, or the default (joined) when
// it sets none.
func exportTo(own []string, def string) []string {
	if len(own) > 0 || def == "" {
		return own
	}
	return strings.Split(def, ",")
}

// DefaultMesh returns Istio's defaults: root namespace istio-system, trust
// domain cluster.local, connect timeout 10 s, DNS refresh 60 s, outbound
// traffic ALLOW_ANY,
// Istio's built-in default retries.
func DefaultMesh() Mesh {
	return Mesh{RootNamespace: DefaultRootNamespace, TrustDomain: spiffe.DefaultTrustDomain, ConnectTimeout: 10 * time.Second, DNSRefreshRate: time.Minute}
}

func (m Mesh) withDefaults() Mesh {
	d := DefaultMesh()
	if m.RootNamespace == "" {
		m.RootNamespace = d.RootNamespace
	}
	if m.TrustDomain == "" {
		m.TrustDomain = d.TrustDomain
	}
	if m.ConnectTimeout <= 0 {
		m.ConnectTimeout = d.ConnectTimeout
	}
	if m.DNSRefreshRate <= 0 {
		m.DNSRefreshRate = d.DNSRefreshRate
	}
	return m
}

// SPIFFEID returns the SPIFFE ID of a service account in the mesh's trust
// domain.
func (m Mesh) SPIFFEID(namespace, serviceAccount string) string {
	return spiffe.Identity{TrustDomain: m.TrustDomain, Namespace: namespace, ServiceAccount: serviceAccount}.String()
}

// ValidationTrustDomains are the trust domains whose SPIFFE IDs an Envoy
// sidecar's inbound mesh mTLS accepts from a client, as Istio's
// TrustDomainsForValidation: the mesh's trust domain, then its aliases,
// each once, empty ones left out.
func (m Mesh) ValidationTrustDomains() []string {
	var out []string
	for _, td := range append([]string{m.TrustDomain}, strings.Split(m.TrustDomainAliases, ",")...) {
		if td != "" && !slices.Contains(out, td) {
			out = append(out, td)
		}
	}
	return out
}

// MTLSMode is the effective PeerAuthentication mode of a workload port.
type MTLSMode int

// Modes, as in PeerAuthentication.MutualTLS.Mode.
const (
	MTLSUnset MTLSMode = iota
	MTLSDisable
	MTLSPermissive
	MTLSStrict
)

// String names the mode as Istio does.
func (m MTLSMode) String() string {
	switch m {
	case MTLSDisable:
		return "DISABLE"
	case MTLSPermissive:
		return "PERMISSIVE"
	case MTLSStrict:
		return "STRICT"
	}
	return "UNSET"
}

// PeerAuthentication is one PeerAuthentication policy.
type PeerAuthentication struct {
	Namespace string
	Name      string
	// Selector is the workload selector; empty means namespace-wide (in the
	// root namespace: mesh-wide).
	Selector map[string]string
	// Mode is the workload-level mode; MTLSUnset inherits.
	Mode MTLSMode
	// PortModes override Mode per workload port (only with a selector).
	PortModes map[uint32]MTLSMode
}

// Key returns "namespace/name".
func (p *PeerAuthentication) Key() string { return p.Namespace + "/" + p.Name }

// AuthorizationPolicy is one ALLOW or DENY AuthorizationPolicy.
type AuthorizationPolicy struct {
	Namespace string
	Name      string
	// Selector is the workload selector; empty means every workload of the
	// namespace (of the mesh, in the root namespace).
	Selector map[string]string
	// Action is ALLOW, DENY, AUDIT or CUSTOM. Envoy sidecars get AUDIT
	// policies as an RBAC filter with action LOG (Istio's audit), and CUSTOM
	// ones as ext_authz to Provider when the mesh config defines it, else
	// as DENY of their rules (fail closed). Proxyless gRPC servers ignore
	// AUDIT and deny what CUSTOM rules match (grpc-go has no ext_authz).
	Action security.AuthorizationPolicy_Action
	// DryRun is the istio.io/dry-run: "true" annotation: the policy is not
	// enforced; Envoy evaluates it as shadow rules (stats only).
	DryRun bool
	// Rules are the spec's rules; an ALLOW policy without rules allows
	// nothing, a DENY policy without rules denies nothing.
	Rules []*security.Rule
	// Provider is a CUSTOM policy's extension provider name.
	Provider string
}

// Key returns "namespace/name".
func (p *AuthorizationPolicy) Key() string { return p.Namespace + "/" + p.Name }

func mtlsMode(m *security.PeerAuthentication_MutualTLS) MTLSMode {
	switch m.GetMode() {
	case security.PeerAuthentication_MutualTLS_DISABLE:
		return MTLSDisable
	case security.PeerAuthentication_MutualTLS_PERMISSIVE:
		return MTLSPermissive
	case security.PeerAuthentication_MutualTLS_STRICT:
		return MTLSStrict
	}
	return MTLSUnset
}

func (b *builder) addPeerAuthentication(o *store.Object) {
	pa, ok := o.Spec.(*security.PeerAuthentication)
	if !ok {
		b.problem(o, "spec is %T, want PeerAuthentication", o.Spec)
		return
	}
	m := &PeerAuthentication{Namespace: o.Namespace, Name: o.Name, Selector: pa.GetSelector().GetMatchLabels(), Mode: mtlsMode(pa.GetMtls())}
	if len(pa.GetPortLevelMtls()) > 0 {
		if len(m.Selector) == 0 {
			b.problem(o, "portLevelMtls ignored: it needs a workload selector")
		} else {
			m.PortModes = make(map[uint32]MTLSMode, len(pa.GetPortLevelMtls()))
			for port, mt := range pa.GetPortLevelMtls() {
				m.PortModes[port] = mtlsMode(mt)
			}
		}
	}
	b.s.PeerAuthentications = append(b.s.PeerAuthentications, m)
	b.s.paByNS[o.Namespace] = append(b.s.paByNS[o.Namespace], m)
}

func (b *builder) addAuthorizationPolicy(o *store.Object) {
	ap, ok := o.Spec.(*security.AuthorizationPolicy)
	if !ok {
		b.problem(o, "spec is %T, want AuthorizationPolicy", o.Spec)
		return
	}
	switch ap.GetAction() {
	case security.AuthorizationPolicy_ALLOW, security.AuthorizationPolicy_DENY, security.AuthorizationPolicy_AUDIT:
	case security.AuthorizationPolicy_CUSTOM:
		switch p := b.s.Mesh.ExtensionProvider(ap.GetProvider().GetName()); {
		case p == nil:
			b.problem(o, "action CUSTOM: the mesh config defines no extension provider %q; requests matching its rules are denied", ap.GetProvider().GetName())
		case p.GetEnvoyExtAuthzHttp() == nil && p.GetEnvoyExtAuthzGrpc() == nil:
			b.problem(o, "action CUSTOM: extension provider %q is not envoyExtAuthzHttp or envoyExtAuthzGrpc; requests matching its rules are denied", ap.GetProvider().GetName())
		}
	default:
		b.problem(o, "action %s is not supported; the policy is ignored", ap.GetAction())
		return
	}
	dryRun := strings.EqualFold(o.Annotations[DryRunAnnotation], "true")
	if len(ap.GetTargetRefs()) > 0 || ap.GetTargetRef() != nil {
		b.problem(o, "targetRef(s) name Kubernetes Gateway API resources, which vmesh does not have; use selector. The policy is ignored")
		return
	}
	for i, r := range ap.GetRules() {
		if u := UnsupportedRuleFieldsFor(r, true); len(u) > 0 {
			effect := "the rule is dropped (it allows nothing)"
			if ap.GetAction() != security.AuthorizationPolicy_ALLOW {
				effect = "those fields are ignored (the rule matches more, not less)"
			}
			b.problem(o, "rules[%d]: %s not supported: %s", i, strings.Join(u, ", "), effect)
		}
	}
	m := &AuthorizationPolicy{Namespace: o.Namespace, Name: o.Name, Selector: ap.GetSelector().GetMatchLabels(), Action: ap.GetAction(), Rules: b.s.Mesh.migrateTrustDomain(ap.GetRules()), DryRun: dryRun, Provider: ap.GetProvider().GetName()}
	b.s.AuthorizationPolicies = append(b.s.AuthorizationPolicies, m)
	b.s.apByNS[o.Namespace] = append(b.s.apByNS[o.Namespace], m)
}

// DryRunAnnotation set to "true" on an AuthorizationPolicy makes it a dry
// run, as in Istio: evaluated and counted, never enforced.
const DryRunAnnotation = "istio.io/dry-run"

// UnsupportedRuleFields lists the parts of an AuthorizationPolicy rule a
// proxyless gRPC server cannot enforce: UnsupportedRuleFieldsFor(r, false).
func UnsupportedRuleFields(r *security.Rule) []string { return UnsupportedRuleFieldsFor(r, false) }

// UnsupportedRuleFieldsFor lists the parts of an AuthorizationPolicy rule a
// proxy cannot enforce: experimental and unknown conditions, and, unless
// jwt (the proxy has Envoy's JWT filter), request principals and
// request.auth.* conditions. Generators drop an ALLOW rule that has any (it
// would allow too much otherwise) and ignore those fields in a DENY rule
// (it denies more), failing closed.
func UnsupportedRuleFieldsFor(r *security.Rule, jwt bool) []string {
	var out []string
	if !jwt {
		for _, f := range r.GetFrom() {
			s := f.GetSource()
			if len(s.GetRequestPrincipals()) > 0 {
				out = append(out, "from.source.requestPrincipals")
			}
			if len(s.GetNotRequestPrincipals()) > 0 {
				out = append(out, "from.source.notRequestPrincipals")
			}
		}
	}
	for _, c := range r.GetWhen() {
		if !SupportedConditionKey(c.GetKey()) && (!jwt || !JWTConditionKey(c.GetKey())) {
			out = append(out, "when "+c.GetKey())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// SupportedConditionKey reports whether a `when` condition key can be
// enforced: source.ip, remote.ip, source.namespace, source.principal,
// source.serviceAccount, destination.ip, destination.port,
// connection.sni and request.headers[NAME].
func SupportedConditionKey(k string) bool {
	switch k {
	case "source.ip", "remote.ip", "source.namespace", "source.principal", "source.serviceAccount",
		"destination.ip", "destination.port", "connection.sni":
		return true
	}
	return strings.HasPrefix(k, "request.headers[") && strings.HasSuffix(k, "]")
}

// PeerAuthenticationMode returns the effective mTLS mode for port of a
// workload in ns with labels, as Istio computes it: the workload policy
// (the first, by name, of the namespace's policies whose selector matches),
// else the namespace policy, else the mesh policy (root namespace, no
// selector), else PERMISSIVE; an UNSET mode inherits from the next wider
// level, and the workload policy's portLevelMtls overrides for its port.
// Istio picks the oldest policy when several apply at one level; vmesh has
// no creation times and picks the first by name.
func (s *Snapshot) PeerAuthenticationMode(ns string, labels map[string]string, port uint32) MTLSMode {
	var workload, namespace, mesh *PeerAuthentication
	for _, pa := range s.paByNS[ns] {
		if len(pa.Selector) == 0 {
			if namespace == nil {
				namespace = pa
			}
		} else if workload == nil && LabelsMatch(pa.Selector, labels) {
			workload = pa
		}
	}
	for _, pa := range s.paByNS[s.Mesh.RootNamespace] {
		if len(pa.Selector) == 0 {
			mesh = pa
			break
		}
	}
	mode := MTLSPermissive
	for _, pa := range []*PeerAuthentication{mesh, namespace, workload} {
		if pa != nil && pa.Mode != MTLSUnset {
			mode = pa.Mode
		}
	}
	if workload != nil {
		if m := workload.PortModes[port]; m != MTLSUnset {
			mode = m
		}
	}
	return mode
}

// AuthorizationPoliciesFor returns the AuthorizationPolicies that apply to a
// workload in ns with labels: those of the root namespace and of ns whose
// selector is empty or matches. The result is sorted by namespace and name.
func (s *Snapshot) AuthorizationPoliciesFor(ns string, labels map[string]string) []*AuthorizationPolicy {
	var out []*AuthorizationPolicy
	for _, n := range namespacesOf(s.Mesh.RootNamespace, ns) {
		for _, ap := range s.apByNS[n] {
			if len(ap.Selector) == 0 || LabelsMatch(ap.Selector, labels) {
				out = append(out, ap)
			}
		}
	}
	slices.SortFunc(out, func(a, b *AuthorizationPolicy) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

// namespacesOf returns root and ns, once each.
func namespacesOf(root, ns string) []string {
	if root == ns {
		return []string{ns}
	}
	return []string{root, ns}
}

// WorkloadPolicyKey names the workload-scoped policies (PeerAuthentications,
// AuthorizationPolicies, RequestAuthentications and Telemetries with a selector) that select a workload in ns
// with labels: "" when none does. Workloads of one namespace with the same
// key get the same server-side security config, so proxy grouping uses it
// instead of the labels themselves.
func (s *Snapshot) WorkloadPolicyKey(ns string, labels map[string]string) string {
	var keys []string
	for _, pa := range s.paByNS[ns] {
		if len(pa.Selector) > 0 && LabelsMatch(pa.Selector, labels) {
			keys = append(keys, "pa:"+pa.Key())
		}
	}
	for _, n := range namespacesOf(s.Mesh.RootNamespace, ns) {
		for _, ap := range s.apByNS[n] {
			if len(ap.Selector) > 0 && LabelsMatch(ap.Selector, labels) {
				keys = append(keys, "ap:"+ap.Key())
			}
		}
		for _, ra := range s.raByNS[n] {
			if len(ra.Selector) > 0 && LabelsMatch(ra.Selector, labels) {
				keys = append(keys, "ra:"+ra.Key())
			}
		}
	}
	if tk := s.telemetryKey(ns, labels); tk != "" {
		keys = append(keys, tk)
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// TLSMode is how a client connects to a destination.
type TLSMode int

// Client TLS modes, as in DestinationRule ClientTLSSettings.
const (
	TLSDisable TLSMode = iota
	TLSSimple
	TLSMutual
	TLSIstioMutual
)

// String names the mode as Istio does.
func (m TLSMode) String() string {
	switch m {
	case TLSSimple:
		return "SIMPLE"
	case TLSMutual:
		return "MUTUAL"
	case TLSIstioMutual:
		return "ISTIO_MUTUAL"
	}
	return "DISABLE"
}

// AutoMTLS says when a client uses mesh mTLS toward a destination that no
// DestinationRule TLS setting covers.
type AutoMTLS int

const (
	// AutoMTLSUnlessDisabled is Istio's automatic mTLS: mTLS unless a
	// destination endpoint's PeerAuthentication mode is DISABLE. Right for
	// Envoy sidecars, which accept both mTLS and plaintext in PERMISSIVE.
	AutoMTLSUnlessDisabled AutoMTLS = iota
	// AutoMTLSStrictOnly uses mTLS only when every destination endpoint is
	// STRICT. Right for proxyless gRPC clients: a proxyless gRPC server
	// cannot tell TLS from plaintext on one port, so it serves PERMISSIVE as
	// plaintext, and mTLS toward it would fail.
	AutoMTLSStrictOnly
)

// UpstreamTLS is how a client reaches one cluster (service port and subset).
type UpstreamTLS struct {
	Mode TLSMode
	// Auto is true when automatic mTLS chose ISTIO_MUTUAL (no DestinationRule
	// TLS setting applied).
	Auto bool
	// SubjectAltNames are the identities the server may present (ISTIO_MUTUAL:
	// the rule's subjectAltNames, else the service's identities); empty means
	// any certificate the trust bundle verifies.
	SubjectAltNames []string
	// SNI to send, from the DestinationRule.
	SNI string
	// Settings are the DestinationRule's TLS settings (SIMPLE and MUTUAL need
	// their credentialName or certificate paths); nil for automatic mTLS.
	Settings *networking.ClientTLSSettings
}

// ClientTLS returns the DestinationRule TLS settings for a service port and
// subset, merged as TrafficPolicy merges the other fields: a port-level
// entry for the port replaces the level's tls (nil when the entry sets
// none), and a subset's tls replaces the rule's. nil when none applies.
func (dr *DestinationRule) ClientTLS(port uint32, subset string) *networking.ClientTLSSettings {
	return dr.policy(port, subset).tls
}

// UpstreamTLS decides how a client reaches the cluster of svc's port and
// subset under DestinationRule dr (may be nil). A DestinationRule TLS
// setting wins. Otherwise automatic mTLS applies (policy auto), unless the
// mesh turns it off, when the service is in the mesh (not MESH_EXTERNAL) and every endpoint of the
// subset has a service account and a PeerAuthentication mode that auto
// accepts; the server's identities are then verified.
func (s *Snapshot) UpstreamTLS(svc *Service, port Port, subset string, dr *DestinationRule, auto AutoMTLS) UpstreamTLS {
	if t := dr.ClientTLS(port.Number, subset); t != nil {
		out := UpstreamTLS{Settings: t, SNI: t.GetSni()}
		switch t.GetMode() {
		case networking.ClientTLSSettings_DISABLE:
			return UpstreamTLS{}
		case networking.ClientTLSSettings_SIMPLE:
			out.Mode = TLSSimple
		case networking.ClientTLSSettings_MUTUAL:
			out.Mode = TLSMutual
		case networking.ClientTLSSettings_ISTIO_MUTUAL:
			out.Mode = TLSIstioMutual
		}
		out.SubjectAltNames = t.GetSubjectAltNames()
		if len(out.SubjectAltNames) == 0 && out.Mode == TLSIstioMutual {
			out.SubjectAltNames = s.ServiceIdentities(svc)
		}
		return out
	}
	if svc.MeshExternal || s.Mesh.DisableAutoMTLS {
		return UpstreamTLS{}
	}
	eps := svc.SubsetEndpoints(dr.Subset(subset).GetLabels())
	if len(eps) == 0 {
		return UpstreamTLS{}
	}
	for _, e := range eps {
		if e.ServiceAccount == "" {
			return UpstreamTLS{}
		}
		switch s.PeerAuthenticationMode(svc.Namespace, e.Labels, e.PortFor(port)) {
		case MTLSDisable:
			return UpstreamTLS{}
		case MTLSPermissive:
			if auto == AutoMTLSStrictOnly {
				return UpstreamTLS{}
			}
		}
	}
	return UpstreamTLS{Mode: TLSIstioMutual, Auto: true, SubjectAltNames: s.ServiceIdentities(svc)}
}

// ServiceIdentities returns the identities a service's endpoints present:
// the ServiceEntry's subjectAltNames and the SPIFFE IDs of its endpoints'
// service accounts (endpoints live in the ServiceEntry's namespace), sorted
// and without duplicates.
func (s *Snapshot) ServiceIdentities(svc *Service) []string {
	out := slices.Clone(svc.SubjectAltNames)
	for _, e := range svc.Endpoints {
		if e.ServiceAccount != "" {
			out = append(out, s.Mesh.SPIFFEID(svc.Namespace, e.ServiceAccount))
		}
	}
	out = s.Mesh.withAliases(out)
	slices.Sort(out)
	return slices.Compact(out)
}

// withAliases adds to ids, for each SPIFFE ID of the form
// spiffe://TD/ns/NS/sa/SA, the same in each of the mesh's
// trustDomainAliases, as Istio's ExpandWithTrustDomains: a server of an
// alias trust domain is the same workload. Other names are kept as they
// are.
func (m Mesh) withAliases(ids []string) []string {
	if m.TrustDomainAliases == "" {
		return ids
	}
	aliases := strings.Split(m.TrustDomainAliases, ",")
	out := ids
	for _, id := range ids {
		parsed, err := spiffe.Parse(id)
		if err != nil {
			continue
		}
		for _, td := range aliases {
			parsed.TrustDomain = td
			out = append(out, parsed.String())
		}
	}
	return out
}
