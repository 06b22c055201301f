package xds

import "context"

// HealthInfoType is the type URL agents use to report their workload's
// health on an ADS stream, as Istio's agent does: a DiscoveryRequest with no
// error_detail means healthy, one with error_detail means unhealthy (its
// message says why). vmesh never answers it.
const HealthInfoType = "type.googleapis.com/istio.v1.HealthInformation"

// CredentialsType is the type URL a vmesh agent reports the file
// credentials it holds with, on each of its Envoy's ADS streams: a request
// whose resource names (delta: resource_names_subscribe) are the secrets
// it serves over SDS by their plain names ("<credentialName>" for a
// certificate and key, "<credentialName>-cacert" for roots; certificate
// files by Istio's names "file-cert:<cert>~<key>", "file-root:<ca>"), and
// "refused:<name>\t<reason>" for each certificate file name its Envoy asked
// for that the agent refuses (internal/filecert). Each report replaces the
// last. vmesh never answers it.
const CredentialsType = "type.googleapis.com/vmesh.v1.HeldCredentials"

// Observer learns about proxy streams and health reports, for
// auto-registration. Calls for one stream arrive in order; calls for
// different streams may be concurrent. Methods must not block for long.
type Observer interface {
	// StreamOpened is called once per stream, at its first request. ctx is
	// the stream's context (its peer carries the client certificate). An
	// error refuses the stream: the server ends it with that error (a gRPC
	// status, e.g. a *refusal.Refusal).
	StreamOpened(ctx context.Context, stream int64, p *Proxy) error
	// StreamClosed is called when a stream that was opened ends.
	StreamClosed(stream int64, p *Proxy)
	// Health reports the workload's health as its agent sees it.
	Health(stream int64, p *Proxy, healthy bool, message string)
	// Credentials reports the file credentials' secrets the proxy's agent
	// holds (CredentialsType), each report replacing the last.
	Credentials(stream int64, p *Proxy, held []string)
}

// streamKey numbers SotW and delta streams apart for observers: delta
// streams get negative numbers.
func (id streamID) key() int64 {
	if id.delta {
		return -id.id
	}
	return id.id
}
