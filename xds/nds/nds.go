// Package nds is Istio's name table (NDS), the xDS resource that tells a
// VM's agent which IPs answer for each mesh host: the message
// istio.networking.nds.v1.NameTable of Istio's pkg/dns/proto/nds.proto,
// served with type URL TypeURL. istio.io/api does not ship it, so its
// descriptor is built here, wire-identical to Istio's, and Table converts
// to and from it. The control plane writes it (xds, one per proxy group)
// and the agent reads it (agents/dnsproxy); like xds/node it imports
// nothing of vmesh's, so both sides share one definition.
package nds

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
)

// TypeURL is the NDS type URL (Istio's).
const TypeURL = "type.googleapis.com/istio.networking.nds.v1.NameTable"

// Registry values Istio's agent distinguishes: for RegistryKubernetes hosts
// (name.namespace.svc.<domain>) it also answers the short forms.
const (
	RegistryKubernetes = "Kubernetes"
	RegistryExternal   = "External"
)

// NameInfo is one host's entry.
type NameInfo struct {
	// IPs answer A and AAAA queries for the host.
	IPs []string
	// Registry is RegistryKubernetes when Shortname and Namespace are set.
	Registry string
	// Shortname and Namespace split a host "shortname.namespace.svc.<domain>".
	Shortname, Namespace string
	// AltHosts are further names of the host.
	AltHosts []string
}

// Table maps hosts (no trailing dot) to their entries.
type Table map[string]NameInfo

// Equal reports whether t and o hold the same entries.
func (t Table) Equal(o Table) bool {
	return maps.EqualFunc(t, o, func(a, b NameInfo) bool {
		return slices.Equal(a.IPs, b.IPs) && a.Registry == b.Registry && a.Shortname == b.Shortname &&
			a.Namespace == b.Namespace && slices.Equal(a.AltHosts, b.AltHosts)
	})
}

var (
	tableDesc protoreflect.MessageDescriptor
	infoDesc  protoreflect.MessageDescriptor
)

func init() {
	// The descriptor of Istio's pkg/dns/proto/nds.proto. Registered in
	// the global registry so that Any resolution and protojson work.
	s := proto.String
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, n int32, label *descriptorpb.FieldDescriptorProto_Label, typ *descriptorpb.FieldDescriptorProto_Type, typeName, json string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: s(name), Number: proto.Int32(n), Label: label, Type: typ, JsonName: s(json)}
		if typeName != "" {
			f.TypeName = s(typeName)
		}
		return f
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name:    s("istio.io/istio/pkg/dns/proto/nds.proto"),
		Package: s("istio.networking.nds.v1"),
		Syntax:  s("proto3"),
		Options: &descriptorpb.FileOptions{GoPackage: s("istio.io/istio/pkg/dns/proto/istio_networking_nds_v1")},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: s("NameTable"),
			Field: []*descriptorpb.FieldDescriptorProto{
				field("table", 1, rep, msg, ".istio.networking.nds.v1.NameTable.TableEntry", "table"),
			},
			NestedType: []*descriptorpb.DescriptorProto{
				{
					Name: s("NameInfo"),
					Field: []*descriptorpb.FieldDescriptorProto{
						field("ips", 1, rep, str, "", "ips"),
						field("registry", 2, opt, str, "", "registry"),
						field("shortname", 3, opt, str, "", "shortname"),
						field("namespace", 4, opt, str, "", "namespace"),
						field("alt_hosts", 5, rep, str, "", "altHosts"),
					},
				},
				{
					Name: s("TableEntry"),
					Field: []*descriptorpb.FieldDescriptorProto{
						field("key", 1, opt, str, "", "key"),
						field("value", 2, opt, msg, ".istio.networking.nds.v1.NameTable.NameInfo", "value"),
					},
					Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
				},
			},
		}},
	}
	f, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		panic(fmt.Sprintf("nds: descriptor: %v", err))
	}
	if err := protoregistry.GlobalFiles.RegisterFile(f); err != nil {
		panic(fmt.Sprintf("nds: register: %v", err))
	}
	tableDesc = f.Messages().ByName("NameTable")
	infoDesc = tableDesc.Messages().ByName("NameInfo")
	if err := protoregistry.GlobalTypes.RegisterMessage(dynamicpb.NewMessageType(tableDesc)); err != nil {
		panic(fmt.Sprintf("nds: register type: %v", err))
	}
}

// Message returns t as an istio.networking.nds.v1.NameTable message.
func (t Table) Message() proto.Message {
	m := dynamicpb.NewMessage(tableDesc)
	tf := tableDesc.Fields().ByName("table")
	mp := m.Mutable(tf).Map()
	fi := infoDesc.Fields()
	for _, host := range slices.Sorted(maps.Keys(t)) {
		ni := t[host]
		v := dynamicpb.NewMessage(infoDesc)
		setList := func(name protoreflect.Name, xs []string) {
			if len(xs) == 0 {
				return
			}
			l := v.Mutable(fi.ByName(name)).List()
			for _, x := range xs {
				l.Append(protoreflect.ValueOfString(x))
			}
		}
		setStr := func(name protoreflect.Name, x string) {
			if x != "" {
				v.Set(fi.ByName(name), protoreflect.ValueOfString(x))
			}
		}
		setList("ips", ni.IPs)
		setStr("registry", ni.Registry)
		setStr("shortname", ni.Shortname)
		setStr("namespace", ni.Namespace)
		setList("alt_hosts", ni.AltHosts)
		mp.Set(protoreflect.ValueOfString(host).MapKey(), protoreflect.ValueOfMessage(v))
	}
	return m
}

// FromMessage reads a NameTable message (as Message returns, or any
// message of that full name).
func FromMessage(m proto.Message) (Table, error) {
	r := m.ProtoReflect()
	if r.Descriptor().FullName() != tableDesc.FullName() {
		return nil, fmt.Errorf("nds: message %s is not a NameTable", r.Descriptor().FullName())
	}
	if r.Descriptor() != tableDesc {
		// Another definition of the same message: go through the wire.
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("nds: %w", err)
		}
		return Unmarshal(b)
	}
	out := Table{}
	fi := infoDesc.Fields()
	r.Get(tableDesc.Fields().ByName("table")).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		vm := v.Message()
		list := func(name protoreflect.Name) []string {
			l := vm.Get(fi.ByName(name)).List()
			var xs []string
			for i := range l.Len() {
				xs = append(xs, l.Get(i).String())
			}
			return xs
		}
		out[k.String()] = NameInfo{
			IPs: list("ips"), Registry: vm.Get(fi.ByName("registry")).String(), Shortname: vm.Get(fi.ByName("shortname")).String(),
			Namespace: vm.Get(fi.ByName("namespace")).String(), AltHosts: list("alt_hosts"),
		}
		return true
	})
	return out, nil
}

// Unmarshal reads a serialised NameTable.
func Unmarshal(b []byte) (Table, error) {
	m := dynamicpb.NewMessage(tableDesc)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("nds: %w", err)
	}
	return FromMessage(m)
}

// FromAny reads a NameTable from an xDS response's resource.
func FromAny(a *anypb.Any) (Table, error) {
	if a.GetTypeUrl() != TypeURL {
		return nil, fmt.Errorf("nds: resource of type %s, want %s", a.GetTypeUrl(), TypeURL)
	}
	return Unmarshal(a.GetValue())
}
