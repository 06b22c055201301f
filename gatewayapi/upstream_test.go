package gatewayapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vmesh/vmesh/filestore"
	"github.com/vmesh/vmesh/gatewayapi"
	"github.com/vmesh/vmesh/store"
	"gopkg.in/yaml.v3"
)

// upstreamDir holds the Kubernetes API server's own verdicts on the
// documents of testdata/conformance and testdata/invalid, written by
// tools/gatewayapi-oracle (make gatewayapi-verdicts).
const upstreamDir = "testdata/upstream"

// upstreamError is one error of an upstream verdict.
type upstreamError struct {
	Field  string `json:"field"`
	Type   string `json:"type"`
	Detail string `json:"detail"`
	Rule   string `json:"rule"`
}

// upstreamVerdict is the API server's verdict on one document.
type upstreamVerdict struct {
	File       string          `json:"file"`
	Line       int             `json:"line"`
	Kind       string          `json:"kind"`
	APIVersion string          `json:"apiVersion"`
	Name       string          `json:"name"`
	Accept     bool            `json:"accept"`
	Errors     []upstreamError `json:"errors"`
}

// upstreamRule is one x-kubernetes-validations rule of the CRDs' specs.
type upstreamRule struct {
	ID       string   `json:"id"`
	Kind     string   `json:"kind"`
	Path     string   `json:"path"`
	Versions []string `json:"versions"`
	Rule     string   `json:"rule"`
	Message  string   `json:"message"`
	FiredBy  []string `json:"firedBy"`
	Reason   string   `json:"reason"`
}

func readUpstream[T any](t *testing.T, name string) (string, []T) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(upstreamDir, name))
	if err != nil {
		t.Fatalf("%v (make gatewayapi-verdicts writes it)", err)
	}
	var f struct {
		Module string `json:"module"`
		Items  []T    `json:"items"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f.Module, f.Items
}

// upstreamKnown are the documents (file:line) where vmesh's verdict and the
// API server's differ, and why: nothing is listed without a reason.
var upstreamKnown = map[string]string{}

// conformancePlaceholdersTest are the conformance suite's placeholders, as
// conformancePlaceholders (conformance_test.go) and the oracle replace them.
var conformancePlaceholdersTest = strings.NewReplacer(
	"{GATEWAY_CLASS_NAME}", "istio",
	"{GATEWAY_CONTROLLER_NAME}", gatewayapi.ControllerName,
	"PLACEHOLDER_UNUSABLE_ADDRS", "192.0.2.1",
	"PLACEHOLDER_USABLE_ADDRS", "192.0.2.2",
)

// quotedPath is the path a kube-openapi error without a field path names
// at the start of its message (`"spec.addresses[0]" must validate ...`).
var quotedPath = regexp.MustCompile(`^"([^"]+)" `)

// docStart matches a YAML document separator line.
var docStart = regexp.MustCompile(`^---(\s|$)`)

// documentAt returns the text of the YAML document of data whose first
// key is on line (1-based), preceded by blank lines so that it keeps its
// line numbers.
func documentAt(data string, line int) string {
	lines := strings.Split(data, "\n")
	from, to := 0, len(lines)
	for i, l := range lines {
		if !docStart.MatchString(l) {
			continue
		}
		if i+1 < line {
			from = i + 1
		} else if i+1 > line {
			to = i
			break
		}
	}
	return strings.Repeat("\n", from) + strings.Join(lines[from:to], "\n") + "\n"
}

// upstreamField is an upstream error's path as vmesh names fields: inside
// spec without "spec." ("" for spec itself), metadata's as they are; ok is
// false for any other path.
func upstreamField(f string) (string, bool) {
	if f == "spec" {
		return "", true
	}
	if strings.HasPrefix(f, "metadata.") {
		return f, true
	}
	rest, ok := strings.CutPrefix(f, "spec.")
	return rest, ok
}

// vmeshField is the field of a vmesh error as the API server names it:
// a label's or annotation's problem is the map's (the key is in the
// message), vmesh's names the key.
func vmeshField(f string) string {
	for _, m := range []string{"metadata.labels.", "metadata.annotations."} {
		if strings.HasPrefix(f, m) {
			return strings.TrimSuffix(m, ".")
		}
	}
	return f
}

// TestUpstreamValidation: vmesh's verdict on every document of
// testdata/conformance and testdata/invalid of a kind vmesh decodes, read
// as a file through filestore, is the Kubernetes API server's
// (tools/gatewayapi-oracle: the CRDs' structural schema and CEL rules run
// by k8s.io/apiextensions-apiserver): the same accept or refuse, each
// refusal naming file:line:field, at the same field paths; every failed
// CEL rule's message at its field. And every CEL rule of the CRDs' specs
// fails for at least one document, or rules.json says why none can.
func TestUpstreamValidation(t *testing.T) {
	module, verdicts := readUpstream[upstreamVerdict](t, "verdicts.json")
	if want := gatewayapi.Module(); module != want {
		t.Fatalf("the verdicts come from %s, vmesh's schemas from %s: make gatewayapi-verdicts", module, want)
	}
	byFile := map[string][]upstreamVerdict{}
	for _, v := range verdicts {
		byFile[v.File] = append(byFile[v.File], v)
	}
	// Every document of a kind and version vmesh decodes has a verdict,
	// and every verdict a document.
	want := map[string]bool{}
	for _, sub := range []string{"conformance", "invalid"} {
		err := filepath.WalkDir(filepath.Join("testdata", sub), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
				return err
			}
			rel := filepath.ToSlash(strings.TrimPrefix(path, "testdata"+string(filepath.Separator)))
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			dec := yaml.NewDecoder(bytes.NewReader(data))
			for {
				var doc yaml.Node
				if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return fmt.Errorf("%s: %w", rel, err)
				}
				var head struct {
					APIVersion string `yaml:"apiVersion"`
					Kind       string `yaml:"kind"`
				}
				if len(doc.Content) == 0 || doc.Decode(&head) != nil {
					continue
				}
				group, version, _ := strings.Cut(head.APIVersion, "/")
				if _, ok := gatewayapi.StoreKind(head.Kind); ok && group == gatewayapi.Group && slices.Contains(gatewayapi.Versions(head.Kind), version) {
					want[fmt.Sprintf("%s:%d", rel, doc.Content[0].Line)] = true
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range verdicts {
		at := fmt.Sprintf("%s:%d", v.File, v.Line)
		if !want[at] {
			t.Errorf("%s: an upstream verdict, but no document of a kind vmesh decodes there (make gatewayapi-verdicts)", at)
		}
		delete(want, at)
	}
	for at := range want {
		t.Errorf("%s: no upstream verdict (make gatewayapi-verdicts)", at)
	}
	if len(verdicts) < 300 {
		t.Errorf("only %d upstream verdicts", len(verdicts))
	}

	var agree, refused, known int
	seenKnown := map[string]bool{}
	for file, vs := range byFile {
		data, err := os.ReadFile(filepath.Join("testdata", filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if strings.HasPrefix(file, "conformance/") {
			text = conformancePlaceholdersTest.Replace(text)
		}
		for _, v := range vs {
			at := fmt.Sprintf("%s:%d", v.File, v.Line)
			doc := documentAt(text, v.Line)
			d := filestore.DecodeFile(v.File, []byte(doc), filestore.Limits{})
			diffs := compareVerdict(v, d.Objects, d.Errors)
			if len(diffs) == 0 {
				agree++
				if !v.Accept {
					refused++
				}
				continue
			}
			if why, ok := upstreamKnown[at]; ok {
				seenKnown[at] = true
				known++
				t.Logf("%s: %s %s: known difference (%s): %s", at, v.Kind, v.Name, why, strings.Join(diffs, "; "))
				continue
			}
			for _, diff := range diffs {
				t.Errorf("%s: %s %s/%s: %s", at, v.Kind, v.APIVersion, v.Name, diff)
			}
		}
	}
	for at := range upstreamKnown {
		if !seenKnown[at] {
			t.Errorf("%s: listed in upstreamKnown, but vmesh and the API server agree (remove it)", at)
		}
	}
	t.Logf("%d documents: %d agree (%d refused by both), %d known differences", len(verdicts), agree, refused, known)

	_, rules := readUpstream[upstreamRule](t, "rules.json")
	fired := 0
	for _, r := range rules {
		switch {
		case len(r.FiredBy) > 0:
			fired++
		case r.Reason == "":
			t.Errorf("no document fails %s rule %s at %s (%s): add an invalid variant to testdata/invalid", r.Kind, r.ID, r.Path, r.Rule)
		default:
			t.Logf("rule %s %s %s fired by none: %s", r.ID, r.Kind, r.Path, r.Reason)
		}
	}
	if len(rules) < 150 {
		t.Errorf("only %d CEL rules in rules.json", len(rules))
	}
	t.Logf("%d CEL rules, %d fired by some document", len(rules), fired)
}

// compareVerdict lists how vmesh's decoding of one document differs from
// the upstream verdict.
func compareVerdict(v upstreamVerdict, objs []*store.Object, errs []store.ConfigError) []string {
	var diffs []string
	switch {
	case v.Accept && len(errs) > 0:
		for _, e := range errs {
			diffs = append(diffs, "upstream accepts, vmesh refuses: "+e.Error())
		}
		return diffs
	case v.Accept && len(objs) != 1:
		return []string{fmt.Sprintf("upstream accepts, vmesh decodes %d objects", len(objs))}
	case v.Accept:
		return nil
	case len(errs) == 0:
		var up []string
		for _, e := range v.Errors {
			up = append(up, e.Field+": "+e.Detail)
		}
		return []string{"upstream refuses (" + strings.Join(up, "; ") + "), vmesh accepts"}
	}
	// Both refuse: every vmesh error names file:line:field, and the fields
	// are the upstream ones.
	mine := map[string][]string{}
	for _, e := range errs {
		if e.File != v.File || e.Line < v.Line {
			diffs = append(diffs, fmt.Sprintf("vmesh error not at the document's file:line: %s", e.Error()))
		}
		mine[vmeshField(e.Field)] = append(mine[vmeshField(e.Field)], e.Message)
	}
	theirs := map[string]bool{}
	for _, e := range v.Errors {
		if strings.HasPrefix(e.Detail, "some validation rules were not checked") {
			continue
		}
		path := e.Field
		if m := quotedPath.FindStringSubmatch(e.Detail); path == "<nil>" && m != nil {
			path = m[1] // kube-openapi's oneOf and anyOf errors name their path in the message
		}
		f, ok := upstreamField(path)
		if !ok {
			diffs = append(diffs, fmt.Sprintf("upstream error outside spec: %s: %s", path, e.Detail))
			continue
		}
		theirs[f] = true
		msgs, ok := mine[f]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("upstream refuses spec.%s (%s: %s), vmesh does not", f, e.Type, e.Detail))
		case e.Rule != "" && !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, e.Detail) }):
			diffs = append(diffs, fmt.Sprintf("upstream rule %s fails at spec.%s (%s), vmesh says %q", e.Rule, f, e.Detail, msgs))
		}
	}
	for f, msgs := range mine {
		if !theirs[f] {
			diffs = append(diffs, fmt.Sprintf("vmesh refuses spec.%s (%s), upstream does not", f, strings.Join(msgs, "; ")))
		}
	}
	slices.Sort(diffs)
	return diffs
}
