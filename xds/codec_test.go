package xds

import (
	"fmt"
	"testing"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func requestSeeds(t testing.TB) [][]byte {
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": "ns-0"})
	reqs := []*discoveryv3.DiscoveryRequest{
		{TypeUrl: resourcev3.ClusterType},
		{Node: &corev3.Node{Id: "p", Metadata: md}, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"a", "b", "outbound|80||a.ns.svc.cluster.local"}},
		{VersionInfo: "r1@abc", ResponseNonce: "7", TypeUrl: resourcev3.RouteType, ResourceNames: []string{"x", "x", ""}},
		{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"a"}, ErrorDetail: &status.Status{Code: 3, Message: "bad"}, ResourceLocators: []*discoveryv3.ResourceLocator{{Name: "l"}}},
	}
	var out [][]byte
	for _, r := range reqs {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	// Names interleaved with other fields and an unknown field.
	b := protowire.AppendTag(nil, resourceNamesField, protowire.BytesType)
	b = protowire.AppendString(b, "first")
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendString(b, resourcev3.ListenerType)
	b = protowire.AppendTag(b, 99, protowire.VarintType)
	b = protowire.AppendVarint(b, 5)
	b = protowire.AppendTag(b, resourceNamesField, protowire.BytesType)
	b = protowire.AppendString(b, "second")
	out = append(out, b)
	// Invalid UTF-8 in a name, and a name field with the wrong wire type.
	bad := protowire.AppendTag(nil, resourceNamesField, protowire.BytesType)
	bad = protowire.AppendBytes(bad, []byte{0xff, 0xfe})
	wrong := protowire.AppendTag(nil, resourceNamesField, protowire.VarintType)
	wrong = protowire.AppendVarint(wrong, 1)
	return append(out, bad, wrong, []byte{0x1a, 0x05, 'a'})
}

// FuzzDecodeDiscoveryRequest checks that the interning decoder agrees with
// proto.Unmarshal on every input: the same message, or an error for both.
func FuzzDecodeDiscoveryRequest(f *testing.F) {
	for _, b := range requestSeeds(f) {
		f.Add(b)
	}
	names := newNameTable(64)
	f.Fuzz(func(t *testing.T, b []byte) {
		want, got := &discoveryv3.DiscoveryRequest{}, &discoveryv3.DiscoveryRequest{ResourceNames: []string{"stale"}}
		werr := proto.Unmarshal(b, want)
		gerr := decodeDiscoveryRequest(b, got, names)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("proto.Unmarshal error %v, decoder error %v", werr, gerr)
		}
		if werr == nil && !proto.Equal(want, got) {
			t.Fatalf("decoded %v, want %v", got, want)
		}
	})
}

func TestDecodeDiscoveryRequestMatchesProto(t *testing.T) {
	names := newNameTable(64)
	for i, b := range requestSeeds(t) {
		want, got := &discoveryv3.DiscoveryRequest{}, &discoveryv3.DiscoveryRequest{}
		werr := proto.Unmarshal(b, want)
		gerr := decodeDiscoveryRequest(b, got, names)
		if (werr == nil) != (gerr == nil) || (werr == nil && !proto.Equal(want, got)) {
			t.Errorf("seed %d: decoded %v (%v), want %v (%v)", i, got, gerr, want, werr)
		}
	}
}

// TestRequestCodecSharesNames checks what interning buys: two requests
// naming the same resources decode to the same string data, and the table
// stops growing at its bound without losing names.
func TestRequestCodecSharesNames(t *testing.T) {
	c := newRequestCodec()
	c.names.max = 3
	decode := func(names ...string) *discoveryv3.DiscoveryRequest {
		t.Helper()
		b, err := proto.Marshal(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names, ResponseNonce: "1"})
		if err != nil {
			t.Fatal(err)
		}
		req := &discoveryv3.DiscoveryRequest{}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, req); err != nil {
			t.Fatal(err)
		}
		if req.GetTypeUrl() != resourcev3.EndpointType || req.GetResponseNonce() != "1" {
			t.Fatalf("other fields lost: %v", req)
		}
		return req
	}
	// (Names longer than a byte: Go shares one-byte strings anyway.)
	a := decode("name-a", "name-b")
	b := decode("name-b", "name-a", "name-c", "name-d")
	if fmt.Sprint(b.GetResourceNames()) != "[name-b name-a name-c name-d]" {
		t.Fatalf("names %v", b.GetResourceNames())
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(a.ResourceNames[0], b.ResourceNames[1]) || !same(a.ResourceNames[1], b.ResourceNames[0]) {
		t.Fatal("the same name decoded twice is not shared")
	}
	if n := c.names.size(); n != 3 {
		t.Fatalf("%d names interned, want the bound 3", n)
	}
	if d := decode("name-d"); d.ResourceNames[0] != "name-d" || same(d.ResourceNames[0], b.ResourceNames[3]) {
		t.Fatal("a name past the bound is not decoded afresh")
	}
	// Other messages go to the protobuf codec.
	delta := &discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a"}}
	bs, err := c.Marshal(delta)
	if err != nil {
		t.Fatal(err)
	}
	got := &discoveryv3.DeltaDiscoveryRequest{}
	if err := c.Unmarshal(bs, got); err != nil || !proto.Equal(got, delta) {
		t.Fatalf("delta request round trip: %v, %v", got, err)
	}
}

// BenchmarkDecodeEnvoyACK decodes the state-of-the-world EDS ACK of an
// Envoy that holds 1,200 clusters (1,200 names, repeated in every ACK):
// protobuf's decoder against the interning one, once its names are known.
func BenchmarkDecodeEnvoyACK(b *testing.B) {
	names := make([]string, 1200)
	for i := range names {
		names[i] = fmt.Sprintf("outbound|7070||svc-%04d.ns-%d.svc.cluster.local", i, i%10)
	}
	msg, err := proto.Marshal(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names, VersionInfo: "r12", ResponseNonce: "34"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(msg, &discoveryv3.DiscoveryRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("interned", func(b *testing.B) {
		table := newNameTable(maxInternedNames)
		b.ReportAllocs()
		for b.Loop() {
			if err := decodeDiscoveryRequest(msg, &discoveryv3.DiscoveryRequest{}, table); err != nil {
				b.Fatal(err)
			}
		}
	})
}
