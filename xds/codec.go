package xds

import (
	"sync"
	"unicode/utf8"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	// The standard protobuf codec, which requestCodec wraps.
	_ "google.golang.org/grpc/encoding/proto"
)

// maxInternedNames bounds the names a Server interns; past it, names are
// decoded as usual (only the sharing is lost).
const maxInternedNames = 1 << 18

// requestCodec is the gRPC codec of vmesh's xDS servers: gRPC's protobuf
// codec, except that the resource names of a state-of-the-world
// DiscoveryRequest are interned. A SotW client repeats every name it
// subscribes to in every request, ACKs included (an Envoy with 1,000
// clusters sends 1,000 names per EDS ACK); decoding them is the largest
// cost of a push to such clients, and keeping them (go-control-plane's
// subscription holds them) the largest part of their memory. Interned,
// each name is looked up without allocating and every stream shares one
// copy. The rest of the message is decoded by protobuf itself.
type requestCodec struct {
	proto encoding.CodecV2
	names *nameTable
}

func newRequestCodec() *requestCodec {
	return &requestCodec{proto: encoding.GetCodecV2("proto"), names: &nameTable{set: map[string]string{}, max: maxInternedNames}}
}

// GRPCServerOptions returns the options a gRPC server serving s (see
// Register) should be built with: the request codec that interns
// resource names.
func (s *Server) GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(s.codec)}
}

// Name is the protobuf codec's name, so clients see no difference.
func (c *requestCodec) Name() string { return c.proto.Name() }

// Marshal is the protobuf codec's.
func (c *requestCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

// Unmarshal decodes v, interning a DiscoveryRequest's resource names.
func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*discoveryv3.DiscoveryRequest)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return decodeDiscoveryRequest(buf.ReadOnlyData(), req, c.names)
}

// resourceNamesField is DiscoveryRequest.resource_names.
const resourceNamesField protowire.Number = 3

// decodeDiscoveryRequest decodes b into req as proto.Unmarshal does
// (same result, same errors), taking resource names from names.
func decodeDiscoveryRequest(b []byte, req *discoveryv3.DiscoveryRequest, names *nameTable) error {
	// First pass: count the names and the other fields' bytes, so the
	// second allocates each slice once.
	count, restLen := 0, 0
	for in := b; len(in) > 0; {
		num, typ, n := protowire.ConsumeTag(in)
		if n < 0 {
			return proto.Unmarshal(b, req) // the library's error
		}
		m := protowire.ConsumeFieldValue(num, typ, in[n:])
		if m < 0 {
			return proto.Unmarshal(b, req)
		}
		if num == resourceNamesField && typ == protowire.BytesType {
			count++
		} else {
			restLen += n + m
		}
		in = in[n+m:]
	}
	if count == 0 {
		return proto.Unmarshal(b, req)
	}
	out := make([]string, 0, count)
	rest := make([]byte, 0, restLen)
	var missed []int
	names.mu.RLock()
	for in := b; len(in) > 0; {
		num, typ, n := protowire.ConsumeTag(in)
		m := protowire.ConsumeFieldValue(num, typ, in[n:])
		if num == resourceNamesField && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(in[n:])
			s, ok := names.set[string(v)]
			if !ok {
				if !utf8.Valid(v) {
					names.mu.RUnlock()
					return proto.Unmarshal(b, req)
				}
				s = string(v)
				missed = append(missed, len(out))
			}
			out = append(out, s)
		} else {
			rest = append(rest, in[:n+m]...)
		}
		in = in[n+m:]
	}
	names.mu.RUnlock()
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	if len(missed) > 0 {
		names.add(out, missed)
	}
	req.ResourceNames = out
	return nil
}

// nameTable interns resource names.
type nameTable struct {
	mu  sync.RWMutex
	set map[string]string
	max int
}

// add interns out[i] for each i in idx, replacing it with the interned copy
// when another request interned the same name first.
func (t *nameTable) add(out []string, idx []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, i := range idx {
		if s, ok := t.set[out[i]]; ok {
			out[i] = s
			continue
		}
		if len(t.set) >= t.max {
			return
		}
		t.set[out[i]] = out[i]
	}
}

// size returns how many names are interned.
func (t *nameTable) size() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.set)
}
