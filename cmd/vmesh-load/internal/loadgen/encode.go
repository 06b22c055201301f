package loadgen

import (
	"fmt"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	// The standard protobuf codec, which clientCodec wraps.
	_ "google.golang.org/grpc/encoding/proto"
)

// encodedRequest is a state-of-the-world request whose resource names are
// already encoded: a simulated Envoy repeats the same 1,000 names in every
// ACK, and encoding them again each time would be harness CPU taken from
// the server under test on a shared machine (a real proxy runs elsewhere).
type encodedRequest struct {
	head  *discoveryv3.DiscoveryRequest // everything but the resource names
	names []byte                        // resource_names, encoded
}

// encodeNames encodes names as DiscoveryRequest.resource_names fields.
func encodeNames(names []string) []byte {
	var b []byte
	for _, n := range names {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, n)
	}
	return b
}

// clientCodec is the simulated proxies' gRPC codec: protobuf, plus
// encodedRequest.
type clientCodec struct{ proto encoding.CodecV2 }

func newClientCodec() clientCodec { return clientCodec{proto: encoding.GetCodecV2("proto")} }

func (c clientCodec) Name() string { return c.proto.Name() }

func (c clientCodec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*encodedRequest)
	if !ok {
		return c.proto.Marshal(v)
	}
	head, err := proto.Marshal(r.head)
	if err != nil {
		return nil, fmt.Errorf("loadgen: encoding a request: %w", err)
	}
	return mem.BufferSlice{mem.SliceBuffer(append(head, r.names...))}, nil
}

func (c clientCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }
