package filestore_test

import (
	"strings"
	"testing"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/vmesh/vmesh/filestore"
)

func TestMeshConfigOverIstioDefaults(t *testing.T) {
	mc, errs := filestore.DecodeMeshConfig("mesh.yaml", []byte(`# the mesh key of istiod's ConfigMap
trustDomain: example.org
outboundTrafficPolicy:
  mode: REGISTRY_ONLY
connectTimeout: 3s
defaultHttpRetryPolicy:
  attempts: 0
defaultConfig:
  discoveryAddress: cp.example.internal:15012
  proxyMetadata:
    ISTIO_META_DNS_CAPTURE: "true"
extensionProviders:
- name: authz
  envoyExtAuthzGrpc: {service: authz.example.internal, port: 9000}
`))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if mc.GetTrustDomain() != "example.org" || mc.GetOutboundTrafficPolicy().GetMode() != meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY ||
		mc.GetConnectTimeout().AsDuration() != 3*time.Second || mc.GetDefaultHttpRetryPolicy() == nil || mc.GetDefaultHttpRetryPolicy().GetAttempts() != 0 {
		t.Errorf("set fields not applied: %v", mc)
	}
	// Istio's defaults for what the file leaves out.
	if mc.GetRootNamespace() != "istio-system" || !mc.GetEnableAutoMtls().GetValue() || strings.Join(mc.GetDefaultServiceExportTo(), ",") != "*" ||
		!mc.GetLocalityLbSetting().GetEnabled().GetValue() {
		t.Errorf("defaults lost: %v", mc)
	}
	if mc.GetDefaultConfig().GetDiscoveryAddress() != "cp.example.internal:15012" || mc.GetDefaultConfig().GetProxyMetadata()["ISTIO_META_DNS_CAPTURE"] != "true" {
		t.Errorf("defaultConfig = %v", mc.GetDefaultConfig())
	}
	if len(mc.GetExtensionProviders()) != 1 || mc.GetExtensionProviders()[0].GetEnvoyExtAuthzGrpc().GetService() != "authz.example.internal" {
		t.Errorf("extensionProviders = %v", mc.GetExtensionProviders())
	}

	if mc, errs := filestore.DecodeMeshConfig("mesh.yaml", nil); len(errs) > 0 || mc.GetConnectTimeout().AsDuration() != 10*time.Second || mc.GetTrustDomain() != "cluster.local" {
		t.Errorf("empty file = %v %v, want Istio's defaults", mc, errs)
	}
}

func TestMeshConfigErrorsNameLineAndField(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"trustDomain: a\nconectTimeout: 1s\n", `mesh.yaml:2: conectTimeout: unknown field "conectTimeout" of MeshConfig`},
		{"defaultConfig:\n  discoveryAdress: x\n", `mesh.yaml:2: defaultConfig.discoveryAdress: unknown field`},
		{"trustDomain: a\nconnectTimeout: 0.5ms\n", `mesh.yaml:2: connectTimeout: invalid google.protobuf.Duration value "0.5ms"`},
		{"trustDomain: a\nconnectTimeout: 0.0005s\n", "mesh.yaml:2: connectTimeout: must be at least 1ms"},
		{"outboundTrafficPolicy:\n  mode: OPEN\n", `mesh.yaml:2: outboundTrafficPolicy.mode: invalid value for enum field mode: "OPEN"`},
		{"rootNamespace: Istio_System\n", `mesh.yaml:1: rootNamespace: "Istio_System" is not a namespace name`},
		{"extensionProviders:\n- name: a\n  envoyExtAuthzGrpc: {service: x, port: 1}\n- name: a\n  envoyExtAuthzHttp: {service: y, port: 2}\n", `extensionProviders[1].name: "a" is defined twice`},
		{"trustDomain: [a\n", "mesh.yaml:1:"},
		// trustDomainAliases: each a trust domain as Istio's
		// ValidateTrustDomain checks one.
		{"trustDomainAliases: [old.example, a/b]\n", `mesh.yaml:1: trustDomainAliases[1]: "a/b" is not a trust domain`},
		{"trustDomainAliases: [\"\"]\n", `trustDomainAliases[0]: "" is not a trust domain: empty`},
		{"trustDomainAliases: [Old.Example]\n", `trustDomainAliases[0]: "Old.Example" is not a trust domain`},
		// meshMTLS: no ECDH curves, as Istio's ValidateMeshTLSConfig.
		{"meshMTLS:\n  ecdhCurves: [P-256]\n", `mesh.yaml:1: meshMTLS.ecdhCurves: mesh TLS does not support ECDH curves configuration`},
	} {
		mc, errs := filestore.DecodeMeshConfig("mesh.yaml", []byte(tc.yaml))
		if mc != nil || len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("%q: %v %v, want an error containing %q", tc.yaml, mc, errs, tc.want)
		}
	}
}
