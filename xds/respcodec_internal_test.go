package xds

import (
	"bytes"
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestResponseCodecDecodesAsProto: the server codec's encoding of SotW and
// delta responses decodes to the response it encoded, references (does not
// copy) a large resource body, and is as long as proto.Marshal's.
func TestResponseCodecDecodesAsProto(t *testing.T) {
	big := &anypb.Any{TypeUrl: "type.googleapis.com/envoy.config.route.v3.RouteConfiguration", Value: bytes.Repeat([]byte{0x0a, 0x01, 'x'}, 40000)}
	small := &anypb.Any{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Value: []byte{0x0a, 0x02, 'a', 'b'}}
	empty := &anypb.Any{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"}
	cp := &corev3.ControlPlane{Identifier: "vmesh"}
	c := newRequestCodec()
	check := func(name string, m proto.Message, fresh proto.Message) {
		t.Helper()
		bs, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if bs.Len() != len(want) {
			t.Errorf("%s: %d bytes, proto.Marshal %d", name, bs.Len(), len(want))
		}
		referenced := false
		for _, b := range bs {
			if d := b.ReadOnlyData(); len(d) > 0 && &d[0] == &big.Value[0] {
				referenced = true
			}
		}
		if !referenced {
			t.Errorf("%s: the large resource body was copied", name)
		}
		if err := proto.Unmarshal(bs.Materialize(), fresh); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(fresh, m) {
			t.Errorf("%s: decodes to %v, want %v", name, fresh, m)
		}
	}
	check("sotw", &discoveryv3.DiscoveryResponse{VersionInfo: "r7@abc", Resources: []*anypb.Any{small, big, empty}, TypeUrl: big.TypeUrl, Nonce: "42", ControlPlane: cp},
		&discoveryv3.DiscoveryResponse{})
	check("delta", &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "r7", TypeUrl: big.TypeUrl, Nonce: "9", ControlPlane: cp, RemovedResources: []string{"gone"},
		Resources: []*discoveryv3.Resource{
			{Name: "a", Version: "1", Resource: big, Aliases: []string{"b"}, Ttl: durationpb.New(5)},
			{Name: "c", Version: "2", Resource: small},
			{Name: "d", Version: "3"},
		}}, &discoveryv3.DeltaDiscoveryResponse{})
	// A resource without its body encodes its other fields as proto.Marshal
	// does, the fast way or not.
	for _, r := range []*discoveryv3.Resource{
		{Name: "a", Version: "1", Aliases: []string{"b", ""}},
		{Name: "only"},
		{Version: "v"},
		{Name: "n", Ttl: durationpb.New(5)},
		{Name: "n", ResourceName: &discoveryv3.ResourceName{Name: "n"}},
		{},
	} {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendPlainResource(nil, r)
		if ok != (r.GetTtl() == nil && r.GetResourceName() == nil) {
			t.Errorf("%v: plain %v", r, ok)
		}
		if ok && !bytes.Equal(got, want) {
			t.Errorf("%v: encoded %x, proto.Marshal %x", r, got, want)
		}
	}
	// Nothing to share: the protobuf codec's encoding.
	if bs, err := c.Marshal(&discoveryv3.DiscoveryResponse{VersionInfo: "r1", TypeUrl: small.TypeUrl}); err != nil || bs.Len() == 0 {
		t.Fatalf("empty response: %v, %d bytes", err, bs.Len())
	}
}

// TestResponseCodecCopiesIntoBuffersOfTheirFinalSize: a response of 1,000
// small clusters (a sidecar's first CDS answer) is copied into buffers
// allocated at their size, not grown append by append: it allocates no
// more than a response of 10 (growing, about forty more allocations and
// copies of the whole), SotW and delta alike; a large body between small
// ones ends a buffer and the next one holds the rest.
func TestResponseCodecCopiesIntoBuffersOfTheirFinalSize(t *testing.T) {
	small := &anypb.Any{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Value: bytes.Repeat([]byte{0x0a, 0x01, 'x'}, 100)}
	big := &anypb.Any{TypeUrl: small.TypeUrl, Value: bytes.Repeat([]byte{0x0a, 0x01, 'x'}, 4000)}
	responses := func(n int) []proto.Message {
		sotw := &discoveryv3.DiscoveryResponse{VersionInfo: "r1", TypeUrl: small.TypeUrl, Nonce: "1"}
		delta := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "r1", TypeUrl: small.TypeUrl, Nonce: "1"}
		for i := range n {
			a := small
			if i == n/2 {
				a = big
			}
			sotw.Resources = append(sotw.Resources, a)
			delta.Resources = append(delta.Resources, &discoveryv3.Resource{Name: fmt.Sprintf("outbound|7070||svc-%d.ns-1.svc.cluster.local", i), Version: "abcdef0123", Resource: a})
		}
		return []proto.Message{sotw, delta}
	}
	c := newRequestCodec()
	allocs := func(m proto.Message) float64 {
		return testing.AllocsPerRun(20, func() {
			bs, _ := c.Marshal(m)
			bs.Free()
		})
	}
	few, many := responses(10), responses(1000)
	for i, m := range many {
		bs, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 3 {
			t.Errorf("%T: %d buffers, want 3 (before the large body, it, after it)", m, len(bs))
		}
		if a, a10 := allocs(m), allocs(few[i]); a > a10 {
			t.Errorf("%T: %.0f allocations per encoding of 1,000 resources, %.0f of 10", m, a, a10)
		}
	}
}
