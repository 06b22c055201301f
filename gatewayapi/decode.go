// Package gatewayapi reads the Kubernetes Gateway API kinds
// (gateway.networking.k8s.io: GatewayClass, Gateway, HTTPRoute, GRPCRoute,
// TCPRoute, TLSRoute, ReferenceGrant) from plain YAML and converts them to
// the Istio objects vmesh serves, the way Istio's own converter
// (pilot/pkg/config/kube/gateway) does.
//
// Validation is the API server's: each document's spec is checked against
// the structural schema of its CRD (schemas.json, generated from the
// sigs.k8s.io/gateway-api module's standard-channel CRDs by go generate),
// defaults filled in as the API server fills them, and every CEL rule
// (x-kubernetes-validations) evaluated, but the transition rules, which
// compare with an object already stored. As on an API server with strict
// field validation (kubectl's default), unknown fields refuse a document
// alone, and no CEL rule is evaluated after a blocking problem (a missing
// required field, an enum value, a length or count above its maximum, a
// wrong type). Problems name the field path inside spec; the file decoder
// (filestore) adds the file and line. The API server's own verdicts on the
// conformance manifests and the invalid variants of testdata are compared
// by TestUpstreamValidation (tools/gatewayapi-oracle; README.md).
package gatewayapi

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vmesh/vmesh/store"
	"gopkg.in/yaml.v3"
)

// Group is the Gateway API's API group.
const Group = "gateway.networking.k8s.io"

// StoreKind maps a Gateway API kind, as documents name it, to the Store's
// kind ("Gateway" is KubernetesGateway there, as in Istio, since Istio's
// own Gateway is "Gateway").
func StoreKind(kind string) (store.Kind, bool) {
	switch kind {
	case "GatewayClass":
		return store.KindGatewayClass, true
	case "Gateway":
		return store.KindKubernetesGateway, true
	case "HTTPRoute":
		return store.KindHTTPRoute, true
	case "GRPCRoute":
		return store.KindGRPCRoute, true
	case "TCPRoute":
		return store.KindTCPRoute, true
	case "TLSRoute":
		return store.KindTLSRoute, true
	case "ReferenceGrant":
		return store.KindReferenceGrant, true
	}
	return "", false
}

// Versions lists the versions served for a document kind, sorted.
func Versions(kind string) []string {
	c, err := loadSchemas()
	if err != nil {
		return nil
	}
	var out []string
	for v := range c.specs[kind] {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// Module names the gateway-api module version the schemas come from.
func Module() string {
	c, err := loadSchemas()
	if err != nil {
		return ""
	}
	return c.module
}

// Decoded is a decoded and validated spec.
type Decoded struct {
	// Spec is the spec as JSON values, defaults filled in; nil when there
	// are problems.
	Spec map[string]any
	// Lines are the lines of the fields, by path inside spec.
	Lines map[string]int
	// Problems are the spec's problems, each at a field path (Lines has
	// its line, or its nearest parent's).
	Problems []Problem
}

// maxNodes bounds the YAML nodes one spec may expand to (aliases included).
const maxNodes = 200_000

// DecodeSpec decodes the spec of a document of a Gateway API kind (kind as
// documents name it) at version, validates it as the API server would, and
// fills in its defaults.
func DecodeSpec(kind, version string, n *yaml.Node) Decoded {
	return decodeSpecRules(kind, version, n, nil)
}

// decodeSpecRules is DecodeSpec recording the CEL rules that fail in failed,
// when set.
func decodeSpecRules(kind, version string, n *yaml.Node, failed map[string]bool) Decoded {
	c, err := loadSchemas()
	if err != nil {
		return Decoded{Problems: []Problem{{Message: err.Error()}}}
	}
	s := c.specs[kind][version]
	if s == nil {
		return Decoded{Problems: []Problem{{Message: fmt.Sprintf("%s %s is not served (want %s)", kind, version, strings.Join(Versions(kind), "|"))}}}
	}
	y := &yamlReader{lines: map[string]int{}}
	val := y.value(n, "")
	if len(y.problems) > 0 {
		return Decoded{Lines: y.lines, Problems: y.problems}
	}
	if val == nil {
		val = map[string]any{}
	}
	applyDefaults(s, val)
	v := &validator{failed: failed}
	v.check(s, val, "")
	if len(v.unknown) > 0 {
		// strict field validation: a document with unknown fields is
		// refused for them alone.
		return Decoded{Lines: y.lines, Problems: v.unknown}
	}
	if !v.blocking {
		v.celRules(s, val, "")
	}
	for i, p := range v.problems {
		if word, ok := y.yaml11[p.Field]; ok {
			v.problems[i].Message += fmt.Sprintf(" (kubectl reads YAML 1.1, where an unquoted %s is a boolean: quote it)", word)
		}
	}
	if len(v.problems) > 0 {
		return Decoded{Lines: y.lines, Problems: v.problems}
	}
	spec, _ := val.(map[string]any)
	return Decoded{Spec: spec, Lines: y.lines, Problems: nil}
}

// yamlReader turns YAML nodes into JSON values (map[string]any, []any,
// string, int64, float64, bool, nil), recording each field's line.
type yamlReader struct {
	lines    map[string]int
	problems []Problem
	nodes    int
	// yaml11 are the paths of plain scalars read as YAML 1.1 booleans.
	yaml11 map[string]string
}

// yaml11Bools are the plain scalars YAML 1.1 reads as booleans and YAML
// 1.2 (yaml.v3) as strings, but true and false. kubectl converts YAML to
// JSON with sigs.k8s.io/yaml, a YAML 1.1 reader: for it, and so for the
// API server, "value: yes" is a boolean, and a string field refuses it.
// vmesh reads them as kubectl does.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

func (y *yamlReader) value(n *yaml.Node, path string) any {
	y.nodes++
	if y.nodes > maxNodes {
		if y.nodes == maxNodes+1 {
			y.problems = append(y.problems, Problem{Field: path, Message: fmt.Sprintf("document expands to more than %d nodes (YAML aliases?)", maxNodes)})
		}
		return nil
	}
	if n.Kind == yaml.AliasNode {
		return y.value(n.Alias, path)
	}
	if _, ok := y.lines[path]; !ok {
		y.lines[path] = n.Line
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return y.value(n.Content[0], path)
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, e := n.Content[i], n.Content[i+1]
			fpath := join(path, k.Value)
			y.lines[fpath] = k.Line
			if _, dup := out[k.Value]; dup {
				y.problems = append(y.problems, Problem{Field: fpath, Message: fmt.Sprintf("duplicate field %q", k.Value)})
				continue
			}
			if e.Kind == yaml.ScalarNode && e.Tag == "!!null" {
				continue // null: as absent, as the API server reads it
			}
			out[k.Value] = y.value(e, fpath)
		}
		return out
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, e := range n.Content {
			epath := fmt.Sprintf("%s[%d]", path, i)
			y.lines[epath] = e.Line
			out[i] = y.value(e, epath)
		}
		return out
	}
	if b, ok := yaml11Bools[n.Value]; ok && n.Tag == "!!str" && n.Style == 0 {
		if y.yaml11 == nil {
			y.yaml11 = map[string]string{}
		}
		y.yaml11[path] = n.Value
		return b
	}
	switch n.Tag {
	case "!!null":
		return nil
	case "!!bool":
		b, _ := strconv.ParseBool(n.Value)
		return b
	case "!!int":
		i, err := strconv.ParseInt(n.Value, 0, 64)
		if err != nil {
			y.problems = append(y.problems, Problem{Field: path, Message: fmt.Sprintf("integer %q out of range", clip(n.Value))})
		}
		return i
	case "!!float":
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil {
			y.problems = append(y.problems, Problem{Field: path, Message: fmt.Sprintf("invalid number %q", clip(n.Value))})
		}
		return f
	}
	return n.Value
}
