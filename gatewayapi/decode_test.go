package gatewayapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func specNode(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	return n.Content[0]
}

// TestDecodeSpecDefaults: a valid HTTPRoute decodes with the CRD's
// defaults filled in, and fits the upstream Go type.
func TestDecodeSpecDefaults(t *testing.T) {
	d := DecodeSpec("HTTPRoute", "v1", specNode(t, `
parentRefs: [{name: edge}]
rules:
- backendRefs: [{name: echo, port: 80}]
`))
	if len(d.Problems) > 0 {
		t.Fatalf("problems: %v", d.Problems)
	}
	b, err := json.Marshal(d.Spec)
	if err != nil {
		t.Fatal(err)
	}
	var spec gwv1.HTTPRouteSpec
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		t.Fatalf("the upstream type refuses the decoded spec: %v", err)
	}
	pr := spec.ParentRefs[0]
	if pr.Group == nil || *pr.Group != Group || pr.Kind == nil || *pr.Kind != "Gateway" {
		t.Errorf("parentRef group/kind not defaulted: %s", b)
	}
	r := spec.Rules[0]
	if len(r.Matches) != 1 || r.Matches[0].Path == nil || *r.Matches[0].Path.Type != gwv1.PathMatchPathPrefix || *r.Matches[0].Path.Value != "/" {
		t.Errorf("rule matches not defaulted to PathPrefix /: %s", b)
	}
	be := r.BackendRefs[0]
	if be.Weight == nil || *be.Weight != 1 || be.Kind == nil || *be.Kind != "Service" {
		t.Errorf("backendRef weight/kind not defaulted: %s", b)
	}
}

// TestDecodeSpecValidKinds: one valid spec of each kind decodes.
func TestDecodeSpecValidKinds(t *testing.T) {
	cases := map[string]string{
		"GatewayClass":   "controllerName: istio.io/gateway-controller",
		"Gateway":        "gatewayClassName: istio\nlisteners: [{name: http, port: 80, protocol: HTTP, hostname: '*.example.com'}]",
		"HTTPRoute":      "parentRefs: [{name: echo, kind: ServiceEntry, group: networking.istio.io}]\nrules: [{matches: [{headers: [{name: x-v, value: '2'}]}], backendRefs: [{name: echo, port: 80}], timeouts: {request: 5s}}]",
		"GRPCRoute":      "parentRefs: [{name: echo}]\nrules: [{matches: [{method: {service: echo.Echo, method: Call}}], backendRefs: [{name: echo, port: 80, weight: 80}]}]",
		"TCPRoute":       "parentRefs: [{name: gw}]\nrules: [{backendRefs: [{name: a, port: 9000}]}]",
		"TLSRoute":       "parentRefs: [{name: gw}]\nhostnames: ['*.example.com']\nrules: [{backendRefs: [{name: a, port: 443}]}]",
		"ReferenceGrant": "from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: edge}]\nto: [{group: '', kind: Service}]",
	}
	for kind, spec := range cases {
		d := DecodeSpec(kind, "v1", specNode(t, spec))
		if len(d.Problems) > 0 || d.Spec == nil {
			t.Errorf("%s: %+v", kind, d.Problems)
		}
	}
	if got := Versions("TCPRoute"); strings.Join(got, ",") != "v1,v1alpha2" {
		t.Errorf("TCPRoute versions = %v", got)
	}
}

// notExercised are the CRDs' CEL rules no invalid variant fails, and why:
// each is a rule that cannot fail (rules.json of testdata/upstream says the
// same of the API server).
var notExercised = map[string]string{
	// The type's enum refuses any other value first, and an enum problem
	// blocks every CEL rule (as on the API server); type defaults to
	// PathPrefix, so it is never absent.
	"self.type in ['Exact','PathPrefix'] || self.type == 'RegularExpression'": "shadowed by the enum",
}

// invalidSpecs are the specs of the documents of testdata/invalid, the
// invalid variants TestUpstreamValidation compares with the API server
// (but metadata.yaml's, whose specs are valid: filestore checks metadata).
func invalidSpecs(t *testing.T) []invalidSpec {
	t.Helper()
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/invalid/*.yaml: %v", err)
	}
	var out []invalidSpec
	for _, f := range files {
		if filepath.Base(f) == "metadata.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc struct {
				APIVersion string    `yaml:"apiVersion"`
				Kind       string    `yaml:"kind"`
				Spec       yaml.Node `yaml:"spec"`
			}
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			_, version, _ := strings.Cut(doc.APIVersion, "/")
			out = append(out, invalidSpec{kind: doc.Kind, version: version, spec: &doc.Spec, at: fmt.Sprintf("%s:%d", f, doc.Spec.Line)})
		}
	}
	return out
}

type invalidSpec struct {
	kind, version, at string
	spec              *yaml.Node
}

// TestInvalidVariantsRefused: vmesh refuses every document of
// testdata/invalid (TestUpstreamValidation compares the fields with the
// API server's).
func TestInvalidVariantsRefused(t *testing.T) {
	specs := invalidSpecs(t)
	for _, c := range specs {
		if d := DecodeSpec(c.kind, c.version, c.spec); d.Spec != nil || len(d.Problems) == 0 {
			t.Errorf("%s: %s %s accepted", c.at, c.kind, c.version)
		}
	}
	if len(specs) < 150 {
		t.Errorf("only %d invalid variants", len(specs))
	}
}

// TestCELRuleCoverage: every CEL rule of the CRDs (but the transition
// rules) fails, in vmesh's own evaluation, for at least one invalid variant
// of testdata/invalid, or is listed in notExercised with the reason.
func TestCELRuleCoverage(t *testing.T) {
	failed := map[string]bool{}
	for _, c := range invalidSpecs(t) {
		decodeSpecRules(c.kind, c.version, c.spec, failed)
	}
	cs, err := loadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]bool{}
	var walk func(s *schema)
	walk = func(s *schema) {
		if s == nil {
			return
		}
		for _, r := range s.Validations {
			if !r.transition {
				all[r.Rule] = true
			}
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.additional)
	}
	for _, versions := range cs.specs {
		for _, s := range versions {
			walk(s)
		}
	}
	var missing []string
	for r := range all {
		if !failed[r] && notExercised[r] == "" {
			missing = append(missing, r)
		}
	}
	slices.Sort(missing)
	t.Logf("%d rules, %d exercised, %d listed as not exercisable", len(all), len(failed), len(notExercised))
	for _, r := range missing {
		t.Errorf("no case fails rule %s", r)
	}
	// A listed rule must still be a rule of the CRDs, and one no case
	// fails (else the entry is stale).
	for r, why := range notExercised {
		switch {
		case !all[r]:
			t.Errorf("notExercised lists a rule the CRDs no longer have (%s): %s", why, r)
		case failed[r]:
			t.Errorf("notExercised lists a rule a case fails (%s): %s", why, r)
		}
	}
	if len(all) == 0 || len(failed)+len(notExercised) != len(all) {
		t.Errorf("%d rules: %d exercised + %d listed", len(all), len(failed), len(notExercised))
	}
}
