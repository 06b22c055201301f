package filestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"gopkg.in/yaml.v3"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// kindInfo describes how to decode one kind.
type kindInfo struct {
	group    string
	versions []string
	newSpec  func() proto.Message
}

var networkingVersions = []string{"v1", "v1beta1", "v1alpha3"}
var securityVersions = []string{"v1", "v1beta1"}

func lookupKind(k store.Kind) (kindInfo, bool) {
	switch k {
	case store.KindServiceEntry:
		return kindInfo{"networking.istio.io", networkingVersions, func() proto.Message { return &networking.ServiceEntry{} }}, true
	case store.KindWorkloadEntry:
		return kindInfo{"networking.istio.io", networkingVersions, func() proto.Message { return &networking.WorkloadEntry{} }}, true
	case store.KindWorkloadGroup:
		return kindInfo{"networking.istio.io", networkingVersions, func() proto.Message { return &networking.WorkloadGroup{} }}, true
	case store.KindVirtualService:
		return kindInfo{"networking.istio.io", networkingVersions, func() proto.Message { return &networking.VirtualService{} }}, true
	case store.KindDestinationRule:
		return kindInfo{"networking.istio.io", networkingVersions, func() proto.Message { return &networking.DestinationRule{} }}, true
	case store.KindSidecar:
		return kindInfo{"networking.istio.io", networkingVersions, func() proto.Message { return &networking.Sidecar{} }}, true
	case store.KindGateway:
		return kindInfo{"networking.istio.io", networkingVersions, func() proto.Message { return &networking.Gateway{} }}, true
	case store.KindPeerAuthentication:
		return kindInfo{"security.istio.io", securityVersions, func() proto.Message { return &security.PeerAuthentication{} }}, true
	case store.KindAuthorizationPolicy:
		return kindInfo{"security.istio.io", securityVersions, func() proto.Message { return &security.AuthorizationPolicy{} }}, true
	case store.KindRequestAuthentication:
		return kindInfo{"security.istio.io", securityVersions, func() proto.Message { return &security.RequestAuthentication{} }}, true
	case store.KindTelemetry:
		return kindInfo{"telemetry.istio.io", []string{"v1", "v1alpha1"}, func() proto.Message { return &telemetry.Telemetry{} }}, true
	}
	return kindInfo{}, false
}

// metadataIgnored are metadata fields written by Kubernetes API servers; they
// are accepted (so `kubectl get -o yaml` output decodes) and ignored.
var metadataIgnored = []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink"}

// Decode parses a file of one or more YAML documents into objects, within
// the default Limits. It returns the problems it finds, each naming the
// file, line and field. A document with any problem yields no object; the
// other documents still decode. Semantic validation (Validate) runs on
// every decoded object. A Kubernetes List is unpacked into its items; a
// document of an Istio kind vmesh does not implement yields no object and
// no error, only a warning (DecodeFile returns the warnings).
func Decode(file string, data []byte) ([]*store.Object, []store.ConfigError) {
	return DecodeLimited(file, data, DefaultLimits())
}

// DecodeLimited is Decode within lim: a file larger than lim.MaxFileBytes
// or with more than lim.MaxDocuments documents is refused (its problems
// say which limit), and at most lim.MaxProblems problems are returned,
// followed by a line counting the rest.
func DecodeLimited(file string, data []byte, lim Limits) ([]*store.Object, []store.ConfigError) {
	d := DecodeFile(file, data, lim)
	return d.Objects, d.Errors
}

// Decoded is what one file decodes to.
type Decoded struct {
	// Objects are the valid objects; none when the file is refused.
	Objects []*store.Object
	// Errors reject the documents they are in (bounded by MaxProblems).
	Errors []store.ConfigError
	// Warnings are about config that applies but is not (fully) enforced,
	// found in one object (warnings.go; bounded by MaxProblems): a
	// document of an Istio kind vmesh does not implement is one.
	Warnings []store.ConfigError
}

// DecodeFile is DecodeLimited with the file's warnings.
func DecodeFile(file string, data []byte, lim Limits) Decoded {
	lim = lim.withDefaults()
	p := &problems{file: file, max: lim.MaxProblems}
	if int64(len(data)) > lim.MaxFileBytes {
		p.stop(store.ConfigError{File: file, Message: tooLarge(int64(len(data)), lim.MaxFileBytes).Error()})
		return Decoded{Errors: p.errors()}
	}
	var objs []*store.Object
	dec := yaml.NewDecoder(bytes.NewReader(data))
	docs := 0
	tooMany := func(line int) bool {
		docs++
		if docs <= lim.MaxDocuments {
			return false
		}
		p.stop(store.ConfigError{File: file, Line: line, Message: fmt.Sprintf("more than %s YAML documents in one file (maxDocuments); the file is not loaded", formatCount(lim.MaxDocuments))})
		return true
	}
decoding:
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			p.add(yamlError(file, data, err))
			break
		}
		if tooMany(doc.Line) {
			break
		}
		if len(doc.Content) == 0 || (doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null") {
			continue
		}
		root := doc.Content[0]
		items, isList := listItems(root)
		if !isList {
			items = []*yaml.Node{root}
		}
		for i, item := range items {
			if isList && i > 0 && tooMany(item.Line) { // the List counts as its first item
				break decoding
			}
			if obj := decodeDocument(file, item, p); obj != nil {
				objs = append(objs, obj)
			}
		}
	}
	if len(p.final) > 0 {
		return Decoded{Errors: p.errors()} // a refused file yields nothing
	}
	return Decoded{Objects: objs, Errors: p.errors(), Warnings: p.warnings()}
}

// listItems returns the items of a Kubernetes List (apiVersion v1, kind
// List, items: [...]: what `kubectl get -o yaml` prints), each decoded as
// a document of its own with its own lines.
func listItems(root *yaml.Node) ([]*yaml.Node, bool) {
	if root.Kind != yaml.MappingNode {
		return nil, false
	}
	var kind, api string
	var items *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		switch k, v := root.Content[i].Value, root.Content[i+1]; k {
		case "kind":
			kind = v.Value
		case "apiVersion":
			api = v.Value
		case "items":
			items = v
		}
	}
	if kind != "List" || api != "v1" {
		return nil, false
	}
	if items == nil || items.Kind != yaml.SequenceNode {
		return nil, true // an empty List
	}
	return items.Content, true
}

// docDecoder collects the errors and line numbers of one document.
type docDecoder struct {
	file   string
	object string
	p      *problems      // the file's problems, bounded
	first  int            // this document's first problem in p.list
	errs   int            // this document's problems, kept or counted
	lines  map[string]int // field path -> line
	// metaLines are the lines of metadata fields (metadata.annotations.KEY).
	metaLines map[string]int
	nodes     int // nodes visited, to stop alias-expansion bombs
}

// maxNodes bounds the nodes one document may expand to (aliases included).
const maxNodes = 200_000

// deref follows an alias and counts the visit; it returns nil once the
// document has expanded past maxNodes.
func (d *docDecoder) deref(n *yaml.Node) *yaml.Node {
	d.nodes++
	if d.nodes == maxNodes {
		d.errorf(n, "", "document expands to more than %d nodes (YAML aliases?)", maxNodes)
	}
	if d.nodes >= maxNodes {
		return nil
	}
	if n.Kind == yaml.AliasNode {
		return n.Alias
	}
	return n
}

func (d *docDecoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.errs++
	d.p.add(store.ConfigError{File: d.file, Line: n.Line, Object: d.object, Field: path, Message: fmt.Sprintf(format, args...)})
}

// decodeDocument decodes one document, adding its problems to p; it
// returns nil when there are any.
func decodeDocument(file string, root *yaml.Node, p *problems) *store.Object {
	d := &docDecoder{file: file, p: p, first: len(p.list), lines: map[string]int{}, metaLines: map[string]int{}}
	if root.Kind != yaml.MappingNode {
		d.errorf(root, "", "a document must be a mapping with apiVersion, kind, metadata and spec")
		return nil
	}
	fields := map[string]*yaml.Node{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "apiVersion", "kind", "metadata", "spec", "status":
			fields[k.Value] = v
			if k.Value == "spec" {
				d.lines[""] = k.Line // problems with the spec as a whole point at "spec:"
			}
		default:
			d.errorf(k, k.Value, "unknown field %s%s", quote(k.Value), didYouMean(k.Value, []string{"apiVersion", "kind", "metadata", "spec", "status"}))
		}
	}
	kindNode, apiNode := fields["kind"], fields["apiVersion"]
	if kindNode == nil || apiNode == nil {
		d.errorf(root, "", "missing apiVersion or kind")
		return nil
	}
	if group, _, _ := strings.Cut(apiNode.Value, "/"); group == gatewayapi.Group {
		if _, ok := gatewayapi.StoreKind(kindNode.Value); ok {
			return d.decodeGatewayAPI(root, fields, kindNode, apiNode)
		}
	}
	kind := store.Kind(kindNode.Value)
	info, ok := lookupKind(kind)
	if !ok {
		if served, versions := unimplementedKind(apiNode.Value, kindNode.Value); served {
			d.ignoredKind(kindNode, fields["metadata"])
			return nil
		} else if versions != nil {
			d.errorf(apiNode, "apiVersion", "%s is not served for %s (want %s)", quote(apiNode.Value), quote(kindNode.Value), strings.Join(versions, "|"))
			return nil
		}
		d.errorf(kindNode, "kind", "unknown kind %s: no Istio API defines it (vmesh implements %s)", quote(kindNode.Value), kindList())
		return nil
	}
	group, version, _ := strings.Cut(apiNode.Value, "/")
	if group != info.group || !slices.Contains(info.versions, version) {
		d.errorf(apiNode, "apiVersion", "%s is not served for %s (want %s/%s)", quote(apiNode.Value), kind, info.group, strings.Join(info.versions, "|"))
		return nil
	}
	obj := &store.Object{APIVersion: apiNode.Value, Origin: store.Origin{File: file, Line: root.Line}}
	obj.Kind = kind
	d.decodeMetadata(obj, fields["metadata"], root)
	d.object = clip(obj.Key.String(), maxField)
	for i := d.first; i < len(p.list); i++ {
		p.list[i].Object = d.object
	}

	spec := info.newSpec()
	specNode := fields["spec"]
	if specNode == nil {
		d.errorf(root, "spec", "missing spec")
		return nil
	}
	d.decodeMessage(specNode, spec, "")
	if st := fields["status"]; st != nil && kind == store.KindWorkloadEntry {
		status := &metav1alpha1.IstioStatus{}
		d.decodeMessage(st, status, "status")
		for _, c := range status.GetConditions() {
			if c.GetType() == "Healthy" {
				healthy := c.GetStatus() == "True"
				obj.Healthy = &healthy
			}
		}
	}
	if d.errs > 0 {
		return nil
	}
	obj.Spec = spec
	for _, vp := range Validate(obj) {
		d.errs++
		p.add(store.ConfigError{File: file, Line: d.lineOf(vp.Field, root.Line), Object: d.object, Field: vp.Field, Message: vp.Message})
	}
	if d.errs > 0 {
		return nil
	}
	for _, w := range objectWarnings(obj) {
		line := d.lineOf(w.Field, root.Line)
		if l, ok := d.metaLines[w.Field]; ok {
			line = l
		} else if w.Field == "" {
			line = root.Line // the object as a whole
		}
		p.warn(store.ConfigError{File: file, Line: line, Object: d.object, Field: w.Field, Message: w.Message, Severity: w.Severity, Code: w.Code})
	}
	var kept map[string]int
	for path, line := range d.lines {
		if path != "" && lineKept(path) {
			if kept == nil {
				kept = map[string]int{}
			}
			kept[path] = line
		}
	}
	obj.SetFieldLines(kept)
	return obj
}

// ignoredKind reports a document of an Istio kind vmesh does not
// implement: accepted, ignored, and a VM1001 warning.
func (d *docDecoder) ignoredKind(kindNode, meta *yaml.Node) {
	name, ns := "", "default"
	if meta != nil && meta.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(meta.Content); i += 2 {
			switch meta.Content[i].Value {
			case "name":
				name = meta.Content[i+1].Value
			case "namespace":
				ns = meta.Content[i+1].Value
			}
		}
	}
	object := clip(kindNode.Value+"/"+ns+"/"+name, maxField)
	d.p.warn(store.ConfigError{File: d.file, Line: kindNode.Line, Object: object, Field: "kind", Severity: store.SeverityWarning, Code: store.CodeKindNotImplemented,
		Message: fmt.Sprintf("%s is an Istio kind vmesh does not implement: the document is accepted and ignored", clip(kindNode.Value, maxField))})
}

func kindList() string {
	var names []string
	for _, k := range store.Kinds {
		if _, ok := lookupKind(k); ok {
			names = append(names, string(k))
		}
	}
	return strings.Join(names, ", ") + "; and the Gateway API's GatewayClass, Gateway, HTTPRoute, GRPCRoute, TCPRoute, TLSRoute, ReferenceGrant"
}

// lineOf finds the line of a field path, or of its nearest recorded parent.
func (d *docDecoder) lineOf(path string, fallback int) int {
	for p := path; ; {
		if l, ok := d.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			if l, ok := d.lines[""]; ok && p != "" {
				return l
			}
			return fallback
		}
		p = p[:i]
	}
}

func (d *docDecoder) decodeMetadata(obj *store.Object, n, root *yaml.Node) {
	obj.Namespace = "default"
	if n == nil {
		d.errorf(root, "metadata.name", "missing metadata")
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "metadata", "must be a mapping")
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := "metadata." + k.Value
		d.metaLines[path] = k.Line
		switch k.Value {
		case "name":
			obj.Name = v.Value
			if msg := checkDNS1123Subdomain(v.Value); msg != "" {
				d.errorf(v, path, "%s", msg)
			}
		case "namespace":
			obj.Namespace = v.Value
			if msg := checkDNS1123Label(v.Value); msg != "" {
				d.errorf(v, path, "%s", msg)
			}
		case "labels":
			obj.Labels = d.stringMap(v, path)
			for key, val := range obj.Labels {
				if msg := checkLabel(key, val); msg != "" {
					d.errorf(v, path+"."+key, "%s", msg)
				}
			}
		case "annotations":
			obj.Annotations = d.stringMap(v, path)
			if v.Kind == yaml.MappingNode {
				for j := 0; j+1 < len(v.Content); j += 2 {
					d.metaLines[path+"."+v.Content[j].Value] = v.Content[j].Line
				}
			}
		default:
			if !slices.Contains(metadataIgnored, k.Value) {
				d.errorf(k, path, "unknown field %s%s", quote(k.Value), didYouMean(k.Value, append([]string{"name", "namespace", "labels", "annotations"}, metadataIgnored...)))
			}
		}
	}
	if obj.Name == "" {
		d.errorf(n, "metadata.name", "name is required")
	}
}

func (d *docDecoder) stringMap(n *yaml.Node, path string) map[string]string {
	if n.Kind != yaml.MappingNode {
		if n.Tag != "!!null" {
			d.errorf(n, path, "must be a map of strings")
		}
		return nil
	}
	out := make(map[string]string, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			d.errorf(v, path+"."+k.Value, "must be a string")
			continue
		}
		out[k.Value] = v.Value
	}
	return out
}

// decodeMessage checks the YAML against the message's descriptor (unknown
// fields, wrong shapes and enum values, each with its path and line), then
// decodes it with protojson.
func (d *docDecoder) decodeMessage(n *yaml.Node, msg proto.Message, path string) {
	before := d.errs
	v := d.toJSON(n, msg.ProtoReflect().Descriptor(), path)
	if d.errs > before {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		d.errorf(n, path, "%v", err)
		return
	}
	if err := protojson.Unmarshal(data, msg); err != nil {
		d.errorf(n, path, "%s", strings.TrimPrefix(err.Error(), "proto: "))
	}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// toJSON converts a YAML node for a message into a JSON-ready value.
func (d *docDecoder) toJSON(n *yaml.Node, md protoreflect.MessageDescriptor, path string) any {
	if n = d.deref(n); n == nil {
		return nil
	}
	if _, ok := d.lines[path]; !ok {
		d.lines[path] = n.Line
	}
	if wkt := d.wellKnown(n, md, path); wkt != nil {
		return wkt.v
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return map[string]any{}
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be an object (%s)", md.Name())
		return nil
	}
	out := make(map[string]any, len(n.Content)/2)
	fields := md.Fields()
	oneofs := map[protoreflect.FullName]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		fd := fields.ByJSONName(k.Value)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(k.Value))
		}
		fpath := join(path, k.Value)
		if fd == nil {
			d.errorf(k, fpath, "unknown field %s in %s%s", quote(k.Value), md.Name(), didYouMean(k.Value, fieldNames(md)))
			continue
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if other, set := oneofs[od.FullName()]; set {
				d.errorf(k, fpath, "%s and %s are mutually exclusive", other, k.Value)
				continue
			}
			oneofs[od.FullName()] = k.Value
		}
		d.lines[fpath] = k.Line
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue
		}
		out[fd.JSONName()] = d.fieldJSON(v, fd, fpath)
	}
	return out
}

func (d *docDecoder) fieldJSON(n *yaml.Node, fd protoreflect.FieldDescriptor, path string) any {
	if n = d.deref(n); n == nil {
		return nil
	}
	switch {
	case fd.IsMap():
		if n.Kind != yaml.MappingNode {
			d.errorf(n, path, "must be a map")
			return nil
		}
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			epath := path + "." + k.Value
			d.lines[epath] = k.Line
			out[k.Value] = d.singleJSON(v, fd.MapValue(), epath)
		}
		return out
	case fd.IsList():
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "must be a list")
			return nil
		}
		out := make([]any, len(n.Content))
		for i, e := range n.Content {
			epath := fmt.Sprintf("%s[%d]", path, i)
			d.lines[epath] = e.Line
			out[i] = d.singleJSON(e, fd, epath)
		}
		return out
	}
	return d.singleJSON(n, fd, path)
}

func (d *docDecoder) singleJSON(n *yaml.Node, fd protoreflect.FieldDescriptor, path string) any {
	if n = d.deref(n); n == nil {
		return nil
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return d.toJSON(n, fd.Message(), path)
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "must be a %s value", kindName(fd.Kind()))
		return nil
	}
	switch fd.Kind() {
	case protoreflect.EnumKind:
		ed := fd.Enum()
		if ed.Values().ByName(protoreflect.Name(n.Value)) != nil {
			return n.Value
		}
		if i, err := strconv.Atoi(n.Value); err == nil && ed.Values().ByNumber(protoreflect.EnumNumber(i)) != nil {
			return i
		}
		var names []string
		for i := 0; i < ed.Values().Len(); i++ {
			names = append(names, string(ed.Values().Get(i).Name()))
		}
		d.errorf(n, path, "unknown value %s (want one of %s)", quote(n.Value), strings.Join(names, ", "))
		return nil
	case protoreflect.BoolKind:
		b, err := strconv.ParseBool(n.Value)
		if err != nil {
			d.errorf(n, path, "must be true or false, not %s", quote(n.Value))
		}
		return b
	case protoreflect.StringKind:
		return n.Value
	case protoreflect.BytesKind:
		return n.Value
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil {
			d.errorf(n, path, "must be a number, not %s", quote(n.Value))
		}
		return f
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		i, err := strconv.ParseInt(n.Value, 0, bitSize(fd.Kind()))
		if err != nil {
			d.errorf(n, path, "must be an integer, not %s", quote(n.Value))
		}
		return i
	default: // unsigned
		u, err := strconv.ParseUint(n.Value, 0, bitSize(fd.Kind()))
		if err != nil {
			d.errorf(n, path, "must be a non-negative integer, not %s", quote(n.Value))
		}
		return u
	}
}

func bitSize(k protoreflect.Kind) int {
	switch k {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return 64
	}
	return 32
}

func kindName(k protoreflect.Kind) string {
	switch k {
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "string"
	case protoreflect.BoolKind:
		return "boolean"
	case protoreflect.EnumKind:
		return "enum"
	}
	return "number"
}

type wktValue struct{ v any }

// wellKnown converts the well-known types that JSON writes as scalars.
func (d *docDecoder) wellKnown(n *yaml.Node, md protoreflect.MessageDescriptor, path string) *wktValue {
	switch md.FullName() {
	case "google.protobuf.Duration", "google.protobuf.Timestamp", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "must be a string")
			return &wktValue{}
		}
		if md.FullName() == "google.protobuf.Duration" {
			dur, err := parseDuration(n.Value)
			if err != nil {
				d.errorf(n, path, "invalid duration %s: %v", quote(n.Value), clip(err.Error(), maxQuoted))
				return &wktValue{}
			}
			// protojson only reads seconds ("90s"); Istio's YAML also says "1m30s".
			return &wktValue{strconv.FormatFloat(dur.Seconds(), 'f', -1, 64) + "s"}
		}
		return &wktValue{n.Value}
	case "google.protobuf.BoolValue":
		b, err := strconv.ParseBool(n.Value)
		if err != nil || n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "must be true or false")
		}
		return &wktValue{b}
	case "google.protobuf.UInt32Value", "google.protobuf.UInt64Value":
		u, err := strconv.ParseUint(n.Value, 10, 64)
		if err != nil || n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "must be a non-negative integer, not %s", quote(n.Value))
		}
		return &wktValue{u}
	case "google.protobuf.Int32Value", "google.protobuf.Int64Value":
		i, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil || n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "must be an integer, not %s", quote(n.Value))
		}
		return &wktValue{i}
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue":
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil || n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "must be a number, not %s", quote(n.Value))
		}
		return &wktValue{f}
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Any":
		var v any
		if err := n.Decode(&v); err != nil {
			d.errorf(n, path, "%v", err)
		}
		return &wktValue{v}
	}
	return nil
}
