package gatewayapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// conformanceDir holds the Gateway API's conformance manifests
// (sigs.k8s.io/gateway-api/conformance, the version go.mod names), copied
// with their origin by tools/istio-xds-oracle (make istio-xds): this module
// cannot import the conformance module.
const conformanceDir = "testdata/conformance"

// conformancePlaceholders are what the conformance suite replaces in its
// manifests before applying them: the class and controller (Istio's), and
// the addresses of the static-addresses test (documentation IPs here).
var conformancePlaceholders = strings.NewReplacer(
	"{GATEWAY_CLASS_NAME}", "istio",
	"{GATEWAY_CONTROLLER_NAME}", ControllerName,
	"PLACEHOLDER_UNUSABLE_ADDRS", "192.0.2.1",
	"PLACEHOLDER_USABLE_ADDRS", "192.0.2.2",
)

// conformanceRefused are the documents (file:line of the field) the
// standard-channel CRDs refuse, with the message: fields of the
// experimental channel, which an API server with the standard CRDs refuses
// too (kubectl's strict field validation: unknown field), and so does
// vmesh.
var conformanceRefused = map[string]string{
	"tests/httproute-retry.yaml:15": `unknown field "retry"`, // HTTPRouteRetry: experimental channel
	"tests/httproute-retry.yaml:26": `unknown field "retry"`,
}

// TestConformanceManifests: every document of the Gateway API's own
// conformance manifests (gateway and mesh profiles) of a kind vmesh reads
// decodes clean, as the standard-channel CRDs (schema and CEL rules)
// accept it on an API server: no problem, at any field, but the
// experimental fields conformanceRefused lists. The kinds vmesh does not read
// (ListenerSet, BackendTLSPolicy, UDPRoute, ...) are counted apart.
func TestConformanceManifests(t *testing.T) {
	decoded := map[string]int{}
	refused := map[string]bool{}
	other := map[string]int{}
	files := 0
	err := filepath.WalkDir(conformanceDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		files++
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// The placeholders the conformance suite fills in before it
		// applies a manifest.
		data = []byte(conformancePlaceholders.Replace(string(data)))
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc yaml.Node
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				t.Errorf("%s: %v", path, err)
				return nil
			}
			if len(doc.Content) == 0 {
				continue
			}
			var head struct {
				APIVersion string    `yaml:"apiVersion"`
				Kind       string    `yaml:"kind"`
				Metadata   yaml.Node `yaml:"metadata"`
				Spec       yaml.Node `yaml:"spec"`
			}
			if err := doc.Decode(&head); err != nil {
				t.Errorf("%s:%d: %v", path, doc.Line, err)
				continue
			}
			group, version, _ := strings.Cut(head.APIVersion, "/")
			if group != Group {
				continue
			}
			if _, ok := StoreKind(head.Kind); !ok {
				other[head.Kind]++
				continue
			}
			spec := &head.Spec
			if spec.Kind == 0 {
				spec = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			}
			d := DecodeSpec(head.Kind, version, spec)
			for _, p := range d.Problems {
				at := fmt.Sprintf("%s:%d", filepath.ToSlash(strings.TrimPrefix(path, conformanceDir+string(filepath.Separator))), d.Lines[p.Field])
				if want, ok := conformanceRefused[at]; ok && strings.Contains(p.Message, want) {
					refused[at] = true
					continue
				}
				t.Errorf("%s: %s %s: spec.%s: %s", at, head.Kind, version, p.Field, p.Message)
			}
			if d.Spec == nil && len(d.Problems) == 0 {
				t.Errorf("%s:%d: %s: no spec and no problem", path, doc.Line, head.Kind)
			}
			decoded[head.Kind]++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range decoded {
		total += n
	}
	t.Logf("%d files: decoded %v; kinds vmesh does not read: %v", files, decoded, other)
	// The manifests must be there (and many): an empty folder would pass.
	for _, kind := range []string{"GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "TCPRoute", "TLSRoute", "ReferenceGrant"} {
		if decoded[kind] == 0 {
			t.Errorf("no %s among the conformance manifests (make istio-xds copies them)", kind)
		}
	}
	for at, want := range conformanceRefused {
		if !refused[at] {
			t.Errorf("%s: not refused with %q (remove it from conformanceRefused)", at, want)
		}
	}
	if total < 150 {
		t.Errorf("only %d Gateway API documents decoded from %s", total, conformanceDir)
	}
}
