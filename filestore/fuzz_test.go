package filestore_test

import (
	"testing"

	"github.com/vmesh/vmesh/filestore"
)

// FuzzDecode feeds arbitrary bytes to the decoder: it must never panic, and
// every error must name the file. Its seed corpus, testdata/fuzz/FuzzDecode,
// holds each document of testdata/valid on its own: small seeds, so the
// fuzzer spends its executions mutating rather than minimising.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(weYAML("a", "1.1.1.1") + "  bogus: 1\n"))
	f.Add([]byte("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: x}\nspec: {hosts: [a], http: [{route: [{destination: {host: a}, weight: 200}]}]}\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("kind: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, errs := filestore.Decode("f.yaml", data)
		for _, e := range errs {
			if e.File != "f.yaml" || e.Message == "" {
				t.Fatalf("error without file or message: %+v", e)
			}
		}
		for _, o := range objs {
			if o.Spec == nil || o.Name == "" || o.Namespace == "" {
				t.Fatalf("incomplete object: %+v", o)
			}
			if p := filestore.Validate(o); len(p) > 0 {
				t.Fatalf("decoded object fails validation: %v", p)
			}
		}
	})
}
