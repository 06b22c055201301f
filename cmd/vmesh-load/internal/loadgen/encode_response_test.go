package loadgen

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// split cuts b into buffers of n bytes, as gRPC hands a message over.
func split(b []byte, n int) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	return out
}

// TestResponseDecodersReadWhatProtobufReads checks the simulated proxies'
// response decoders against protobuf's: each field they keep is what
// proto.Unmarshal reads, over responses in many pieces, with fields they
// skip (canary, control_plane, TTLs) in between, and through reuse (a
// response after a bigger one keeps nothing of it).
func TestResponseDecodersReadWhatProtobufReads(t *testing.T) {
	cp := &corev3.ControlPlane{Identifier: "cp"}
	sotw := func(n int) *discoveryv3.DiscoveryResponse {
		m := &discoveryv3.DiscoveryResponse{VersionInfo: fmt.Sprint("v", n), Canary: true, TypeUrl: "type.example/T", Nonce: fmt.Sprint("n", n), ControlPlane: cp}
		for i := range n {
			m.Resources = append(m.Resources, &anypb.Any{TypeUrl: "type.example/R", Value: []byte(fmt.Sprintf("resource %d of %d", i, n))})
		}
		return m
	}
	delta := func(n int) *discoveryv3.DeltaDiscoveryResponse {
		m := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: fmt.Sprint("s", n), TypeUrl: "type.example/T", Nonce: fmt.Sprint("n", n), ControlPlane: cp}
		for i := range n {
			r := &discoveryv3.Resource{Name: fmt.Sprint("r", i), Version: fmt.Sprint("v", i), Ttl: durationpb.New(1)}
			if i%3 != 2 { // a resource with no body: a TTL heartbeat
				r.Resource = &anypb.Any{TypeUrl: "type.example/R", Value: []byte(fmt.Sprintf("body %d of %d", i, n))}
			}
			if i%2 == 1 {
				r.Aliases = []string{"a", fmt.Sprint("b", i)}
			}
			m.Resources = append(m.Resources, r)
			m.RemovedResources = append(m.RemovedResources, fmt.Sprint("gone", i))
		}
		return m
	}
	var s sotwResponse
	var d deltaResponse
	for _, n := range []int{5, 0, 3, 1, 40} {
		for _, piece := range []int{1, 7, 1 << 20} {
			want := sotw(n)
			b, err := proto.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.decode(split(b, piece)); err != nil {
				t.Fatal(err)
			}
			want.Canary, want.ControlPlane = false, nil // not read
			if !proto.Equal(&s.msg, want) {
				t.Errorf("state of the world, %d resources in %d-byte pieces:\n got %v\nwant %v", n, piece, &s.msg, want)
			}
			wantD := delta(n)
			if b, err = proto.Marshal(wantD); err != nil {
				t.Fatal(err)
			}
			if err := d.decode(split(b, piece)); err != nil {
				t.Fatal(err)
			}
			wantD.ControlPlane = nil
			for _, r := range wantD.Resources {
				r.Ttl = nil
			}
			if !proto.Equal(&d.msg, wantD) {
				t.Errorf("delta, %d resources in %d-byte pieces:\n got %v\nwant %v", n, piece, &d.msg, wantD)
			}
		}
	}
	if err := s.decode(split([]byte{0x12, 0x05, 0x0a}, 8)); err == nil {
		t.Error("a truncated response decoded")
	}
	if err := d.decode(split([]byte{0x12, 0x05, 0x0a}, 8)); err == nil {
		t.Error("a truncated delta response decoded")
	}
}
