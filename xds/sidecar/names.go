// Package sidecar generates Envoy sidecar configuration (listeners, routes,
// clusters and endpoints) from the model, in Istio's sidecar layout: an
// outbound virtual listener on 15001 that hands connections to per-port
// listeners by original destination, an inbound virtual listener on 15006
// with one filter chain per workload port, outbound clusters named
// "outbound|port|subset|host" over EDS (ADS) with TLS from SDS, and inbound
// clusters "inbound|port||" to the workload at the address each connection
// was sent to (bound to 127.0.0.6, which the capture lets through).
//
// Every function here is pure: it reads a model.Snapshot and a Proxy and
// returns new messages. The package does not import xds; xds dispatches to
// it for proxies whose generator is not "grpc".
package sidecar

import (
	"strconv"
	"strings"
)

// Istio's sidecar ports.
const (
	// OutboundPort is the port iptables redirects outbound traffic to.
	OutboundPort = 15001
	// InboundPort is the port iptables redirects inbound traffic to.
	InboundPort = 15006
)

// Names of the fixed listeners and clusters, Istio's.
const (
	VirtualOutboundListener   = "virtualOutbound"
	VirtualInboundListener    = "virtualInbound"
	PassthroughCluster        = "PassthroughCluster"
	BlackHoleCluster          = "BlackHoleCluster"
	InboundPassthroughCluster = "InboundPassthroughCluster"
)

// SDS: the agent serves these secrets on a Unix socket, reached through the
// static cluster SDSCluster of the Envoy bootstrap (agents/bootstrap).
const (
	SDSCluster       = "sds-grpc"
	SecretDefault    = "default"
	SecretRootCA     = "ROOTCA"
	transportMatchNS = "envoy.transport_socket_match"
)

// Filter and extension names.
const (
	hcmFilter              = "envoy.filters.network.http_connection_manager"
	tcpProxyFilter         = "envoy.filters.network.tcp_proxy"
	mongoProxyFilter       = "envoy.filters.network.mongo_proxy"
	faultFilter            = "envoy.filters.http.fault"
	corsFilter             = "envoy.filters.http.cors"
	routerFilter           = "envoy.filters.http.router"
	originalDstFilter      = "envoy.filters.listener.original_dst"
	tlsInspector           = "envoy.filters.listener.tls_inspector"
	httpInspector          = "envoy.filters.listener.http_inspector"
	tlsTransport           = "envoy.transport_sockets.tls"
	rawTransport           = "envoy.transport_sockets.raw_buffer"
	proxyProtocolTransport = "envoy.transport_sockets.upstream_proxy_protocol"
	httpProtocolOpts       = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// InboundClusterName returns Istio's inbound cluster name for a workload
// port, "inbound|port||".
func InboundClusterName(port uint32) string { return "inbound|" + itoa(port) + "||" }

// RouteName returns the name of the outbound route configuration shared by
// every HTTP service on a port: the port number, as Istio names it.
func RouteName(port uint32) string { return itoa(port) }

// ListenerName returns the name of an outbound listener on addr:port,
// Istio's "addr_port" (e.g. "0.0.0.0_8080", "240.240.0.1_3306").
func ListenerName(addr string, port uint32) string { return addr + "_" + itoa(port) }

// SNI returns the server name an outbound mTLS connection presents,
// Istio's "outbound_.port_.subset_.host".
func SNI(port uint32, subset, host string) string {
	return "outbound_." + itoa(port) + "_." + subset + "_." + host
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// isHTTP reports whether a service port protocol is served by an
// HttpConnectionManager (Istio's HTTP family); the rest is TCP.
func isHTTP(protocol string) bool {
	switch strings.ToUpper(protocol) {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB", "HTTP_PROXY":
		return true
	}
	return false
}

// isHTTP2 reports whether upstream connections for the protocol use HTTP/2.
func isHTTP2(protocol string) bool {
	switch strings.ToUpper(protocol) {
	case "HTTP2", "GRPC", "GRPC-WEB":
		return true
	}
	return false
}
