package model

import (
	"strings"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// MeshFromConfig returns the mesh settings of an Istio MeshConfig (as
// filestore.DecodeMeshConfig reads it, Istio's defaults filled in); nil is
// DefaultMesh().
func MeshFromConfig(mc *meshv1alpha1.MeshConfig) Mesh {
	m := DefaultMesh()
	if mc == nil {
		return m
	}
	if mc.GetRootNamespace() != "" {
		m.RootNamespace = mc.GetRootNamespace()
	}
	if mc.GetTrustDomain() != "" {
		m.TrustDomain = mc.GetTrustDomain()
	}
	m.TrustDomainAliases = strings.Join(mc.GetTrustDomainAliases(), ",")
	m.MTLSCipherSuites = strings.Join(mc.GetMeshMTLS().GetCipherSuites(), ",")
	m.MTLSMinTLS13 = mc.GetMeshMTLS().GetMinProtocolVersion() == meshv1alpha1.MeshConfig_TLSConfig_TLSV1_3
	m.DefaultHTTPRetry = mc.GetDefaultHttpRetryPolicy()
	if d := mc.GetConnectTimeout(); d != nil && d.AsDuration() > 0 {
		m.ConnectTimeout = d.AsDuration()
	}
	if d := mc.GetDnsRefreshRate(); d != nil && d.AsDuration() > 0 {
		m.DNSRefreshRate = d.AsDuration()
	}
	if ps := mc.GetExtensionProviders(); len(ps) > 0 {
		m.ExtensionProviders = &ExtensionProviders{List: ps}
	}
	m.RegistryOnly = mc.GetOutboundTrafficPolicy() != nil && mc.GetOutboundTrafficPolicy().GetMode() == meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY
	if ea := mc.GetEnableAutoMtls(); ea != nil && !ea.GetValue() {
		m.DisableAutoMTLS = true
	}
	m.LocalityLB = mc.GetLocalityLbSetting()
	m.H2Upgrade = mc.GetH2UpgradePolicy() == meshv1alpha1.MeshConfig_UPGRADE
	m.TCPKeepalive = mc.GetTcpKeepalive()
	m.InboundLocalhost = mc.GetInboundTrafficPolicy().GetMode() == meshv1alpha1.MeshConfig_InboundTrafficPolicy_LOCALHOST
	m.AccessLog = AccessLog{File: mc.GetAccessLogFile(), JSON: mc.GetAccessLogEncoding() == meshv1alpha1.MeshConfig_JSON, Format: mc.GetAccessLogFormat(),
		DefaultProviders: strings.Join(mc.GetDefaultProviders().GetAccessLogging(), ",")}
	m.Tracing = Tracing{Disabled: !mc.GetEnableTracing(), Proxy: mc.GetDefaultConfig().GetTracing()}
	if ps := mc.GetDefaultProviders().GetTracing(); len(ps) > 0 {
		m.Tracing.DefaultProvider = ps[0]
	}
	m.ExportTo = ExportToDefaults{
		Services:         strings.Join(mc.GetDefaultServiceExportTo(), ","),
		VirtualServices:  strings.Join(mc.GetDefaultVirtualServiceExportTo(), ","),
		DestinationRules: strings.Join(mc.GetDefaultDestinationRuleExportTo(), ","),
	}
	return m
}
