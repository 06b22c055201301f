package filestore_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vmesh/vmesh/filestore"
)

// FuzzDecode feeds arbitrary bytes to the decoder: it must never panic, and
// every error must name the file.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/valid/*.yaml")
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
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
