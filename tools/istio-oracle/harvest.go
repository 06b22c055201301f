package main

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"sigs.k8s.io/yaml"
)

// harvestHook is added to Istio's pkg/config/validation while its tests run.
//
//go:embed harvest_hook.go.in
var harvestHook []byte

// fragmentValidators are the unexported validators Istio's tests call on a
// part of an object; the hook records each such part inside a whole object.
var fragmentValidators = []string{
	"HTTPRoute", "TrafficPolicy", "ConnectionPool", "LoadBalancer", "OutlierDetection", "Server", "TLSOptions",
	"HTTPRetry", "HTTPFaultInjectionAbort", "HTTPFaultInjectionDelay", "CORSPolicy", "HTTPRewrite", "HTTPRedirect",
	"HTTPDirectResponse", "Destination", "RouteDestinations", "ServerPort", "URIRegexRewrite", "ExportTo",
}

// maxHarvested bounds a recorded case, to keep the corpus small.
const maxHarvested = 64 << 10

type harvested struct {
	Validator   string            `json:"validator"`
	Test        string            `json:"test"`
	Type        string            `json:"type"`
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Spec        json.RawMessage   `json:"spec"`
}

// harvestUnitTests runs Istio's pkg/config/validation tests, in a patched
// copy of the package, with a hook that records every config a test case
// validates (whole objects through RegisterValidateFunc, and the fragments
// listed above inside a minimal object), and writes each distinct one of a
// vmesh kind to dst/<TestName>/<n>.yaml. Istio's test verdicts are not used: the oracle
// validates the recorded objects like any other document.
func harvestUnitTests(src, dst string) (int, error) {
	// A patched copy of the package, inside this module (the module cache
	// is read-only, and Go refuses overlays there); removed afterwards.
	const copyDir = "_harvest/validation"
	if err := os.RemoveAll("_harvest"); err != nil {
		return 0, err
	}
	defer os.RemoveAll("_harvest")
	if err := os.MkdirAll(copyDir, 0o755); err != nil {
		return 0, err
	}
	pkg := filepath.Join(src, "pkg/config/validation")
	call := regexp.MustCompile(`([^A-Za-z0-9_."])validate(` + strings.Join(fragmentValidators, "|") + `)\(`)
	headerValueCall := regexp.MustCompile(`([^A-Za-z0-9_."])ValidateHTTPHeaderValue\(`)
	const register = "validate := validateMetadata(f)"
	files, err := filepath.Glob(filepath.Join(pkg, "*.go"))
	if err != nil {
		return 0, err
	}
	for _, f := range files {
		name := filepath.Base(f)
		if name == "openapi_test.go" || name == "fuzz_test.go" {
			continue // external tests of the original package
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		switch {
		case name == "validation.go":
			if !bytes.Contains(data, []byte(register)) {
				return 0, fmt.Errorf("validation.go no longer has %q; update the hook", register)
			}
			data = bytes.Replace(data, []byte(register), []byte("validate := harvestWrap(name, validateMetadata(f))"), 1)
		case strings.HasSuffix(name, "_test.go"):
			data = call.ReplaceAll(data, []byte("${1}harvestFrag${2}("))
			data = headerValueCall.ReplaceAll(data, []byte("${1}harvestFragHeaderValue("))
		}
		if err := os.WriteFile(filepath.Join(copyDir, name), data, 0o644); err != nil {
			return 0, err
		}
	}
	if err := os.WriteFile(filepath.Join(copyDir, "zz_harvest_hook.go"), harvestHook, 0o644); err != nil {
		return 0, err
	}
	records, err := filepath.Abs(filepath.Join("_harvest", "records.jsonl"))
	if err != nil {
		return 0, err
	}
	cmd := exec.Command("go", "test", "-count=1", "-run", "^Test", "./"+copyDir)
	cmd.Env = append(os.Environ(), "ISTIO_ORACLE_HARVEST="+records)
	testOut, testErr := cmd.CombinedOutput()
	data, err := os.ReadFile(records)
	if err != nil {
		return 0, fmt.Errorf("no records (go test: %v):\n%s", testErr, testOut)
	}
	seen := map[string]bool{}
	perTest := map[string]int{}
	n, skipped := 0, 0
	defer func() {
		if skipped > 0 {
			log.Printf("harvest: %d cases larger than %d bytes left out", skipped, maxHarvested)
		}
	}()
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r harvested
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return n, err
		}
		kind := strings.TrimPrefix(r.Validator, "Validate")
		group := vmeshKinds[kind]
		if group == "" || !strings.HasSuffix(r.Type, "."+kind) {
			continue // a kind vmesh doesn't implement, or a test feeding the wrong type
		}
		meta := map[string]any{"name": r.Name}
		if r.Name == "" {
			meta["name"] = "unnamed"
		}
		if r.Namespace != "" {
			meta["namespace"] = r.Namespace
		}
		if len(r.Labels) > 0 {
			meta["labels"] = r.Labels
		}
		if len(r.Annotations) > 0 {
			meta["annotations"] = r.Annotations
		}
		spec, err := int64sAsNumbers(group, kind, r.Spec)
		if err != nil {
			return n, err
		}
		obj := map[string]any{"apiVersion": group + "/v1", "kind": kind, "metadata": meta, "spec": spec}
		js, err := json.Marshal(obj)
		if err != nil {
			return n, err
		}
		if seen[string(js)] {
			continue
		}
		seen[string(js)] = true
		if len(js) > maxHarvested {
			skipped++ // the size-limit cases (direct response bodies of 1 MB and more)
			continue
		}
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			return n, err
		}
		perTest[r.Test]++
		head := fmt.Sprintf("# source: pkg/config/validation %s, a case recorded through %s\n", r.Test, r.Validator)
		if err := writeFile(filepath.Join(dst, r.Test, fmt.Sprintf("%03d.yaml", perTest[r.Test])), append([]byte(head), y...)); err != nil {
			return n, err
		}
		n++
	}
	return n, sc.Err()
}

// int64sAsNumbers undoes protojson's quoting of 64-bit integers (and their
// wrappers), which the CRD schema would refuse as strings though the test
// case holds a number.
func int64sAsNumbers(group, kind string, spec json.RawMessage) (any, error) {
	pkg := "istio.networking.v1alpha3."
	if group == "security.istio.io" {
		pkg = "istio.security.v1beta1."
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(pkg + kind))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return messageNumbers(mt.Descriptor(), v), nil
}

func messageNumbers(md protoreflect.MessageDescriptor, v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	for k, val := range m {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			continue
		}
		switch {
		case fd.IsMap():
			if mm, ok := val.(map[string]any); ok {
				for mk, mv := range mm {
					mm[mk] = fieldNumbers(fd.MapValue(), mv)
				}
			}
		case fd.IsList():
			if l, ok := val.([]any); ok {
				for i, e := range l {
					l[i] = fieldNumbers(fd, e)
				}
			}
		default:
			m[k] = fieldNumbers(fd, val)
		}
	}
	return m
}

func fieldNumbers(fd protoreflect.FieldDescriptor, v any) any {
	s, isString := v.(string)
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if isString {
			return json.Number(s)
		}
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Int64Value", "google.protobuf.UInt64Value":
			if isString {
				return json.Number(s)
			}
		}
		return messageNumbers(fd.Message(), v)
	}
	return v
}
