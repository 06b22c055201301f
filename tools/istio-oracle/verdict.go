package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/crd"
	"istio.io/istio/pkg/config/schema/collections"
)

// Verdict is Istio's answer on one corpus document.
type Verdict struct {
	// ID is the document's file under the corpus directory.
	ID string `json:"id"`
	// Source and Index name the Istio file and document it was taken from
	// (for unit-test cases, the test).
	Source string `json:"source"`
	Index  int    `json:"index"`
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	// Accepted is true when istioctl validate, the CRD schema and CEL rules,
	// and the object-meta rules all accept the document.
	Accepted bool     `json:"accepted"`
	Errors   []string `json:"errors,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Expect is the "_err" of Istio's CRD test corpus, when it has one.
	Expect string `json:"expect,omitempty"`
}

type oracle struct {
	crd *crd.Validator
}

func newOracle(src string) (*oracle, error) {
	v, err := crd.NewValidatorFromFiles(filepath.Join(src, "manifests/charts/base/files/crd-all.gen.yaml"))
	if err != nil {
		return nil, fmt.Errorf("Istio CRDs: %w", err)
	}
	return &oracle{crd: v}, nil
}

// verdicts validates every document under dir, in path order.
func (o *oracle) verdicts(dir string) ([]Verdict, error) {
	var out []Verdict
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		v := o.validate(data)
		v.ID = filepath.ToSlash(rel)
		v.Source, v.Index, v.Expect = header(data)
		out = append(out, v)
		return nil
	})
	return out, err
}

// header reads the comments collectFiles and harvestUnitTests write.
func header(data []byte) (source string, index int, expect string) {
	for _, l := range strings.Split(string(data), "\n") {
		if s, ok := strings.CutPrefix(l, "# source: "); ok {
			source = s
			if i := strings.LastIndex(s, " document "); i >= 0 {
				source = s[:i]
				index, _ = strconv.Atoi(s[i+len(" document "):])
			}
		}
		if s, ok := strings.CutPrefix(l, "# Istio's test expects: "); ok {
			expect = s
		}
	}
	return source, index, expect
}

// validate computes Istio's verdict on one document.
func (o *oracle) validate(doc []byte) Verdict {
	var v Verdict
	fail := func(stage string, err error) {
		for _, l := range strings.Split(strings.TrimSpace(err.Error()), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasSuffix(l, "errors occurred:") {
				v.Errors = append(v.Errors, stage+": "+stableText(strings.TrimPrefix(l, "* ")))
			}
		}
	}
	// istioctl validate: strict YAML, the schema for the GVK, strict spec
	// decoding, top-level fields, then the kind's ValidateConfig.
	out := map[string]any{}
	if err := yaml.UnmarshalStrict(doc, &out); err != nil {
		fail("istioctl", err)
		return v
	}
	un := &unstructured.Unstructured{Object: out}
	v.Kind, v.Name = un.GetKind(), un.GetName()
	g := un.GroupVersionKind()
	schema, ok := collections.Pilot.FindByGroupVersionAliasesKind(config.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind})
	if !ok {
		fail("istioctl", fmt.Errorf("no schema for %v", g))
		return v
	}
	cfg, err := istioctlConvert(schema.NewInstance, un)
	if err != nil {
		fail("istioctl", fmt.Errorf("cannot parse proto message: %v", err))
	} else {
		for key := range un.Object {
			if !slices.Contains([]string{"apiVersion", "kind", "metadata", "spec", "status"}, key) {
				fail("istioctl", fmt.Errorf("unknown field %q", key))
			}
		}
		if cfg.Namespace == "" {
			cfg.Namespace = metav1.NamespaceDefault
		}
		warn, err := schema.ValidateConfig(*cfg)
		if err != nil {
			fail("istioctl", err)
		}
		if warn != nil {
			for _, l := range strings.Split(strings.TrimSpace(warn.Error()), "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasSuffix(l, "errors occurred:") {
					v.Warnings = append(v.Warnings, stableText(strings.TrimPrefix(l, "* ")))
				}
			}
		}
	}
	// The API server: Istio's CRD schema and CEL rules, then object meta.
	// The API server decodes JSON, integers as int64 (the YAML decoder above
	// gives float64, which the CEL rules refuse).
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		fail("crd", err)
	} else {
		server := &unstructured.Unstructured{}
		if err := server.UnmarshalJSON(js); err != nil {
			fail("crd", err)
		} else if err := o.crd.ValidateCustomResource(server); err != nil {
			fail("crd", err)
		}
	}
	if err := objectMeta(un); err != nil {
		fail("meta", err)
	}
	v.Accepted = len(v.Errors) == 0
	return v
}

// istioctlConvert is istioctl validate's convertObjectFromUnstructured: the
// spec decoded strictly into the kind's message.
func istioctlConvert(newInstance func() (config.Spec, error), un *unstructured.Unstructured) (*config.Config, error) {
	js, err := json.Marshal(un.Object["spec"])
	if err != nil {
		return nil, err
	}
	spec, err := newInstance()
	if err != nil {
		return nil, err
	}
	if err := config.ApplyJSONStrict(spec, string(js)); err != nil {
		return nil, err
	}
	return &config.Config{
		Meta: config.Meta{
			Name: un.GetName(), Namespace: un.GetNamespace(), Labels: un.GetLabels(), Annotations: un.GetAnnotations(),
		},
		Spec: spec,
	}, nil
}

// objectMeta applies the API server's metadata rules to a namespaced object
// created in the default namespace when it names none, decoding metadata
// strictly (kubectl's default server-side field validation).
func objectMeta(un *unstructured.Unstructured) error {
	raw, ok := un.Object["metadata"]
	if !ok {
		return fmt.Errorf("metadata.name: Required value: name or generateName is required")
	}
	js, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	var meta metav1.ObjectMeta
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&meta); err != nil {
		return fmt.Errorf("metadata: %v", err)
	}
	if meta.Namespace == "" {
		meta.Namespace = metav1.NamespaceDefault
	}
	errs := apivalidation.ValidateObjectMeta(&meta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return errs.ToAggregate()
}

func writeVerdicts(path, istio string, vs []Verdict) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(struct {
		Istio     string    `json:"istio"`
		Documents []Verdict `json:"documents"`
	}{istio, vs}); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// stableText collapses runs of spaces: Istio's messages embed protobuf text,
// whose spacing protobuf-go varies from build to build on purpose.
func stableText(s string) string { return strings.Join(strings.Fields(s), " ") }
