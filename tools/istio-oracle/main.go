// Command istio-oracle computes Istio's own verdict (accept or reject) on a
// corpus of Istio YAML, for vmesh's differential validation test
// (filestore/istio_parity_test.go).
//
// It rebuilds the corpus from the istio.io/istio module source in the Go
// module cache (testdata, samples, and the cases of pkg/config/validation's
// unit-test tables, recorded by running those tests with a hook), then
// validates every document with Istio's code: the istioctl validate path
// (schema lookup, strict spec decoding, ValidateConfig), the CRD OpenAPI
// schema and CEL rules of Istio's CRDs (pkg/config/crd), and the API server's
// object-meta rules. It writes verdicts.json.
//
// Run it as `make istio-verdicts` from the repository root, or `go run .` here.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// istioModule is the module whose code and files are the oracle; keep it in
// step with go.mod.
const istioModule = "istio.io/istio"

func main() {
	corpus := flag.String("corpus", "corpus", "corpus directory (rebuilt unless -keep-corpus)")
	out := flag.String("out", "verdicts.json", "verdicts file to write")
	keep := flag.Bool("keep-corpus", false, "validate the existing corpus instead of rebuilding it")
	flag.Parse()
	log.SetFlags(0)

	src, version, err := moduleDir(istioModule)
	if err != nil {
		log.Fatal(err)
	}
	if !*keep {
		if err := os.RemoveAll(*corpus); err != nil {
			log.Fatal(err)
		}
		n, err := collectFiles(src, filepath.Join(*corpus, "istio"))
		if err != nil {
			log.Fatalf("collect files: %v", err)
		}
		log.Printf("corpus: %d documents from %s files", n, istioModule)
		n, err = harvestUnitTests(src, filepath.Join(*corpus, "unit"))
		if err != nil {
			log.Fatalf("harvest unit tests: %v", err)
		}
		log.Printf("corpus: %d documents from pkg/config/validation unit-test tables", n)
	}
	o, err := newOracle(src)
	if err != nil {
		log.Fatal(err)
	}
	vs, err := o.verdicts(*corpus)
	if err != nil {
		log.Fatal(err)
	}
	if err := checkOracle(vs); err != nil {
		log.Fatal(err)
	}
	if err := writeVerdicts(*out, istioModule+"@"+version, vs); err != nil {
		log.Fatal(err)
	}
	acc := 0
	for _, v := range vs {
		if v.Accepted {
			acc++
		}
	}
	log.Printf("%s: %d documents, Istio accepts %d, rejects %d", *out, len(vs), acc, len(vs)-acc)
}

// moduleDir returns the module cache directory and version of a module in
// this module's build list, downloading it if needed.
func moduleDir(path string) (dir, version string, err error) {
	if err := exec.Command("go", "mod", "download", path).Run(); err != nil {
		return "", "", fmt.Errorf("go mod download %s: %w", path, err)
	}
	b, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", path).Output()
	if err != nil {
		return "", "", fmt.Errorf("go list -m %s: %w", path, err)
	}
	dir, version, _ = strings.Cut(strings.TrimSpace(string(b)), " ")
	if dir == "" {
		return "", "", fmt.Errorf("module %s has no directory", path)
	}
	return dir, version, nil
}

// checkOracle holds the oracle to Istio's own expectations: every document
// of the CRD test corpus with an "_err" must be rejected, and every document
// of its *-valid.yaml files accepted.
func checkOracle(vs []Verdict) error {
	for _, v := range vs {
		valid := strings.Contains(v.Source, "/testdata/crds/") && strings.HasSuffix(v.Source, "-valid.yaml")
		switch {
		case v.Expect != "" && v.Accepted:
			return fmt.Errorf("%s: Istio's test expects %q, but the oracle accepts it", v.ID, v.Expect)
		case valid && !v.Accepted:
			return fmt.Errorf("%s: Istio's test expects it valid, but the oracle rejects it: %v", v.ID, v.Errors)
		}
	}
	return nil
}
