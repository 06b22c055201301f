package store

// WarningCode documents one stable warning code. Codes of Istio's own
// analysis messages (IST....) are used where Istio has one; vmesh's own are
// VM1xxx (accepted, not enforced: found in one object) and VM2xxx (found
// across the config set).
type WarningCode struct {
	Code string
	Name string
	// Info: the code is only ever an info (not counted by
	// vmesh_config_warnings, shown by vmesh analyze).
	Info bool
}

// The warning codes. The README's table documents each one (a test checks it).
const (
	CodeReferencedResourceNotFound = "IST0101" // a subset, host or gateway a route names does not exist
	CodeConflictingVirtualServices = "IST0109" // two VirtualServices for the same host (mesh gateway)
	CodeSidecarsWithoutSelector    = "IST0111" // two Sidecars without a workloadSelector in one namespace
	CodeUnreachableRule            = "IST0130" // a VirtualService rule (or match) no request reaches: an earlier rule takes them all
	CodeIneffectiveMatch           = "IST0131" // an info: a VirtualService match that repeats, or falls within, an earlier one
	CodeSchemaWarning              = "IST0133" // config Istio's own validation accepts with a warning (schema_warnings.go)
	CodeTelemetriesWithoutSelector = "IST0160" // two Telemetries without a selector in one namespace
	CodeKindNotImplemented         = "VM1001"  // an Istio kind vmesh does not implement: ignored
	CodePolicyTargetRefs           = "VM1002"  // AuthorizationPolicy or RequestAuthentication targetRef(s): the policy is ignored
	CodeRuleNotEnforced            = "VM1003"  // requestPrincipals, request.auth.* and other conditions vmesh cannot enforce
	CodeDryRunShadowOnly           = "VM1004"  // istio.io/dry-run: shadow rules on Envoy, nothing on proxyless gRPC
	CodePolicyActionPartial        = "VM1005"  // AUDIT has no effect; CUSTOM denies what it matches
	CodePortLevelMTLSIgnored       = "VM1006"  // PeerAuthentication portLevelMtls without a selector
	CodeSidecarEgressHostIgnored   = "VM1007"  // a Sidecar egress host that is not namespace/host
	CodeGatewayNotServed           = "VM1008"  // a Gateway no gateway VM's labels select: no router serves it
	CodeGatewayOnlyRoutes          = "VM1009"  // a VirtualService bound only to gateways no router serves: it applies to no proxy
	CodeEndpointWithoutAddress     = "VM1010"  // an endpoint with a network and no address: there is no network gateway to reach it
	CodeMeshConfigNotApplied       = "VM1011"  // a MeshConfig field vmesh reads but does not apply
	CodeJWKSFetchFailed            = "VM1012"  // a RequestAuthentication jwksUri could not be fetched or was refused (address, not a key set, private keys): its tokens are rejected
	CodeHealthReportsIgnored       = "VM1013"  // an agent reports the health of a WorkloadEntry that is not health-checked: it stays an endpoint
	CodeJWKSFetchUnrestricted      = "VM1014"  // a RequestAuthentication's key set is fetched while a non-global range wider than one address is allowed (Istio's IST0175)
	CodeSidecarFieldNotApplied     = "VM1015"  // a Sidecar field vmesh's sidecars do not apply: ingress tls, a listener's bind or captureMode NONE
	CodeTrafficPolicyNotApplied    = "VM1016"  // a DestinationRule traffic policy field no vmesh proxy applies: tunnel
	CodeL4RouteNotApplied          = "VM1017"  // a VirtualService tcp route that would take a TLS or HTTPS port, which sidecars route by tls routes only
	CodeGatewayServerNotServed     = "VM1018"  // a Gateway server vmesh's routers do not serve: caCertCredentialName beside a credential, or certificate or CRL file paths that are not absolute and clean
	CodeCredentialNotHeld          = "VM1019"  // a credentialName (or certificate files) a proxy's config asks for that its agent does not hold (not in its credentials directory; files it refused): that listener chain or cluster fails closed
	CodeHTTPPortUnauthenticated    = "VM1020"  // vmesh serve's HTTP port listens beyond loopback with no token: /debug, /ui and /metrics are open to its network
	CodeGatewayAPINotApplied       = "VM1021"  // a Gateway API route, parent, backend, filter or field vmesh does not apply (or that names nothing)
	CodeGatewayTLSFieldNotApplied  = "VM1022"  // a Gateway server TLS field routers leave out as Istio's gateways do: certificate pins without credentials, caCrl beside credentialNames; ecdhCurves and alpnProtocols (not known to Istio 1.31)
	CodeTelemetryFieldNotApplied   = "VM1023"  // a Telemetry field (or the provider it names) vmesh's proxies do not apply: metrics overrides, targetRefs, providers of other kinds
	CodeProxylessIgnores           = "VM1101"  // an info: proxyless gRPC clients ignore the field (Envoy sidecars apply it)
	CodeShortHostMismatch          = "VM2001"  // a short host qualifies to an FQDN no ServiceEntry defines, while one defines the short name
	CodeHostNotDefined             = "VM2002"  // a VirtualService or DestinationRule for a host no ServiceEntry defines
	CodeWorkloadEntryUnselected    = "VM2003"  // a WorkloadEntry no ServiceEntry selects
	CodeWorkloadGroupUnselected    = "VM2004"  // a WorkloadGroup whose labels no ServiceEntry selects
	CodeDelegateNotExported        = "VM2005"  // a delegate VirtualService not exported to its root's namespace
	CodeDelegateRouteConflicts     = "VM2006"  // a delegate route whose match fits no match of its root route
	CodeAnalysisHeldBack           = "VM2007"  // cross-object findings held back while a file fails to decode (they may be about its objects)
)

// WarningCodes lists every code in order, with its name.
var WarningCodes = []WarningCode{
	{Code: CodeReferencedResourceNotFound, Name: "ReferencedResourceNotFound"},
	{Code: CodeConflictingVirtualServices, Name: "ConflictingMeshGatewayVirtualServiceHosts"},
	{Code: CodeSidecarsWithoutSelector, Name: "MultipleSidecarsWithoutWorkloadSelectors"},
	{Code: CodeUnreachableRule, Name: "VirtualServiceUnreachableRule"},
	{Code: CodeIneffectiveMatch, Name: "VirtualServiceIneffectiveMatch", Info: true},
	{Code: CodeSchemaWarning, Name: "SchemaWarning"},
	{Code: CodeTelemetriesWithoutSelector, Name: "MultipleTelemetriesWithoutWorkloadSelectors"},
	{Code: CodeKindNotImplemented, Name: "KindNotImplemented"},
	{Code: CodePolicyTargetRefs, Name: "PolicyTargetRefsIgnored"},
	{Code: CodeRuleNotEnforced, Name: "RuleNotEnforced"},
	{Code: CodeDryRunShadowOnly, Name: "DryRunShadowOnly"},
	{Code: CodePolicyActionPartial, Name: "PolicyActionNotImplemented"},
	{Code: CodePortLevelMTLSIgnored, Name: "PortLevelMtlsIgnored"},
	{Code: CodeSidecarEgressHostIgnored, Name: "SidecarEgressHostIgnored"},
	{Code: CodeGatewayNotServed, Name: "GatewayNotServed"},
	{Code: CodeGatewayOnlyRoutes, Name: "GatewayOnlyVirtualService"},
	{Code: CodeEndpointWithoutAddress, Name: "EndpointWithoutAddress"},
	{Code: CodeMeshConfigNotApplied, Name: "MeshConfigFieldNotApplied"},
	{Code: CodeJWKSFetchFailed, Name: "JwksFetchFailed"},
	{Code: CodeHealthReportsIgnored, Name: "HealthReportsIgnored"},
	{Code: CodeJWKSFetchUnrestricted, Name: "JwksUriFetchUnrestricted"},
	{Code: CodeSidecarFieldNotApplied, Name: "SidecarFieldNotApplied"},
	{Code: CodeTrafficPolicyNotApplied, Name: "TrafficPolicyFieldNotApplied"},
	{Code: CodeL4RouteNotApplied, Name: "L4RouteNotApplied"},
	{Code: CodeGatewayServerNotServed, Name: "GatewayServerNotServed"},
	{Code: CodeCredentialNotHeld, Name: "CredentialNotHeld"},
	{Code: CodeHTTPPortUnauthenticated, Name: "HTTPPortUnauthenticated"},
	{Code: CodeGatewayAPINotApplied, Name: "GatewayAPINotApplied"},
	{Code: CodeGatewayTLSFieldNotApplied, Name: "GatewayTLSFieldNotApplied"},
	{Code: CodeTelemetryFieldNotApplied, Name: "TelemetryFieldNotApplied"},
	{Code: CodeProxylessIgnores, Name: "ProxylessGrpcIgnores", Info: true},
	{Code: CodeShortHostMismatch, Name: "ShortHostQualifiesToNoService"},
	{Code: CodeHostNotDefined, Name: "HostNotDefined"},
	{Code: CodeWorkloadEntryUnselected, Name: "WorkloadEntryNotSelected"},
	{Code: CodeWorkloadGroupUnselected, Name: "WorkloadGroupNotSelected"},
	{Code: CodeDelegateNotExported, Name: "DelegateNotExported"},
	{Code: CodeDelegateRouteConflicts, Name: "DelegateRouteConflicts"},
	{Code: CodeAnalysisHeldBack, Name: "AnalysisHeldBack"},
}
