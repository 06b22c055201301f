package xds

import (
	"hash/maphash"
	"runtime"
	"sync"
	"unicode/utf8"
	"unsafe"
	"weak"

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
// copy. The table holds names weakly: a name no stream holds any more is
// dropped from it at the next garbage collection. The rest of the message
// is decoded by protobuf itself.
type requestCodec struct {
	proto encoding.CodecV2
	names *nameTable
}

func newRequestCodec() *requestCodec {
	return &requestCodec{proto: encoding.GetCodecV2("proto"), names: newNameTable(maxInternedNames)}
}

// GRPCServerOptions returns the options a gRPC server serving s (see
// Register) should be built with: the request codec that interns
// resource names, and a write buffer of writeBufferSize (an Envoy
// sidecar's route configuration of a port is hundreds of KB: gRPC's 32 KB
// buffer writes it in that many system calls, each of which also runs the
// receiving side of loopback TCP). gRPC takes write buffers from a pool for
// each write (its default shared write buffer): no connection holds one
// while idle. The receive windows are fixed at 1 MiB, as Istio's are: a
// window gRPC sizes itself (its default) costs a PING and a WINDOW_UPDATE
// write for nearly every request an xDS client sends, and those requests
// are small.
func (s *Server) GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(s.codec),
		grpc.WriteBufferSize(writeBufferSize),
		grpc.InitialWindowSize(receiveWindow),
		grpc.InitialConnWindowSize(receiveWindow),
	}
}

const (
	// writeBufferSize is the xDS servers' gRPC write buffer.
	writeBufferSize = 256 << 10
	// receiveWindow is the xDS servers' HTTP/2 receive window, of each
	// stream and of each connection.
	receiveWindow = 1 << 20
)

// Name is the protobuf codec's name, so clients see no difference.
func (c *requestCodec) Name() string { return c.proto.Name() }

// Marshal is the protobuf codec's, except that responses reference their
// resources' shared bytes instead of copying them (respcodec.go).
func (c *requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *discoveryv3.DiscoveryResponse:
		if b, ok := marshalResponse(m); ok {
			return b, nil
		}
	case *discoveryv3.DeltaDiscoveryResponse:
		if b, ok := marshalDeltaResponse(m); ok {
			return b, nil
		}
	}
	return c.proto.Marshal(v)
}

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
			s, ok := names.lookupLocked(v)
			if !ok {
				if !utf8.Valid(v) {
					names.mu.RUnlock()
					return proto.Unmarshal(b, req)
				}
				s = heapString(v)
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

// heapString copies b into a new heap allocation (string(b) may return
// static data, which weak pointers cannot point to).
func heapString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	c := make([]byte, len(b))
	copy(c, b)
	return unsafe.String(unsafe.SliceData(c), len(c))
}

// nameTable interns resource names, weakly: it maps a name's hash to a weak
// pointer to the name's bytes, so the requests and subscriptions that hold
// a name keep it (and its entry) alive, and once none does, the bytes are
// collected and a cleanup removes the entry. A name whose hash collides
// with another live name is not interned.
type nameTable struct {
	seed maphash.Seed
	mu   sync.RWMutex
	set  map[uint64]internedName
	max  int
	// peak is the most entries set held since it was last rebuilt: Go
	// maps do not shrink, so set is copied once it falls to a quarter.
	peak int
}

// internedName is one interned name: its bytes, weakly, and its length.
type internedName struct {
	data weak.Pointer[byte]
	n    int
}

func newNameTable(max int) *nameTable {
	return &nameTable{seed: maphash.MakeSeed(), set: map[uint64]internedName{}, max: max}
}

// lookupLocked returns the interned copy of v, if any. Callers hold t.mu
// (read or write).
func (t *nameTable) lookupLocked(v []byte) (string, bool) {
	e, ok := t.set[maphash.Bytes(t.seed, v)]
	if !ok || e.n != len(v) {
		return "", false
	}
	p := e.data.Value()
	if p == nil {
		return "", false // collected; its cleanup removes the entry
	}
	if s := unsafe.String(p, e.n); s == string(v) {
		return s, true
	}
	return "", false
}

// add interns out[i] for each i in idx, replacing it with the interned copy
// when another request interned the same name first.
func (t *nameTable) add(out []string, idx []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, i := range idx {
		name := out[i]
		if name == "" {
			continue
		}
		if s, ok := t.lookupLocked(unsafe.Slice(unsafe.StringData(name), len(name))); ok {
			out[i] = s
			continue
		}
		h := maphash.String(t.seed, name)
		if e, ok := t.set[h]; ok && e.data.Value() != nil {
			continue // a live name with the same hash
		}
		if len(t.set) >= t.max {
			return
		}
		data := unsafe.StringData(name)
		t.set[h] = internedName{data: weak.Make(data), n: len(name)}
		t.peak = max(t.peak, len(t.set))
		runtime.AddCleanup(data, t.release, h)
	}
}

// release removes the entry of hash h once its name is collected (and not
// interned again since).
func (t *nameTable) release(h uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.set[h]; ok && e.data.Value() == nil {
		delete(t.set, h)
	}
	if t.peak > 1024 && len(t.set) < t.peak/4 {
		set := make(map[uint64]internedName, len(t.set))
		for k, v := range t.set {
			set[k] = v
		}
		t.set, t.peak = set, len(set)
	}
}

// size returns how many names are interned.
func (t *nameTable) size() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.set)
}
