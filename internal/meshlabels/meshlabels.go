// Package meshlabels names the Istio labels and annotations that several
// layers of vmesh read or write: the agent sets them on its node, the
// registries and registrations write them on WorkloadEntries, the Store and
// the model read them, and the sidecar generator matches on them. It holds
// names only, so that every layer, the agent included, may import it.
package meshlabels

// HealthChecksAnnotation marks a WorkloadEntry whose health is reported by
// its agent: it is an endpoint only while known healthy (Istio's
// proxy.istio.io/health-checks-enabled, read as strconv.ParseBool reads it).
const HealthChecksAnnotation = "proxy.istio.io/health-checks-enabled"

// TLSModeLabel marks an endpoint whose traffic an Envoy sidecar terminates:
// Envoy clients use automatic mTLS toward endpoints labelled
// TLSModeLabel=TLSModeIstio and plaintext toward the rest (Istio's rule, set
// by Istio's sidecar injector on pods; vmesh's agent sets it on its node).
const (
	TLSModeLabel = "security.istio.io/tlsMode"
	TLSModeIstio = "istio"
)
