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
	d.checkAnnotationKeys(fields["metadata"])
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

// checkAnnotationKeys refuses the annotation keys that are not qualified
// names (an optional DNS subdomain prefix and a name, as label keys), as
// the API server's ObjectMeta validation does for these kinds
// (tools/gatewayapi-oracle; for Istio's kinds vmesh keeps Istio's
// validation, which does not look at them).
func (d *docDecoder) checkAnnotationKeys(md *yaml.Node) {
	if md == nil || md.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(md.Content); i += 2 {
		a := md.Content[i+1]
		if md.Content[i].Value != "annotations" || a.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(a.Content); j += 2 {
			key := a.Content[j]
			if msg := checkLabel(key.Value, ""); msg != "" {
				d.errorf(key, "metadata.annotations."+key.Value, "%s", strings.Replace(msg, "label key", "annotation key", 1))
			}
		}
	}
}
