package filestore

import (
	"slices"
	"strings"

	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/store"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
)

// decodeGatewayAPI decodes a document of a Kubernetes Gateway API kind:
// its spec is validated against the kind's CRD (package gatewayapi: the
// schema, its defaults and its CEL rules, as the API server checks it)
// and kept as a structpb.Struct; its status, which an API server would
// hold, is ignored. What applies it (gatewayapi.Convert, across the
// config set) warns about what it does not apply.
func (d *docDecoder) decodeGatewayAPI(root *yaml.Node, fields map[string]*yaml.Node, kindNode, apiNode *yaml.Node) *store.Object {
	kind, _ := gatewayapi.StoreKind(kindNode.Value)
	_, version, _ := strings.Cut(apiNode.Value, "/")
	versions := gatewayapi.Versions(kindNode.Value)
	if !slices.Contains(versions, version) {
		d.errorf(apiNode, "apiVersion", "%s is not served for %s (want %s/%s)", quote(apiNode.Value), kindNode.Value, gatewayapi.Group, strings.Join(versions, "|"))
		return nil
	}
	obj := &store.Object{APIVersion: apiNode.Value, Origin: store.Origin{File: d.file, Line: root.Line}}
	obj.Kind = kind
	d.decodeMetadata(obj, fields["metadata"], root)
	d.object = clip(obj.Key.String(), maxField)
	for i := d.first; i < len(d.p.list); i++ {
		d.p.list[i].Object = d.object
	}
	specNode := fields["spec"]
	if specNode == nil {
		d.errorf(root, "spec", "missing spec")
		return nil
	}
	dec := gatewayapi.DecodeSpec(kindNode.Value, version, specNode)
	for path, line := range dec.Lines {
		d.lines[path] = line
	}
	for _, p := range dec.Problems {
		d.errs++
		d.p.add(store.ConfigError{File: d.file, Line: d.lineOf(p.Field, specNode.Line), Object: d.object, Field: p.Field, Message: p.Message})
	}
	if d.errs > 0 {
		return nil
	}
	spec, err := structpb.NewStruct(dec.Spec)
	if err != nil {
		d.errorf(specNode, "spec", "%v", err)
		return nil
	}
	obj.Spec = spec
	obj.SetFieldLines(dec.Lines)
	return obj
}
