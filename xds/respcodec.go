package xds

import (
	"encoding/binary"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Responses carry resources serialised once per generation (resource.Any)
// and shared by every stream they are sent to. gRPC's protobuf codec would
// copy each of them into a new buffer per response: an Envoy sidecar's
// route configuration of a port with 1,000 services is ~300 KB, so a
// VirtualService change on 1,000 sidecars would allocate and copy 300 MB
// before gRPC copies it again into its frames. The server's codec instead
// hands gRPC the shared bytes as they are: the response's other fields
// and each resource's header are encoded into small buffers, the resource
// bodies are referenced, not copied. The encoding is a valid one of the
// same message (its fields in another order than proto.Marshal's: the
// resources last), which every protobuf parser decodes to the same message
// (TestResponseCodecDecodesAsProto).

// inlineValue is the size under which a resource body is copied into the
// surrounding buffer rather than referenced (a buffer per small resource
// costs more than the copy).
const inlineValue = 2048

// responseWriter builds a response's encoding as buffers. left is an
// upper bound of the bytes still to be copied (the resources' headers and
// small bodies; each write subtracts its share first), so that each buffer
// is allocated once at its final size: a sidecar's first response of 1,000
// clusters, grown by append, spent a fifth of a connection storm's CPU
// copying and clearing.
type responseWriter struct {
	out  mem.BufferSlice
	cur  []byte
	left int
}

// newResponseWriter returns a writer whose first buffer starts with head
// and has room for inline more bytes.
func newResponseWriter(head []byte, inline int) *responseWriter {
	return &responseWriter{cur: append(make([]byte, 0, len(head)+inline), head...), left: inline}
}

func (w *responseWriter) bytes(b []byte) {
	if len(b) < inlineValue {
		w.cur = append(w.cur, b...)
		return
	}
	if len(w.cur) > 0 {
		w.out = append(w.out, mem.SliceBuffer(w.cur))
	}
	w.out = append(w.out, mem.SliceBuffer(b))
	w.cur = make([]byte, 0, w.left)
}

func (w *responseWriter) done() mem.BufferSlice {
	if len(w.cur) > 0 {
		w.out = append(w.out, mem.SliceBuffer(w.cur))
	}
	return w.out
}

// anySize is the encoded size of an Any.
func anySize(a *anypb.Any) int {
	n := 0
	if tu := a.GetTypeUrl(); tu != "" {
		n += 1 + protowire.SizeBytes(len(tu))
	}
	if v := a.GetValue(); len(v) > 0 {
		n += 1 + protowire.SizeBytes(len(v))
	}
	return n
}

// anyInline is how many bytes writeAny copies for a (its field's tag and
// length included; fields 2 of a response and of a Resource): all of it
// but a body of inlineValue or more.
func anyInline(a *anypb.Any) int {
	size := anySize(a)
	n := 1 + protowire.SizeVarint(uint64(size)) + size
	if v := a.GetValue(); len(v) >= inlineValue {
		n -= len(v)
	}
	return n
}

// writeAny writes field num holding a.
func (w *responseWriter) writeAny(num protowire.Number, a *anypb.Any) {
	w.left -= anyInline(a)
	w.cur = protowire.AppendTag(w.cur, num, protowire.BytesType)
	w.cur = protowire.AppendVarint(w.cur, uint64(anySize(a)))
	if tu := a.GetTypeUrl(); tu != "" {
		w.cur = protowire.AppendTag(w.cur, 1, protowire.BytesType)
		w.cur = protowire.AppendString(w.cur, tu)
	}
	if v := a.GetValue(); len(v) > 0 {
		w.cur = protowire.AppendTag(w.cur, 2, protowire.BytesType)
		w.cur = protowire.AppendVarint(w.cur, uint64(len(v)))
		w.bytes(v)
	}
}

// plainAny reports whether a is an Any with nothing but its two fields.
func plainAny(a *anypb.Any) bool { return a != nil && len(a.ProtoReflect().GetUnknown()) == 0 }

// without returns a new message of m's type holding m's fields but the
// field numbered skip (shared, not copied), and whether m had no unknown
// fields.
func without[M proto.Message](m M, skip protowire.Number, shell M) (M, bool) {
	r := m.ProtoReflect()
	if len(r.GetUnknown()) > 0 {
		return shell, false
	}
	sr := shell.ProtoReflect()
	r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() != skip {
			sr.Set(fd, v)
		}
		return true
	})
	return shell, true
}

// marshalResponse encodes a DiscoveryResponse; ok is false when it cannot
// (the caller then uses the protobuf codec).
func marshalResponse(m *discoveryv3.DiscoveryResponse) (mem.BufferSlice, bool) {
	const resources = 2
	shell, ok := without(m, resources, &discoveryv3.DiscoveryResponse{})
	if !ok || len(m.GetResources()) == 0 {
		return nil, false
	}
	head, err := proto.MarshalOptions{Deterministic: true}.Marshal(shell)
	if err != nil {
		return nil, false
	}
	inline := 0
	for _, a := range m.GetResources() {
		if !plainAny(a) {
			return nil, false
		}
		inline += anyInline(a)
	}
	w := newResponseWriter(head, inline)
	for _, a := range m.GetResources() {
		w.writeAny(resources, a)
	}
	return w.done(), true
}

// marshalDeltaResponse encodes a DeltaDiscoveryResponse; ok is false when
// it cannot.
func marshalDeltaResponse(m *discoveryv3.DeltaDiscoveryResponse) (mem.BufferSlice, bool) {
	const resources, body = 2, 2 // DeltaDiscoveryResponse.resources, Resource.resource
	shell, ok := without(m, resources, &discoveryv3.DeltaDiscoveryResponse{})
	if !ok || len(m.GetResources()) == 0 {
		return nil, false
	}
	opts := proto.MarshalOptions{Deterministic: true}
	head, err := opts.Marshal(shell)
	if err != nil {
		return nil, false
	}
	inline := 0
	for _, r := range m.GetResources() {
		a := r.GetResource()
		if a != nil && !plainAny(a) {
			return nil, false
		}
		inline += resourceHeaderBound(r)
		if a != nil {
			inline += anyInline(a)
		}
	}
	w := newResponseWriter(head, inline)
	var rb []byte
	for _, r := range m.GetResources() {
		a := r.GetResource()
		if rb, ok = appendPlainResource(rb[:0], r); !ok {
			rs, ok := without(r, body, &discoveryv3.Resource{})
			if !ok {
				return nil, false
			}
			if rb, err = opts.Marshal(rs); err != nil {
				return nil, false
			}
		}
		size := len(rb)
		if a != nil {
			size += 1 + protowire.SizeBytes(anySize(a))
		}
		w.left -= resourceHeaderBound(r)
		w.cur = protowire.AppendTag(w.cur, resources, protowire.BytesType)
		w.cur = protowire.AppendVarint(w.cur, uint64(size))
		w.cur = append(w.cur, rb...)
		if a != nil {
			w.writeAny(body, a)
		}
	}
	return w.done(), true
}

// resourceHeaderBound is an upper bound of what a delta response copies
// for r besides its body: the field's tag and length, and r's version,
// name and aliases (appendPlainResource).
func resourceHeaderBound(r *discoveryv3.Resource) int {
	n := 1 + binary.MaxVarintLen64 + protowire.SizeBytes(len(r.GetVersion())) + protowire.SizeBytes(len(r.GetName())) + 2
	for _, al := range r.GetAliases() {
		n += 1 + protowire.SizeBytes(len(al))
	}
	return n
}

// appendPlainResource appends r's fields but its body (version, name,
// aliases: proto.Marshal's encoding of them, in field order) to b when
// those are all r has besides its body — every Resource vmesh sends — so
// that a response of thousands of resources needs no reflection per
// resource; ok is false for any other Resource.
func appendPlainResource(b []byte, r *discoveryv3.Resource) ([]byte, bool) {
	if r.GetTtl() != nil || r.GetCacheControl() != nil || r.GetMetadata() != nil || r.GetResourceName() != nil || len(r.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	if v := r.GetVersion(); v != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	if n := r.GetName(); n != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, n)
	}
	for _, al := range r.GetAliases() {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendString(b, al)
	}
	return b, true
}
