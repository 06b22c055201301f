// Command gatewayapi-oracle runs the Kubernetes API server's own validation
// of custom resources (k8s.io/apiextensions-apiserver) on the Gateway API
// documents vmesh's tests decode, and saves its verdicts for vmesh's test
// gatewayapi.TestUpstreamValidation (issue 46).
//
// It loads the Gateway API CRDs of the sigs.k8s.io/gateway-api module this
// module requires (the version vmesh's go.mod names, checked against
// vmesh's gatewayapi/schemas.json): for a kind and version the
// standard-channel CRD when it serves that version, else the experimental
// one, as vmesh's schemas.json does. Each document goes through what a
// create request meets on an API server with strict field validation
// (kubectl's default): unknown fields pruned and refused, nulls dropped,
// defaults applied, status dropped, then customResourceStrategy.Validate:
// the structural schema (validation.NewSchemaValidator), ObjectMeta, list
// types, and the CEL rules (cel.NewValidator) unless a blocking error came
// first.
//
// Inputs: gatewayapi/testdata/conformance (the conformance manifests, with
// the placeholders the conformance suite fills in) and
// gatewayapi/testdata/invalid (the invalid variants). Output, in
// gatewayapi/testdata/upstream: verdicts.json (per document: accept or
// refuse, each error's field path, type and message, the CEL rules that
// failed) and rules.json (every x-kubernetes-validations rule of the spec
// of the kinds vmesh decodes, with the documents that fired it, and the
// reason for a rule no document fires).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	sigsyaml "sigs.k8s.io/yaml"

	// The module whose CRD files (config/crd) this tool reads: imported so
	// that go.mod keeps naming its version.
	_ "sigs.k8s.io/gateway-api/apis/v1"
)

// kinds are the CRD files (plural names) of the kinds vmesh decodes.
var kinds = []string{"gatewayclasses", "gateways", "httproutes", "grpcroutes", "tcproutes", "tlsroutes", "referencegrants"}

// placeholders are what the conformance suite replaces in its manifests
// before it applies them (as gatewayapi.TestConformanceManifests does).
var placeholders = strings.NewReplacer(
	"{GATEWAY_CLASS_NAME}", "istio",
	"{GATEWAY_CONTROLLER_NAME}", "istio.io/gateway-controller",
	"PLACEHOLDER_UNUSABLE_ADDRS", "192.0.2.1",
	"PLACEHOLDER_USABLE_ADDRS", "192.0.2.2",
)

// unfireable are the rules no document can fail on an API server, and why.
var unfireable = map[string]string{
	"self.type in ['Exact','PathPrefix'] || self.type == 'RegularExpression'": "the type's enum refuses any other value (and type defaults to PathPrefix): an enum violation is a blocking error, after which the API server evaluates no CEL rule",
}

func main() {
	root := flag.String("root", "../..", "vmesh's repository root")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "gatewayapi-oracle:", err)
		os.Exit(1)
	}
}

// Error is one error of a verdict.
type Error struct {
	// Field is the path, "spec.rules[0].matches[0].path".
	Field string `json:"field"`
	// Type is the field.ErrorType's text ("Invalid value", "Required value").
	Type string `json:"type"`
	// Detail is the message (a CEL rule's message).
	Detail string `json:"detail"`
	// Rule is the id of the CEL rule (rules.json) that failed, if any.
	Rule string `json:"rule,omitempty"`
}

// Verdict is the upstream verdict on one document.
type Verdict struct {
	// File is the document's file under gatewayapi/testdata, Line its
	// first line (its apiVersion or first key).
	File       string  `json:"file"`
	Line       int     `json:"line"`
	Kind       string  `json:"kind"`
	APIVersion string  `json:"apiVersion"`
	Name       string  `json:"name"`
	Accept     bool    `json:"accept"`
	Errors     []Error `json:"errors,omitempty"`
}

// Rule is one x-kubernetes-validations rule of a kind's spec.
type Rule struct {
	ID       string   `json:"id"`
	Kind     string   `json:"kind"`
	Path     string   `json:"path"`
	Versions []string `json:"versions"`
	Rule     string   `json:"rule"`
	Message  string   `json:"message"`
	// FiredBy are the documents (file:line) whose verdict has this rule.
	FiredBy []string `json:"firedBy"`
	// Reason says why no document fires the rule, when none does.
	Reason string `json:"reason,omitempty"`
}

// served is one kind and version: its CRD's schema, as the API server
// builds it, and the same schema with each rule's message replaced by the
// rule's id (to tell which rule an error comes from).
type served struct {
	kind, version, channel string
	namespaced             bool
	structural             *structuralschema.Structural
	validator              validation.SchemaValidator
	cel                    *cel.Validator
	tagged                 *structuralschema.Structural
	taggedCEL              *cel.Validator
	// rules are all kinds' rules, by id.
	rules map[string]*Rule
}

func run(root string) error {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}}@{{.Version}} {{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		return fmt.Errorf("go list: %w", err)
	}
	mod, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	var vmeshSchemas struct {
		Module string `json:"module"`
	}
	data, err := os.ReadFile(filepath.Join(root, "gatewayapi", "schemas.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &vmeshSchemas); err != nil {
		return err
	}
	if vmeshSchemas.Module != mod {
		return fmt.Errorf("vmesh's schemas.json comes from %s, this module has %s: align go.mod", vmeshSchemas.Module, mod)
	}
	crds, rules, err := loadCRDs(dir)
	if err != nil {
		return err
	}
	td := filepath.Join(root, "gatewayapi", "testdata")
	var verdicts []Verdict
	for _, sub := range []string{"conformance", "invalid"} {
		err := filepath.WalkDir(filepath.Join(td, sub), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
				return err
			}
			rel, err := filepath.Rel(td, path)
			if err != nil {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if sub == "conformance" {
				data = []byte(placeholders.Replace(string(data)))
			}
			vs, err := validateFile(filepath.ToSlash(rel), data, crds)
			if err != nil {
				return err
			}
			verdicts = append(verdicts, vs...)
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, v := range verdicts {
		at := fmt.Sprintf("%s:%d", v.File, v.Line)
		for _, e := range v.Errors {
			if r := rules[e.Rule]; r != nil && !slices.Contains(r.FiredBy, at) {
				r.FiredBy = append(r.FiredBy, at)
			}
		}
	}
	var list []*Rule
	never := 0
	for _, r := range rules {
		if len(r.FiredBy) == 0 {
			never++
			switch {
			case strings.Contains(r.Rule, "oldSelf"):
				r.Reason = "transition rule (oldSelf): compares an update with the stored object, which a file has not"
			case unfireable[r.Rule] != "":
				r.Reason = unfireable[r.Rule]
			}
		}
		list = append(list, r)
	}
	sort.Slice(list, func(i, j int) bool { return ruleLess(list[i].ID, list[j].ID) })
	outDir := filepath.Join(td, "upstream")
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	if err := writeLines(filepath.Join(outDir, "verdicts.json"), mod, verdicts); err != nil {
		return err
	}
	if err := writeLines(filepath.Join(outDir, "rules.json"), mod, list); err != nil {
		return err
	}
	accepted, refused := 0, 0
	for _, v := range verdicts {
		if v.Accept {
			accepted++
		} else {
			refused++
		}
	}
	fmt.Printf("%s: %d documents (%d accepted, %d refused); %d CEL rules, %d fired by none:\n", mod, len(verdicts), accepted, refused, len(list), never)
	for _, r := range list {
		if len(r.FiredBy) == 0 {
			fmt.Printf("  %s %s %s: %s (%s)\n", r.ID, r.Kind, r.Path, r.Rule, orNone(r.Reason))
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "NO REASON: add an invalid variant"
	}
	return s
}

// ruleLess orders rule ids "r12" numerically.
func ruleLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// writeLines writes a JSON array, one element a line, under a header
// naming the module.
func writeLines[T any](path, mod string, items []T) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "{\"module\": %q, \"apiextensions\": %q,\n \"items\": [\n", mod, apiextensionsVersion())
	for i, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return err
		}
		buf.Write(b)
		if i < len(items)-1 {
			buf.WriteString(",")
		}
		buf.WriteString("\n")
	}
	buf.WriteString("]}\n")
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func apiextensionsVersion() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}}@{{.Version}}", "k8s.io/apiextensions-apiserver").Output()
	if err != nil {
		return "k8s.io/apiextensions-apiserver"
	}
	return strings.TrimSpace(string(out))
}

type crdFile struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Scope    string `json:"scope"`
		Versions []struct {
			Name   string `json:"name"`
			Served bool   `json:"served"`
			Schema struct {
				OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// loadCRDs builds each served kind and version (standard channel first)
// and enumerates the rules of their specs.
func loadCRDs(dir string) (map[string]*served, map[string]*Rule, error) {
	crds := map[string]*served{}
	rules := map[string]*Rule{}
	byKey := map[string]*Rule{}
	for _, plural := range kinds {
		for _, channel := range []string{"standard", "experimental"} {
			data, err := os.ReadFile(filepath.Join(dir, "config", "crd", channel, "gateway.networking.k8s.io_"+plural+".yaml"))
			if err != nil {
				return nil, nil, err
			}
			var c crdFile
			if err := sigsyaml.Unmarshal(data, &c); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", plural, err)
			}
			kind := c.Spec.Names.Kind
			for _, v := range c.Spec.Versions {
				key := kind + "/" + v.Name
				if !v.Served || crds[key] != nil {
					continue
				}
				s := &served{kind: kind, version: v.Name, channel: channel, namespaced: c.Spec.Scope == "Namespaced", rules: rules}
				raw := v.Schema.OpenAPIV3Schema
				if s.structural, s.validator, err = build(raw); err != nil {
					return nil, nil, fmt.Errorf("%s %s: %w", key, channel, err)
				}
				s.cel = cel.NewValidator(s.structural, true, celconfig.PerCallLimit)
				tagged := deepCopy(raw).(map[string]any)
				spec, _ := tagged["properties"].(map[string]any)["spec"].(map[string]any)
				walkRules(spec, "spec", func(path string, r map[string]any) {
					text, _ := r["rule"].(string)
					msg, _ := r["message"].(string)
					k := kind + "\x00" + path + "\x00" + text
					rule := byKey[k]
					if rule == nil {
						rule = &Rule{ID: fmt.Sprintf("r%d", len(byKey)+1), Kind: kind, Path: path, Rule: text, Message: msg, FiredBy: []string{}}
						byKey[k] = rule
						rules[rule.ID] = rule
					}
					rule.Versions = append(rule.Versions, v.Name+" ("+channel+")")
					r["message"] = "vmesh-oracle-rule:" + rule.ID
				})
				if s.tagged, _, err = build(tagged); err != nil {
					return nil, nil, fmt.Errorf("%s %s (tagged): %w", key, channel, err)
				}
				s.taggedCEL = cel.NewValidator(s.tagged, true, celconfig.PerCallLimit)
				crds[key] = s
			}
		}
	}
	return crds, rules, nil
}

// build turns a CRD version's openAPIV3Schema into the structural schema
// and schema validator, as the API server's CRD handler does.
func build(raw map[string]any) (*structuralschema.Structural, validation.SchemaValidator, error) {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, nil, err
	}
	var v1 apiextensionsv1.JSONSchemaProps
	if err := json.Unmarshal(b, &v1); err != nil {
		return nil, nil, err
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(&v1, &internal, nil); err != nil {
		return nil, nil, err
	}
	s, err := structuralschema.NewStructural(&internal)
	if err != nil {
		return nil, nil, err
	}
	val, _, err := validation.NewSchemaValidator(&internal)
	if err != nil {
		return nil, nil, err
	}
	return s, val, nil
}

// walkRules calls f on every x-kubernetes-validations rule under s, with
// the schema path ("spec.rules[*].filters[*]").
func walkRules(s map[string]any, path string, f func(string, map[string]any)) {
	if s == nil {
		return
	}
	if rs, ok := s["x-kubernetes-validations"].([]any); ok {
		for _, r := range rs {
			if m, ok := r.(map[string]any); ok {
				f(path, m)
			}
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		names := make([]string, 0, len(props))
		for n := range props {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			p, _ := props[n].(map[string]any)
			walkRules(p, path+"."+n, f)
		}
	}
	if it, ok := s["items"].(map[string]any); ok {
		walkRules(it, path+"[*]", f)
	}
	if ap, ok := s["additionalProperties"].(map[string]any); ok {
		walkRules(ap, path+"[*]", f)
	}
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// validateFile validates each document of a Gateway API kind vmesh decodes.
func validateFile(rel string, data []byte, crds map[string]*served) ([]Verdict, error) {
	var out []Verdict
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
			continue
		}
		obj, err := jsonObject(doc.Content[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", rel, doc.Content[0].Line, err)
		}
		apiVersion, _ := obj["apiVersion"].(string)
		kind, _ := obj["kind"].(string)
		group, version, _ := strings.Cut(apiVersion, "/")
		if group != "gateway.networking.k8s.io" {
			continue
		}
		s := crds[kind+"/"+version]
		if s == nil {
			continue // a kind vmesh does not decode, or a version no CRD serves
		}
		v := Verdict{File: rel, Line: doc.Content[0].Line, Kind: kind, APIVersion: apiVersion}
		if md, ok := obj["metadata"].(map[string]any); ok {
			v.Name, _ = md["name"].(string)
			if _, has := md["namespace"]; !has && s.namespaced {
				md["namespace"] = "default" // as kubectl sends it
			}
		}
		v.Errors = s.validate(obj)
		v.Accept = len(v.Errors) == 0
		out = append(out, v)
	}
}

// jsonObject is what kubectl sends for a YAML document (sigs.k8s.io/yaml's
// YAML to JSON) as the API server's JSON decoder reads it (int64, float64,
// string, bool, maps, slices).
func jsonObject(n *yaml.Node) (map[string]any, error) {
	text, err := yaml.Marshal(n)
	if err != nil {
		return nil, err
	}
	j, err := sigsyaml.YAMLToJSON(text)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := utiljson.Unmarshal(j, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// validate is a create request of obj with strict field validation:
// customresource_handler.go's unstructuredSchemaCoercer.apply (pruning,
// unknown fields, nulls) and unstructuredDefaulter, then
// customResourceStrategy.PrepareForCreate and Validate
// (registry/customresource/strategy.go, validator.go).
func (s *served) validate(obj map[string]any) []Error {
	unknown := pruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(unknown) > 0 {
		// schemaCoercingDecoder: a strict decoding error, before validation.
		var out []Error
		for _, p := range unknown {
			out = append(out, Error{Field: p, Type: "Unknown field", Detail: fmt.Sprintf("unknown field %q", p)})
		}
		sortErrors(out)
		return out
	}
	defaulting.PruneNonNullableNullsWithoutDefaults(obj, s.structural)
	defaulting.Default(obj, s.structural)
	delete(obj, "status") // PrepareForCreate: the status subresource
	u := &unstructured.Unstructured{Object: obj}

	var errs field.ErrorList
	// customResourceValidator.Validate (no scale subresource)
	errs = append(errs, metavalidation.ValidateObjectMetaAccessor(u, s.namespaced, metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	errs = append(errs, validation.ValidateCustomResource(nil, u.UnstructuredContent(), s.validator)...)
	// customResourceStrategy.Validate
	errs = append(errs, schemaobjectmeta.Validate(nil, u.Object, s.structural, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, s.structural, u.Object)...)
	var tagged field.ErrorList
	if has, err := hasBlockingErr(errs); has {
		errs = append(errs, err)
	} else if s.cel != nil {
		celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, u.Object, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
		tagged, _ = s.taggedCEL.Validate(context.Background(), nil, s.tagged, u.Object, nil, celconfig.RuntimeCELCostBudget)
	}
	// Which rule each CEL error comes from: the tagged schema's errors
	// carry the rule's id where the real ones carry its message.
	ruleAt := map[string][]string{}
	for _, e := range tagged {
		if id, ok := strings.CutPrefix(e.Detail, "vmesh-oracle-rule:"); ok {
			ruleAt[e.Field] = append(ruleAt[e.Field], id)
		}
	}
	var out []Error
	for _, e := range errs {
		ee := Error{Field: e.Field, Type: e.Type.String(), Detail: e.Detail}
		if e.Type == field.ErrorTypeInvalid {
			ids := ruleAt[e.Field]
			for i, id := range ids {
				r := s.rules[id]
				if r.Message == e.Detail || (r.Message == "" && e.Detail == "failed rule: "+r.Rule) {
					ee.Rule = id
					ruleAt[e.Field] = slices.Delete(ids, i, i+1)
					break
				}
			}
		}
		out = append(out, ee)
	}
	sortErrors(out)
	return out
}

// hasBlockingErr is registry/customresource/strategy.go's: these schema
// errors stop the CEL rules.
func hasBlockingErr(errs field.ErrorList) (bool, *field.Error) {
	for _, err := range errs {
		if err.Type == field.ErrorTypeNotSupported || err.Type == field.ErrorTypeRequired || err.Type == field.ErrorTypeTooLong || err.Type == field.ErrorTypeTooMany || err.Type == field.ErrorTypeTypeInvalid {
			return true, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")
		}
	}
	return false, nil
}

func sortErrors(errs []Error) {
	sort.SliceStable(errs, func(i, j int) bool {
		if errs[i].Field != errs[j].Field {
			return errs[i].Field < errs[j].Field
		}
		return errs[i].Detail < errs[j].Detail
	})
}
