// Package translate holds what the proxyless gRPC generator (package xds)
// and the Envoy sidecar generator (package xds/sidecar) share: Istio's
// outbound cluster names and the translations of Istio API values
// (HTTP matches, faults, percentages, hash policies, localities) into Envoy
// API values. Every function is pure.
package translate

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// ADSConfigSource is a config source that names the ADS stream.
func ADSConfigSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// MustAny packs a message known to marshal (every generated message is),
// deterministically: equal messages give equal bytes even with maps inside
// (RBAC policies, metadata), so a resource's content hash changes only when
// its content does.
func MustAny(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(fmt.Sprintf("translate: packing %T: %v", m, err))
	}
	return a
}

// SocketAddress returns a TCP socket address.
func SocketAddress(addr string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       addr,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// Locality parses "region/zone/subzone" (any suffix may be missing).
func Locality(l string) *corev3.Locality {
	region, rest, _ := strings.Cut(l, "/")
	zone, subzone, _ := strings.Cut(rest, "/")
	return &corev3.Locality{Region: region, Zone: zone, SubZone: subzone}
}
