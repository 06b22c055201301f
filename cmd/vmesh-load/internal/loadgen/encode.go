package loadgen

import (
	"fmt"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

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

func (c clientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch r := v.(type) {
	case *sotwResponse:
		return r.decode(data)
	case *deltaResponse:
		return r.decode(data)
	}
	return c.proto.Unmarshal(data, v)
}

// sotwResponse is where a simulated proxy reads its state-of-the-world
// responses: msg holds the fields the proxy uses (version_info, resources,
// type_url, nonce), its resources' bytes alias buf, and the next read
// reuses both. A proxy keeps no resource bytes past its ACK (only their
// hashes and the names they refer to), so the harness neither copies each
// resource out of the message nor leaves it as garbage: harness CPU and
// garbage collection taken from the server under test on a shared machine.
type sotwResponse struct {
	msg  discoveryv3.DiscoveryResponse
	buf  []byte
	anys []*anypb.Any
}

// deltaResponse is sotwResponse for delta responses: msg holds
// system_version_info, resources (name, version, aliases and the body),
// type_url, nonce and removed_resources.
type deltaResponse struct {
	msg       discoveryv3.DeltaDiscoveryResponse
	buf       []byte
	resources []*discoveryv3.Resource
}

// materialize copies data into buf's storage.
func materialize(buf []byte, data mem.BufferSlice) []byte {
	buf = buf[:0]
	for _, b := range data {
		buf = append(buf, b.ReadOnlyData()...)
	}
	return buf
}

// fields calls f with each length-delimited field of the message b (the
// only kind the proxies read), skipping the others; it stops at f's first
// error.
func fields(b []byte, f func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}

// decodeAny reads an Any into a, its value aliasing b.
func decodeAny(b []byte, a *anypb.Any) error {
	a.TypeUrl, a.Value = "", nil
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			a.TypeUrl = string(v)
		case 2:
			a.Value = v
		}
		return nil
	})
}

func (r *sotwResponse) decode(data mem.BufferSlice) error {
	r.buf = materialize(r.buf, data)
	m := &r.msg
	m.VersionInfo, m.TypeUrl, m.Nonce, m.Resources = "", "", "", m.Resources[:0]
	err := fields(r.buf, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			m.VersionInfo = string(v)
		case 2:
			i := len(m.Resources)
			if i == len(r.anys) {
				r.anys = append(r.anys, &anypb.Any{})
			}
			m.Resources = append(m.Resources, r.anys[i])
			return decodeAny(v, r.anys[i])
		case 4:
			m.TypeUrl = string(v)
		case 5:
			m.Nonce = string(v)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("loadgen: decoding a response: %w", err)
	}
	return nil
}

func (r *deltaResponse) decode(data mem.BufferSlice) error {
	r.buf = materialize(r.buf, data)
	m := &r.msg
	m.SystemVersionInfo, m.TypeUrl, m.Nonce, m.Resources, m.RemovedResources = "", "", "", m.Resources[:0], nil
	err := fields(r.buf, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			m.SystemVersionInfo = string(v)
		case 2:
			i := len(m.Resources)
			if i == len(r.resources) {
				r.resources = append(r.resources, &discoveryv3.Resource{})
			}
			res := r.resources[i]
			m.Resources = append(m.Resources, res)
			return decodeResource(v, res)
		case 4:
			m.TypeUrl = string(v)
		case 5:
			m.Nonce = string(v)
		case 6:
			m.RemovedResources = append(m.RemovedResources, string(v))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("loadgen: decoding a delta response: %w", err)
	}
	return nil
}

// decodeResource reads a delta Resource into res, its body aliasing b.
func decodeResource(b []byte, res *discoveryv3.Resource) error {
	body := res.Resource
	res.Name, res.Version, res.Aliases, res.Resource = "", "", nil, nil
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			res.Version = string(v)
		case 2:
			if body == nil {
				body = &anypb.Any{}
			}
			res.Resource = body
			return decodeAny(v, body)
		case 3:
			res.Name = string(v)
		case 4:
			res.Aliases = append(res.Aliases, string(v))
		}
		return nil
	})
}
