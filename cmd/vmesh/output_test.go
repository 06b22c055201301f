package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/vmesh/vmesh/store"
)

// -o json|yaml on validate and analyze prints {objects, errors, warnings}
// with the same exit codes as the lines.
func TestValidateAndAnalyzeOutput(t *testing.T) {
	var r configReport
	out, code := runVMesh(t, "validate", "-o", "json", "testdata/warnings")
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.Objects == 0 || len(r.Errors) != 0 || len(r.Warnings) == 0 {
		t.Fatalf("validate -o json (exit %d, %v):\n%s", code, err, out)
	}
	found := false
	for _, w := range r.Warnings {
		found = found || w.Code == store.CodeKindNotImplemented && w.Severity == store.SeverityWarning && w.File != "" && w.Line > 0
	}
	if !found {
		t.Errorf("no VM1001 warning with file and line: %+v", r.Warnings)
	}
	if _, code := runVMesh(t, "validate", "-o", "json", "--strict", "testdata/warnings"); code != 1 {
		t.Errorf("validate -o json --strict with warnings: exit %d, want 1", code)
	}
	out, code = runVMesh(t, "analyze", "-o", "yaml", "testdata/warnings")
	var y struct {
		Objects  int              `yaml:"objects"`
		Warnings []map[string]any `yaml:"warnings"`
		Errors   []map[string]any `yaml:"errors"`
	}
	if err := yaml.Unmarshal([]byte(out), &y); code != 1 || err != nil || y.Objects != r.Objects || len(y.Warnings) < len(r.Warnings) || len(y.Errors) != 0 {
		t.Errorf("analyze -o yaml (exit %d, %v):\n%s", code, err, out)
	}
	out, code = runVMesh(t, "validate", "-o", "json", "testdata/invalid/destinationrule.yaml")
	if err := json.Unmarshal([]byte(out), &r); code != 1 || err != nil || len(r.Errors) == 0 || !strings.Contains(r.Errors[0].File, "destinationrule.yaml") {
		t.Errorf("validate -o json on an invalid file (exit %d, %v):\n%s", code, err, out)
	}
}

// vmesh diff -o yaml is the list --json prints, as YAML.
func TestDiffOutputYAML(t *testing.T) {
	before, after := t.TempDir(), t.TempDir()
	writeTo := func(dir, name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{before, after} {
		writeTo(d, "services.yaml", opsServices)
		writeTo(d, "workloads.yaml", opsWorkload("greeter-v1", "demo", "greeter", 7001))
	}
	writeTo(before, "route.yaml", fmt.Sprintf(opsRoute, "5s"))
	writeTo(after, "route.yaml", fmt.Sprintf(opsRoute, "9s"))
	js, code := runVMesh(t, "diff", "--dir", before, "--dir", after, "-o", "json")
	if code != 0 {
		t.Fatalf("diff -o json: exit %d", code)
	}
	ys, code := runVMesh(t, "diff", "--dir", before, "--dir", after, "-o", "yaml")
	if code != 0 {
		t.Fatalf("diff -o yaml: exit %d", code)
	}
	var fromJSON, fromYAML []map[string]any
	if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(ys), &fromYAML); err != nil {
		t.Fatalf("%v\n%s", err, ys)
	}
	if len(fromJSON) == 0 || len(fromJSON) != len(fromYAML) || fromJSON[0]["proxy"] == nil || fromJSON[0]["proxy"] != fromYAML[0]["proxy"] {
		t.Errorf("diff -o yaml (%d proxies) differs from -o json (%d):\n%s", len(fromYAML), len(fromJSON), ys)
	}
}
