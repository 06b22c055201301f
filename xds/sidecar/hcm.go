package sidecar

import (
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	uuidv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/request_id/uuid/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// istioHCM sets what Istio's sidecars set on every HTTP connection
// manager: no stream idle timeout (Envoy's 5 minutes would reset long-lived
// gRPC streams and slow downloads), WebSocket upgrades, paths normalised
// before routing and authorization (RFC 3986; escaped slashes kept, as
// Istio's default), 100-continue proxied, and UUID request ids that also
// decide trace sampling. An inbound one also names the server istio-envoy
// and tells the workload its client's identity in x-forwarded-client-cert
// (appended, with the certificate's subject, URI and DNS SANs).
func istioHCM(h *hcmv3.HttpConnectionManager, inbound bool) *hcmv3.HttpConnectionManager {
	h.StreamIdleTimeout = durationpb.New(0)
	h.UseRemoteAddress = wrapperspb.Bool(false) // the peer's address is not the client's: trust x-forwarded-for as Istio does
	h.Proxy_100Continue = true
	h.UpgradeConfigs = []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}}
	h.NormalizePath = wrapperspb.Bool(true)
	h.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_KEEP_UNCHANGED
	h.RequestIdExtension = &hcmv3.RequestIDExtension{TypedConfig: mustAny(&uuidv3.UuidRequestIdConfig{UseRequestIdForTraceSampling: wrapperspb.Bool(true)})}
	if inbound {
		h.ServerName = "istio-envoy"
		h.ForwardClientCertDetails = hcmv3.HttpConnectionManager_APPEND_FORWARD
		h.SetCurrentClientCertDetails = &hcmv3.HttpConnectionManager_SetCurrentClientCertDetails{Subject: wrapperspb.Bool(true), Dns: true, Uri: true}
	}
	return h
}
